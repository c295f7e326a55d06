// Model of NCCL 2.28 over the target topology: which algorithm/protocol/channel count NCCL
// would choose for a call, and how long it takes.
//
// Consumers: replay/ (simulate and live emulation), plugin/ tuner (cost table it reports to
// NCCL) and plugin/ timed completions (per-step link timing). Implemented in replay/model/.
// Pure and thread-safe after construction: no clocks, no I/O.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "crystal/config/config.h"

namespace crystal::model {

// Numbering follows NCCL (NCCL_ALGO_*, NCCL_PROTO_*, ncclFunc_t) so tables index directly.
enum class Algo : int { Tree = 0, Ring = 1, CollNetDirect = 2, CollNetChain = 3, Nvls = 4,
                        NvlsTree = 5, Pat = 6 };
enum class Proto : int { LL = 0, LL128 = 1, Simple = 2 };
enum class Func : int { Broadcast = 0, Reduce = 1, AllGather = 2, ReduceScatter = 3,
                        AllReduce = 4, SendRecv = 5, Send = 6, Recv = 7,
                        AllToAll = 8 /* crystal: grouped p2p to all members */ };
inline constexpr int kNumAlgos = 7;
inline constexpr int kNumProtos = 3;

std::string_view toString(Algo a);
std::string_view toString(Proto p);
std::string_view toString(Func f);

// How a communicator sits on the target topology.
struct CommShape {
  int nranks = 1;
  int nnodes = 1;          // distinct nodes among members
  int ranks_per_node = 1;  // members per node (assumed equal)
};

struct Choice {
  Algo algo = Algo::Ring;
  Proto proto = Proto::Simple;
  int channels = 1;
  double time_us = 0;  // predicted time of the whole call, all members starting together
};

// Per-step timing of one NET connection, used for timed completions of virtual peers.
struct StepTiming {
  double latency_us = 0;    // one-way, per step (NIC + fabric + proxy)
  double bandwidth_GBps = 0;  // per channel on this connection
};

using CostTable = std::array<std::array<float, kNumProtos>, kNumAlgos>;

class NcclModel {
 public:
  NcclModel(const ClusterConfig& cluster, const ModelConfig& model);

  // NCCL's choice for this call on the target (what the tuner reports).
  Choice choose(Func f, std::uint64_t bytes, const CommShape& shape) const;
  // Time of a call with a forced algorithm/protocol/channel count. Negative if the
  // combination is not supported/modelled for this call (NCCL would not pick it).
  double time(Func f, std::uint64_t bytes, const CommShape& shape, Algo a, Proto p,
              int channels) const;
  // Cost table in NCCL's layout (us, -1 = unsupported), for tuner getCollInfo.
  CostTable costTable(Func f, std::uint64_t bytes, const CommShape& shape) const;
  // Point-to-point transfer of `bytes` between two ranks (same node or not).
  double p2pTime(std::uint64_t bytes, bool same_node) const;
  // Link timing of one NET connection step (virtual peer in another node).
  StepTiming netStep(Proto p, int channels) const;

  const ClusterConfig& cluster() const { return cluster_; }

 private:
  ClusterConfig cluster_;
  ModelConfig model_;
};

}  // namespace crystal::model
