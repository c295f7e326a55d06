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

// ---- same-node mode: V on the real rank R's node looks like another GPU of R's host ----
// (research note §9.1, §9.4). `slot` = V's index in the node's member list (rank order).

// busId of the virtual GPU at local index `slot` (0 <= slot < 255): (0xfffe << 20) |
// ((slot + 1) << 12) = "fffe:0s:00.0". Round-trips NCCL's int64ToBusId/busIdToInt64, names no
// CUDA-visible device (so p2pCanConnect skips CUDA peer checks), distinct per slot.
[[nodiscard]] std::int64_t sameNodeBusId(int slot) noexcept;
// NVML index (= XML dev) of the virtual GPU at `slot` when R (local index real_slot) has NVML
// index real_dev: `slot`, except the V whose slot equals real_dev takes real_slot; thus
// distinct, != real_dev, and < 32 for nodes of <= 32 GPUs.
[[nodiscard]] int sameNodeDev(int slot, int real_slot, int real_dev) noexcept;
// ncclPeerInfo of V on R's node: hostHash, shmDev, gdrSupport and GPU properties copied from
// R's slice; own pidHash (never R's); busId/nvmlDev/cudaDev from the slot rules above.
// Throws ProtocolError for slots outside [0, 32), slot == real_slot, or a busId equal to R's.
[[nodiscard]] wire::PeerInfo sameNodePeerInfo(const VirtualRankContext& v,
                                              const wire::PeerInfo& real, int slot, int real_slot);
// allGatherInfo of V on R's node, from R's slice (R = global rank real_rank; members = the
// node's global ranks in increasing order, R and v.rank among them). Everything is R's
// except ring_prev/ring_next on the channels ncclTopoPreset filled (c < min(ring, tree
// nChannels)): there V takes its neighbours on one chain per channel that every V derives
// alike, a simple path over all members from R's ring_recv[c] to ring_send[c] through R's own
// prev-R-next, -1 at the chain ends. Throws ProtocolError if R's slice cannot be such a node.
[[nodiscard]] wire::AllGatherInfo sameNodeGraphInfo(const VirtualRankContext& v,
                                                    const wire::AllGatherInfo& real, int real_rank,
                                                    std::span<const int> members);

// allGatherInfo of V on a node without a real rank, as a copy of R's node: V plays the member
// at its own local index of R's node (`real_members`, a full node) and every rank in that
// slice moves by node_base - real_members[0] (-1 stays). NCCL then sees nodes of the target's
// size (nNodes, localRanks, inter-node rings and trees as on the target) instead of one node
// per virtual rank; the crossNic swap of odd nodes applies to a whole copied node alike.
[[nodiscard]] wire::AllGatherInfo mirroredGraphInfo(const VirtualRankContext& v,
                                                    const wire::AllGatherInfo& real, int real_rank,
                                                    std::span<const int> real_members,
                                                    int node_base);

}  // namespace crystal::host
