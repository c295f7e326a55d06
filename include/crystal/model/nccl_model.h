// Model of NCCL 2.28 over the target topology: which algorithm/protocol/channel count NCCL
// would choose for a call, and how long it takes.
//
// Consumers: replay/ (simulate and live emulation), plugin/ tuner (cost table it reports to
// NCCL) and plugin/ timed completions (per-step link timing). Implemented in replay/model/.
// Pure and thread-safe after construction: no clocks, no I/O.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "crystal/config/config.h"
#include "crystal/model/chain_kernel.h"

namespace crystal::model {

// Numbering follows NCCL (NCCL_ALGO_*, NCCL_PROTO_*, ncclFunc_t) so tables index directly.
enum class Algo : int {
  Tree = 0,
  Ring = 1,
  CollNetDirect = 2,
  CollNetChain = 3,
  Nvls = 4,
  NvlsTree = 5,
  Pat = 6
};
enum class Proto : int { LL = 0, LL128 = 1, Simple = 2 };
enum class Func : int {
  Broadcast = 0,
  Reduce = 1,
  AllGather = 2,
  ReduceScatter = 3,
  AllReduce = 4,
  SendRecv = 5,
  Send = 6,
  Recv = 7,
  AllToAll = 8 /* crystal: grouped p2p to all members */
};
inline constexpr int kNumAlgos = 7;
inline constexpr int kNumProtos = 3;

std::string_view toString(Algo a);
std::string_view toString(Proto p);
std::string_view toString(Func f);

// nccl-tests' bus bandwidth factor: busBw = algBw x factor (AllReduce 2(n-1)/n,
// AllGather/ReduceScatter/AllToAll (n-1)/n, Broadcast/Reduce/p2p 1), with algBw = bytes/time.
[[nodiscard]] double busBwFactor(Func f, int nranks);

// How a communicator sits on the target topology.
struct CommShape {
  int nranks = 1;
  int nnodes = 1;          // distinct nodes among members
  int ranks_per_node = 1;  // members per node (assumed equal)
};

// A communicator of `nranks` in blocks of cluster.gpus_per_node consecutive ranks per node
// (rank order, the placement of a world or of a whole-node group).
[[nodiscard]] CommShape blockShape(const ClusterConfig& cluster, int nranks);

struct Choice {
  Algo algo = Algo::Ring;
  Proto proto = Proto::Simple;
  int channels = 1;
  double time_us = 0;  // predicted time of the whole call, all members starting together
};

// Per-step timing of one NET connection, used for timed completions of virtual peers.
struct StepTiming {
  double latency_us = 0;      // one-way, per step (NIC + fabric + proxy)
  double bandwidth_GBps = 0;  // per channel on this connection
  // Of latency_us, the GPU time per slice of a Simple ring collective that also keeps the
  // channel busy (steps.h StepOptions::ring_slice_us); 0 for other algorithms and protocols.
  double ring_unit_us = 0;
};

using CostTable = std::array<std::array<float, kNumProtos>, kNumAlgos>;

// Members of a ring that reach the collective at the same time, `count` consecutive ring
// positions starting after the previous class (ring order = rank order in the comm).
struct StartClass {
  double offset_us = 0;  // arrival relative to the earliest member
  int count = 1;
};

// `bytes` of a collective is NCCL's nBytes: the larger of the send and receive buffers
// (AllGather: the gathered output, ReduceScatter: the full input), as nccl-tests' "size".
// For AllToAll it is what one member sends in total (bytes per peer x nranks).
// Throws InputError (naming the config field) on a cluster/model config it cannot use.
class NcclModel {
 public:
  NcclModel(const ClusterConfig& cluster, const ModelConfig& model);

  // NCCL's choice for this call on the target (what the tuner reports).
  Choice choose(Func f, std::uint64_t bytes, const CommShape& shape) const;
  // The channels NCCL runs (a, p) on for this call (choose's when (a, p) is its pick).
  int channels(Func f, std::uint64_t bytes, const CommShape& shape, Algo a, Proto p) const;
  // Time of a call with a forced algorithm/protocol/channel count. Negative if the
  // combination is not supported/modelled for this call (NCCL would not pick it).
  double time(Func f, std::uint64_t bytes, const CommShape& shape, Algo a, Proto p,
              int channels) const;
  // Cost table in NCCL's layout (us, -1 = unsupported), for tuner getCollInfo.
  CostTable costTable(Func f, std::uint64_t bytes, const CommShape& shape) const;
  // Point-to-point transfer of `bytes` between two ranks (same node or not).
  // `comm_nranks`: ranks of the communicator (its channel count sets the channels per peer).
  double p2pTime(std::uint64_t bytes, bool same_node, int comm_nranks = 2) const;
  // Link timing of one NET connection step (virtual peer in another node).
  StepTiming netStep(Proto p, int channels) const;

  const ClusterConfig& cluster() const { return cluster_; }

