// What a virtual rank contributes to each global all-gather of NCCL 2.28.9's init
// (research note §1.3): built from the host's addressing and from the first real rank's
// slice of the same all-gather, so that the real rank's min/max/AND reductions and its
// ring/tree construction come out as if every peer were a GPU like its own on its own node.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "wire.h"

namespace crystal::host {

enum class AllGatherKind { RingAddresses, PeerInfo, GraphInfo, RingConnInfo, SplitInfo };
[[nodiscard]] const char* kindName(AllGatherKind k) noexcept;

// The all-gathers a comm runs, in order: three at init, then 2-byte ringConnInfo (buffer
// registration on) and 8-byte split infos. Throws ProtocolError for any other size.
[[nodiscard]] AllGatherKind classifyAllGather(int index, int slice_bytes, int nranks);

struct VirtualRankContext {
  std::uint64_t comm_hash = 0;
  int rank = 0;
  int nranks = 0;
  int gpus_per_node = 8;
  std::uint16_t p2p_port = 0;
};

// bootstrapRingData of virtual rank: P2P (and proxy) address = its loopback alias.
[[nodiscard]] wire::RingData virtualRingData(const VirtualRankContext& v);
// ncclPeerInfo: version 22809, own host hash, GPU properties copied from `real`.
[[nodiscard]] wire::PeerInfo virtualPeerInfo(const VirtualRankContext& v,
                                             const wire::PeerInfo& real);
// allGatherInfo: graphInfo and cpu copied from `real` (copying never moves a min/max);
// "flat" topoRanks: the rank is its own 1-GPU node on all 64 channels.
[[nodiscard]] wire::AllGatherInfo virtualGraphInfo(const VirtualRankContext& v,
                                                   const wire::AllGatherInfo& real);
// Host hash a virtual rank reports (distinct per rank and comm; never a real rank's).
[[nodiscard]] std::uint64_t virtualHostHash(std::uint64_t comm_hash, int rank) noexcept;

}  // namespace crystal::host
