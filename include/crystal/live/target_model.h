// The seam between the plugin and the model of the target: link timing for timed
// completions and NCCL's choices for the tuner. Backed by crystal::model::NcclModel when
// that library is built (replay/model), else by a closed-form model of the ClusterConfig
// (ClusterTargetModel) with the same units, so the plugin works on its own.
#pragma once

#include <array>

#include <cstdint>
#include <memory>

#include "crystal/config/config.h"
#include "crystal/live/link_timing.h"
#include "crystal/live/ring_timing.h"
#include "crystal/model/nccl_model.h"

namespace crystal::live {

class TargetModel {
 public:
  virtual ~TargetModel() = default;
  // One NET connection of the target: per-step latency and the port's bandwidth.
  [[nodiscard]] virtual model::StepTiming netStep(model::Proto p, int channels) const = 0;
  // One channel's NET / NVLink step inside a communicator of `shape` (its fabric path).
  [[nodiscard]] virtual model::StepTiming netStep(model::Proto p, int channels,
                                                  const model::CommShape& shape) const = 0;
  [[nodiscard]] virtual model::StepTiming nvlStep(model::Proto p, int channels,
                                                  const model::CommShape& shape) const = 0;
  // One tree channel's NET / NVLink step (NCCL's Tree row: its latencies and caps).
  [[nodiscard]] virtual model::StepTiming treeNetStep(model::Proto p, int channels,
                                                      const model::CommShape& shape) const = 0;
  [[nodiscard]] virtual model::StepTiming treeNvlStep(model::Proto p, int channels,
                                                      const model::CommShape& shape) const = 0;
  [[nodiscard]] virtual model::CostTable costTable(model::Func f, std::uint64_t bytes,
                                                   const model::CommShape& shape) const = 0;
  [[nodiscard]] virtual model::Choice choose(model::Func f, std::uint64_t bytes,
                                             const model::CommShape& shape) const = 0;
  // The channels the target's NCCL runs (a, p) on for this call (choose's when they are its
  // pick; NCCL_ALGO/NCCL_PROTO may force another entry).
  [[nodiscard]] virtual int channels(model::Func f, std::uint64_t bytes,
                                     const model::CommShape& shape, model::Algo a,
                                     model::Proto p) const = 0;
  // The fixed cost of one operation on top of its steps (launch, NCCL's base latency), us:
  // what a virtual rank spends between two operations it runs back to back.
  [[nodiscard]] virtual double opOverheadUs(model::Algo a, model::Proto p) const = 0;
  // A virtual sender's GPU pace per channel of a NET p2p connection, GB/s (0 = none: the
  // NIC's): NCCL's p2p kernel writes chunks at it (model p2p_net_channel_gbps).
  [[nodiscard]] virtual double p2pNetChannelGBps() const = 0;
  // The target proxy thread's time per NET transfer, us (0 = none): one thread posts and
  // tests every NET transfer of a rank (model net_request_us).
  [[nodiscard]] virtual double netRequestUs() const = 0;
  // A broadcast's or reduce's (`f`) member kernel with peers that never make it wait (model
  // StepOptions::chain_broadcast, chain_reduce; empty: none).
  [[nodiscard]] virtual model::ChainKernel chainKernel(model::Func f, model::Proto p) const = 0;
  [[nodiscard]] virtual const char* name() const = 0;
};

// Link parameters of one NIC port from netStep(Simple, 1), never faster than the port's
// line rate in `cluster.fabric.nic` (netStep may describe a node's aggregate of NICs).
[[nodiscard]] LinkParams linkParams(const TargetModel& m, const ClusterConfig& cluster);

// How a communicator of `nranks` sits on the target, as the tuner and the model see it when
// every rank is alone on its emulated host: model::blockShape (gpus_per_node consecutive
// ranks per node).
using model::blockShape;

// The links a real rank of a communicator drives on the target (Simple protocol, whole
// links: channels share them through port queues, which is the model's per-channel share
// link / channels when all channels are busy).
struct CommLinks {
  model::CommShape shape;
  LinkParams nvl;     // NVLink/NVSwitch: to a member of the same node
  LinkParams net;     // one NIC port: to a member of another node
  LinkParams net_p2p; // `net` with the virtual sender's GPU pace of a p2p channel
  int nics_used = 1;  // NICs of a node the members drive (channel c uses NIC c % nics_used)
  RingHop ring_nvl;   // a ring channel's share of the GPU's NVLink
  RingHop ring_net;   // a ring channel's share of the node's NICs (one NIC at most)
  // The same per protocol (index model::Proto: LL, LL128, Simple; Simple's = the two above):
  // the model's hop latency of that protocol, and its bandwidth per byte on the wire (the
  // sizes the proxy posts: LL lines carry 8 data bytes in 16, LL128 120 in 128).
  std::array<RingHop, 3> ring_nvl_by{};
  std::array<RingHop, 3> ring_net_by{};
  // A chain member's cost of an operation per protocol (RingChannel::setChainOpCost).
  std::array<ChainOpCost, 3> chain_cost_by{};
  [[nodiscard]] bool sameNode(int a, int b) const {
    return a / shape.ranks_per_node == b / shape.ranks_per_node;
  }
};
[[nodiscard]] CommLinks commLinks(const TargetModel& m, const ClusterConfig& cluster, int nranks);

// Closed-form stand-in: ring (and tree for all-reduce) over the scale-out fabric, NIC
// bandwidth shared by the channels; latency = NIC latency + switch hops.
[[nodiscard]] std::unique_ptr<TargetModel> makeClusterTargetModel(const Config& cfg);
// NcclModel if it was linked into this build, else ClusterTargetModel.
[[nodiscard]] std::unique_ptr<TargetModel> makeTargetModel(const Config& cfg);

}  // namespace crystal::live