  // --- crystal additions (model owner) -------------------------------------------------
  // Why `time()` is negative for this combination ("" when it is supported), e.g.
  // "NVLS not modelled" or "Tree only for AllReduce (tuning.cc:ncclTopoTuneModel)".
  [[nodiscard]] std::string_view whyUnsupported(Func f, const CommShape& shape, Algo a,
                                                Proto p) const;
  // NCCL's own estimate (ncclTopoGetAlgoTime: latency + bytes / bandwidth), us; -1 if off.
  [[nodiscard]] double ncclEstimate(Func f, std::uint64_t bytes, const CommShape& shape, Algo a,
                                    Proto p) const;
  // Channels NCCL builds for this communicator (comm->nChannels after connect.cc).
  [[nodiscard]] int commChannels(const CommShape& shape) const;
  // The fixed cost every operation of algorithm `a` / protocol `p` pays on top of its steps
  // (NCCL's base latency plus the kernel launch), us: part of `time()`.
  [[nodiscard]] double opOverheadUs(Algo a, Proto p) const;
  // What one channel of a NET p2p transfer moves per direction (the GPU's pace), GB/s; 0 =
  // no cap (model.overrides.p2p_net_channel_gbps).
  [[nodiscard]] double p2pNetChannelGBps() const;
  // The proxy thread's time per NET transfer (one isend or irecv, posted and tested to
  // completion), us: a rank's NET transfers complete no closer together than this
  // (model.overrides.net_request_us; allToAllTime's proxy bound).
  [[nodiscard]] double netRequestUs() const;
  // A chain member's kernel floor for a broadcast or reduce `f` (others: a broadcast's) of
  // protocol `p` (Simple only; see ChainKernel).
  [[nodiscard]] ChainKernel chainKernel(Func f, Proto p) const;
  // Ring collective whose members arrive at different times: finish time of each class
  // (us after the earliest arrival), from the step-level max-plus recurrence's closed form.
  [[nodiscard]] std::vector<double> ringFinishTimes(Func f, std::uint64_t bytes,
                                                    const CommShape& shape, Proto p, int channels,
                                                    std::span<const StartClass> starts) const;
  // A ring call as `rank` sees it: the time until its own part is done. Broadcast and reduce
  // (a chain through the ring order, from `root` / to it): the pipeline runs at the whole
  // chain's pace; a member is done once the last chunk has come its hops down it: time() less
  // each later hop's latency and chunk crossing, the chain's last rank sees time(). The head
  // only sends: its last chunk waits for a free slot of the next member's NCCL_STEPS-slot
  // window, not for that member, so it ends up to a window ahead, no sooner than its own
  // chunks cross its link. All-gather,
  // reduce-scatter, all-reduce: the rank's own finish (ringFinishTimes, every member arriving
  // at once), at most time(), the last member's: a member fewer hops behind the ring's
  // slowest link ends earlier. Other calls: time().
  [[nodiscard]] double timeAtRank(Func f, std::uint64_t bytes, const CommShape& shape, Algo a,
                                  Proto p, int channels, int rank, int root) const;
  // Per operation of `iters` back to back as `rank` sees them (nccl-tests' loop: one event
  // before the first, one after the last; rank < 0: the last member to finish). A ring
  // broadcast or reduce streams through its chain from one operation into the next, so its
  // fill is paid once and its head ends a send window ahead (docs/model.md "Broadcast and
  // reduce back to back"); other calls take timeAtRank (time() for rank < 0) each.
  [[nodiscard]] double loopTimeAtRank(Func f, std::uint64_t bytes, const CommShape& shape, Algo a,
                                      Proto p, int channels, int rank, int root, int iters) const;
  // All-to-all: every member sends `bytes_per_peer` to each of the nranks-1 others
  // (grouped p2p), NVLink inside a node, NICs shared across nodes.
  [[nodiscard]] double allToAllTime(std::uint64_t bytes_per_peer, const CommShape& shape) const;
  // The CPU time of NCCL's enqueue of one all-to-all as grouped ncclSend/ncclRecv to every
  // rank (2 N calls and ncclGroupEnd), us: model.overrides a2a_group_host_us +
  // a2a_peer_host_us x N. Measured with real NCCL 2.28.9 (no emulation, Socket, the
  // emulation's 16 channels) on the H200's host: 14.8 us at N = 8, 26.7 at N = 16
  // (docs/model.md "Host time of a grouped all-to-all"). Back-to-back calls (nccl-tests'
  // loop, `crystal simulate --sweep`) run no faster than this; inside a training step the
  // host works ahead of the GPU, so allToAllTime() leaves it out.
  [[nodiscard]] double allToAllHostUs(const CommShape& shape) const;
  // netStep for a connection of a given communicator (NIC share and fabric path of `shape`).
  [[nodiscard]] StepTiming netStep(Proto p, int channels, const CommShape& shape) const;
  // Same for an NVLink (NVSwitch) step between two members on one node of `shape`.
  [[nodiscard]] StepTiming nvlStep(Proto p, int channels, const CommShape& shape) const;
  // The same for one channel of a tree (NCCL's Tree latencies and per-channel caps, as
  // treeRun times a tree all-reduce): the plugin's step-by-step tree timing.
  [[nodiscard]] StepTiming treeNetStep(Proto p, int channels, const CommShape& shape) const;
  [[nodiscard]] StepTiming treeNvlStep(Proto p, int channels, const CommShape& shape) const;
  // Same as time(), computed by running the step-level max-plus recurrence instead of its
  // closed form (O(ranks per node x steps)); for validation and benchmarks.
  [[nodiscard]] double timeByRecurrence(Func f, std::uint64_t bytes, const CommShape& shape, Algo a,
                                        Proto p, int channels) const;

 private:
  struct Impl;  // topology + parsed options (replay/model/nccl_model.cc)
  ClusterConfig cluster_;
  ModelConfig model_;
  std::shared_ptr<const Impl> impl_;
};

}  // namespace crystal::model
