// The seam between the plugin and the model of the target: link timing for timed
// completions and NCCL's choices for the tuner. Backed by crystal::model::NcclModel when
// that library is built (replay/model), else by a closed-form model of the ClusterConfig
// (ClusterTargetModel) with the same units, so the plugin works on its own.
#pragma once

#include <cstdint>
#include <memory>

#include "crystal/config/config.h"
#include "crystal/live/link_timing.h"
#include "crystal/model/nccl_model.h"

namespace crystal::live {

class TargetModel {
 public:
  virtual ~TargetModel() = default;
  // One NET connection of the target: per-step latency and the port's bandwidth.
  [[nodiscard]] virtual model::StepTiming netStep(model::Proto p, int channels) const = 0;
  [[nodiscard]] virtual model::CostTable costTable(model::Func f, std::uint64_t bytes,
                                                   const model::CommShape& shape) const = 0;
  [[nodiscard]] virtual model::Choice choose(model::Func f, std::uint64_t bytes,
                                             const model::CommShape& shape) const = 0;
  [[nodiscard]] virtual const char* name() const = 0;
};

// Link parameters of one NIC port from netStep(Simple, 1), never faster than the port's
// line rate in `cluster.fabric.nic` (netStep may describe a node's aggregate of NICs).
[[nodiscard]] LinkParams linkParams(const TargetModel& m, const ClusterConfig& cluster);

// Closed-form stand-in: ring (and tree for all-reduce) over the scale-out fabric, NIC
// bandwidth shared by the channels; latency = NIC latency + switch hops.
[[nodiscard]] std::unique_ptr<TargetModel> makeClusterTargetModel(const Config& cfg);
// NcclModel if it was linked into this build, else ClusterTargetModel.
[[nodiscard]] std::unique_ptr<TargetModel> makeTargetModel(const Config& cfg);

}  // namespace crystal::live
