#include "model_prediction.h"

#include <memory>

#include "crystal/live/target_model.h"

double modelTimeUs(int op, std::size_t bytes, std::string& choice) {
  static const std::unique_ptr<crystal::live::TargetModel> model = [] {
    crystal::Config cfg;
    return crystal::live::makeTargetModel(cfg);
  }();
  using crystal::model::Func;
  if (op == 3) {
    const auto st = model->netStep(crystal::model::Proto::Simple, 1);
    choice = "p2p";
    return st.latency_us + static_cast<double>(bytes) / (st.bandwidth_GBps * 1e3);
  }
  const Func f[] = {Func::AllReduce, Func::AllGather, Func::ReduceScatter};
  const auto c = model->choose(f[op], bytes, crystal::model::CommShape{2, 2, 1});
  choice = std::string(crystal::model::toString(c.algo)) + "/" +
           std::string(crystal::model::toString(c.proto)) + "/" + std::to_string(c.channels);
  return c.time_us;
}
