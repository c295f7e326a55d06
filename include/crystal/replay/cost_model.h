// The seam between the replay engine and whatever prices communication.
//
// The engine asks two questions only: how long does a collective take once every member
// has arrived, and how long does a point-to-point transfer take once both sides are
// posted. NcclCostModel answers them with crystal::model::NcclModel (NCCL 2.28 over the
// target topology); tests answer them with closed forms.
#pragma once

#include <cstdint>
#include <memory>

#include "crystal/config/config.h"
#include "crystal/model/nccl_model.h"

namespace crystal::replay {

class CostModel {
 public:
  virtual ~CostModel() = default;
  // NCCL's choice and the call's time with all members starting together.
  [[nodiscard]] virtual model::Choice collective(model::Func f, std::uint64_t bytes,
                                                 const model::CommShape& shape) const = 0;
  // Time in microseconds of one send/recv pair of `bytes`.
  [[nodiscard]] virtual double p2pUs(std::uint64_t bytes, bool same_node) const = 0;
};

// NcclModel behind the seam (links crystal_model).
//
// NIC sharing: NcclModel prices one communicator alone, and a communicator with k members
// per node drives only their k rail NICs. In a training job every GPU of a node runs its own
// copy of that communicator at the same time (8 DP rings, 8 pipeline sends), so with fewer
// NICs than GPUs they share them. Where nics_per_node < gpus_per_node, a communicator with
// fewer members per node than GPUs is timed on a cluster with one NIC per GPU of the
// fair-share bandwidth (nic bandwidth x nics / gpus), with the algorithm, protocol and
// channels NCCL picks on the real cluster.
class NcclCostModel final : public CostModel {
 public:
  NcclCostModel(const ClusterConfig& cluster, const ModelConfig& model);
  ~NcclCostModel() override;
  [[nodiscard]] model::Choice collective(model::Func f, std::uint64_t bytes,
                                         const model::CommShape& shape) const override;
  [[nodiscard]] double p2pUs(std::uint64_t bytes, bool same_node) const override;

 private:
  std::unique_ptr<model::NcclModel> model_;
  std::unique_ptr<model::NcclModel> shared_;  // fair-share NICs; null when every GPU has one
  int gpus_per_node_ = 1;
};

}  // namespace crystal::replay
