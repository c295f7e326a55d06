// Picks the model behind TargetModel: NcclModel (replay/model) when linked, else the
// closed-form cluster model.
#include "crystal/live/target_model.h"

namespace crystal::live {

#ifdef CRYSTAL_HAVE_NCCL_MODEL
namespace {
class NcclTargetModel final : public TargetModel {
 public:
  explicit NcclTargetModel(const Config& cfg) : m_(cfg.cluster, cfg.model) {}
  model::StepTiming netStep(model::Proto p, int channels) const override {
    return m_.netStep(p, channels);
  }
  model::StepTiming netStep(model::Proto p, int channels,
                            const model::CommShape& s) const override {
    return m_.netStep(p, channels, s);
  }
  model::StepTiming nvlStep(model::Proto p, int channels,
                            const model::CommShape& s) const override {
    return m_.nvlStep(p, channels, s);
  }
  model::StepTiming treeNetStep(model::Proto p, int channels,
                                const model::CommShape& s) const override {
    return m_.treeNetStep(p, channels, s);
  }
  model::StepTiming treeNvlStep(model::Proto p, int channels,
                                const model::CommShape& s) const override {
    return m_.treeNvlStep(p, channels, s);
  }
  model::CostTable costTable(model::Func f, std::uint64_t bytes,
                             const model::CommShape& s) const override {
    return m_.costTable(f, bytes, s);
  }
  model::Choice choose(model::Func f, std::uint64_t bytes,
                       const model::CommShape& s) const override {
    return m_.choose(f, bytes, s);
  }
  int channels(model::Func f, std::uint64_t bytes, const model::CommShape& s, model::Algo a,
               model::Proto p) const override {
    return m_.channels(f, bytes, s, a, p);
  }
  double p2pNetChannelGBps() const override { return m_.p2pNetChannelGBps(); }
  double netRequestUs() const override { return m_.netRequestUs(); }
  model::ChainKernel chainKernel(model::Func f, model::Proto p) const override {
    return m_.chainKernel(f, p);
  }
  double opOverheadUs(model::Algo a, model::Proto p) const override {
    return m_.opOverheadUs(a, p);
  }
  const char* name() const override { return "NcclModel"; }

 private:
  model::NcclModel m_;
};
}  // namespace

std::unique_ptr<TargetModel> makeTargetModel(const Config& cfg) {
  return std::make_unique<NcclTargetModel>(cfg);
}
#else
std::unique_ptr<TargetModel> makeTargetModel(const Config& cfg) {
  return makeClusterTargetModel(cfg);
}
#endif

}  // namespace crystal::live
