// NcclModel behind the engine's CostModel seam.
#include <memory>

#include "crystal/replay/cost_model.h"

namespace crystal::replay {

NcclCostModel::NcclCostModel(const ClusterConfig& cluster, const ModelConfig& model)
    : model_(std::make_unique<model::NcclModel>(cluster, model)),
      gpus_per_node_(cluster.gpus_per_node) {
  const int nics = cluster.fabric.nics_per_node;
  if (nics > 0 && nics < cluster.gpus_per_node) {
    ClusterConfig fair = cluster;
    fair.fabric.nics_per_node = cluster.gpus_per_node;
    fair.fabric.nic.bandwidth_GBps =
        cluster.fabric.nic.bandwidth_GBps * nics / cluster.gpus_per_node;
    shared_ = std::make_unique<model::NcclModel>(fair, model);
  }
}

NcclCostModel::~NcclCostModel() = default;

model::Choice NcclCostModel::collective(model::Func f, std::uint64_t bytes,
                                        const model::CommShape& shape) const {
  model::Choice c = model_->choose(f, bytes, shape);
  if (shared_ && shape.nnodes > 1 && shape.ranks_per_node < gpus_per_node_) {
    const double t = shared_->time(f, bytes, shape, c.algo, c.proto, c.channels);
    c.time_us = t >= 0 ? t : shared_->choose(f, bytes, shape).time_us;
  }
  return c;
}

double NcclCostModel::p2pUs(std::uint64_t bytes, bool same_node) const {
  if (shared_ && !same_node) return shared_->p2pTime(bytes, same_node);
  return model_->p2pTime(bytes, same_node);
}

}  // namespace crystal::replay
