// NcclModel behind the engine's CostModel seam.
#include <memory>

#include "crystal/replay/cost_model.h"

namespace crystal::replay {

NcclCostModel::NcclCostModel(const ClusterConfig& cluster, const ModelConfig& model)
    : model_(std::make_unique<model::NcclModel>(cluster, model)) {}

NcclCostModel::~NcclCostModel() = default;

model::Choice NcclCostModel::collective(model::Func f, std::uint64_t bytes,
                                        const model::CommShape& shape) const {
  return model_->choose(f, bytes, shape);
}

double NcclCostModel::p2pUs(std::uint64_t bytes, bool same_node) const {
  return model_->p2pTime(bytes, same_node);
}

}  // namespace crystal::replay
