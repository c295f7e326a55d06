#include "virtual_slices.h"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "crystal/base/error.h"
#include "crystal/host/bootstrap_host.h"
#include "nccl_hash.h"
#include "net.h"

namespace crystal::host {

const char* kindName(AllGatherKind k) noexcept {
  switch (k) {
    case AllGatherKind::RingAddresses:
      return "ringAllInfo";
    case AllGatherKind::PeerInfo:
      return "peerInfo";
    case AllGatherKind::GraphInfo:
      return "allGatherInfo";
    case AllGatherKind::RingConnInfo:
      return "ringConnInfo";
    case AllGatherKind::SplitInfo:
      return "commSplitInfo";
  }
  return "?";
}

AllGatherKind classifyAllGather(int index, int slice_bytes, int nranks) {
  struct Expect {
    AllGatherKind kind;
    int bytes;
  };
  static constexpr Expect kInit[] = {{AllGatherKind::RingAddresses, sizeof(wire::RingData)},
                                     {AllGatherKind::PeerInfo, sizeof(wire::PeerInfo)},
                                     {AllGatherKind::GraphInfo, sizeof(wire::AllGatherInfo)}};
  if (index < 3) {
    if (slice_bytes != kInit[index].bytes)
      throw ProtocolError(fmt::format(
          "all-gather #{} ({}) of a {}-rank comm has {}-byte slices, NCCL 2.28.9 sends {}", index,
          kindName(kInit[index].kind), nranks, slice_bytes, kInit[index].bytes));
    return kInit[index].kind;
  }
  if (slice_bytes == sizeof(wire::RingConnInfo)) return AllGatherKind::RingConnInfo;
  if (slice_bytes == sizeof(wire::SplitInfo)) return AllGatherKind::SplitInfo;
  throw ProtocolError(
      fmt::format("all-gather #{} has {}-byte slices: not a ringConnInfo (2) or commSplitInfo (8) "
                  "of NCCL 2.28.9",
                  index, slice_bytes));
}

std::uint64_t virtualHostHash(std::uint64_t comm_hash, int rank) noexcept {
  NcclHash h;
  static constexpr char kSalt[] = "crystal-virtual-host";
  h.eat(std::as_bytes(std::span(kSalt)));
  h.eatValue(comm_hash);
  h.eatValue(rank);
  return h.digest();
}

wire::RingData virtualRingData(const VirtualRankContext& v) {
  wire::RingData d;
  d.peer_address = aliasAddress(v.rank, v.p2p_port);
  // No proxy connection ever targets a rank on another host (note §1.6); the alias is given
  // so a stray one lands on the host, which refuses its handshake type.
  d.peer_proxy = d.peer_address;
  d.peer_uds = virtualHostHash(v.comm_hash, v.rank) ^ 0x5544530000000000ULL;
  return d;  // RAS fields stay zero (NCCL_RAS_ENABLE=0 for emulation)
}

namespace {
// PCI bus numbers of the 8 GPUs of a DGX H100/H200 node, as busId = bus << 12.
constexpr std::int64_t kDgxBus[8] = {0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb};
}  // namespace

wire::PeerInfo virtualPeerInfo(const VirtualRankContext& v, const wire::PeerInfo& real) {
  wire::PeerInfo p;
  const int local = v.gpus_per_node > 0 ? v.rank % v.gpus_per_node : 0;
  p.rank = v.rank;
  p.cuda_dev = local;
  p.nvml_dev = local;
  p.gdr_support = 1;
  p.host_hash = virtualHostHash(v.comm_hash, v.rank);
  p.pid_hash = p.host_hash ^ 0x9e3779b97f4a7c15ULL;
  p.shm_dev = 0;
  p.bus_id = kDgxBus[local % 8] << 12;
  p.comm = 0;
  p.cuda_comp_cap = real.cuda_comp_cap;
  p.total_global_mem = real.total_global_mem;
  p.cu_mem_support = real.cu_mem_support;
  p.version = kSupportedNcclVersion;
  return p;
}

wire::AllGatherInfo virtualGraphInfo(const VirtualRankContext& v, const wire::AllGatherInfo& real) {
  wire::AllGatherInfo g;
  for (int a = 0; a < wire::kNumAlgorithms; ++a) g.graph_info[a] = real.graph_info[a];
  auto& t = g.topo_ranks;
  t.cross_nic_ring = 0;
  for (int c = 0; c < wire::kMaxChannels; ++c) {
    t.ring_recv[c] = t.ring_send[c] = v.rank;
    t.ring_prev[c] = t.ring_next[c] = -1;
    t.tree_to_parent[c] = t.tree_to_child0[c] = t.tree_to_child1[c] = v.rank;
    t.nvls_heads[c] = 0;
  }
  t.nvls_head_num = 0;
  g.cpu_arch = real.cpu_arch;
  g.cpu_vendor = real.cpu_vendor;
  g.local_ranks = 1;
  return g;
}

// ---- same-node mode ----------------------------------------------------------------------

namespace {
// The NVML pair table ncclTopoCheckP2p reads is 32x32 (research note §1), so XML `dev`
// values, hence node slots, stay below 32.
constexpr int kMaxNodeSlots = 32;
constexpr std::int64_t kFakeBusDomain = 0xfffe;

void checkSlot(int slot, const char* what) {
  if (slot < 0 || slot >= kMaxNodeSlots)
    throw ProtocolError(
        fmt::format("same-node {} {} outside [0, {}): NCCL's NVML pair table has 32 entries", what,
                    slot, kMaxNodeSlots));
}
}  // namespace

std::int64_t sameNodeBusId(int slot) noexcept {
  return (kFakeBusDomain << 20) | (static_cast<std::int64_t>(slot + 1) << 12);
}

int sameNodeDev(int slot, int real_slot, int real_dev) noexcept {
  // R holds real_dev and leaves real_slot free: the one V that would clash takes it.
  return slot == real_dev ? real_slot : slot;
}

wire::PeerInfo sameNodePeerInfo(const VirtualRankContext& v, const wire::PeerInfo& real, int slot,
                                int real_slot) {
  checkSlot(slot, "slot");
  checkSlot(real_slot, "real slot");
  if (slot == real_slot)
    throw ProtocolError(
        fmt::format("virtual rank {} given the real rank's node slot {}", v.rank, slot));
  wire::PeerInfo p;
  p.rank = v.rank;
  p.nvml_dev = sameNodeDev(slot, real_slot, real.nvml_dev);
  p.cuda_dev = p.nvml_dev;
  // Same hostHash and shmDev as R, or ncclTopoCheckP2p refuses P2P between them.
  p.host_hash = real.host_hash;
  p.shm_dev = real.shm_dev;
  p.gdr_support = real.gdr_support;
  // R's pidHash would make init treat V as a thread of R's process and dereference V's comm.
  p.pid_hash = virtualHostHash(v.comm_hash, v.rank) ^ 0x9e3779b97f4a7c15ULL;
  if (p.pid_hash == real.pid_hash) p.pid_hash = ~p.pid_hash;
  p.bus_id = sameNodeBusId(slot);
  if (p.bus_id == real.bus_id)  // initTransportsRank: "Duplicate GPU detected"
    throw ProtocolError(
        fmt::format("real rank's busId {:#x} is the fake one of slot {}", real.bus_id, slot));
  p.comm = 0;
  p.cuda_comp_cap = real.cuda_comp_cap;
  p.total_global_mem = real.total_global_mem;
  p.cu_mem_support = real.cu_mem_support;
  p.version = kSupportedNcclVersion;
  return p;  // fabric_info zero: never asked with MNNVL off
}

namespace {
// What R's ncclTopoPreset wrote for one channel: the ends of the node's ring (ringRecv,
// ringSend) and R's own neighbours on it (-1 where R is an end).
struct RingView {
  int head = -1;
  int tail = -1;
  int prev = -1;
  int next = -1;
};

// init.cc runs ncclTopoPreset with comm->nChannels = min(tree, ring) graph channels; the
// topoRanks of later channels stay as calloc left them.
[[nodiscard]] int presetChannels(const wire::AllGatherInfo& real) {
  const int n = std::min(real.graph_info[wire::kAlgoRing].n_channels,
                         real.graph_info[wire::kAlgoTree].n_channels);
  if (n < 1 || n > wire::kMaxChannels)
    throw ProtocolError(fmt::format("real rank's allGatherInfo has {} ring/tree channels", n));
  return n;
}

void checkMembers(std::span<const int> members, int real_rank, int v_rank) {
  if (!std::is_sorted(members.begin(), members.end()) ||
      std::adjacent_find(members.begin(), members.end()) != members.end())
    throw ProtocolError(fmt::format("node members {} not in increasing rank order", members));
  const auto has = [&](int r) { return std::binary_search(members.begin(), members.end(), r); };
  if (!has(real_rank) || !has(v_rank) || v_rank == real_rank)
    throw ProtocolError(fmt::format("node {} must hold real rank {} and virtual rank {}", members,
                                    real_rank, v_rank));
}

// Validates R's view against Preset's rules and the node; returns R's own run [p] R [n].
[[nodiscard]] std::vector<int> realSegment(std::span<const int> members, int real_rank,
                                           const RingView& r, int c) {
  const auto has = [&](int x) { return std::binary_search(members.begin(), members.end(), x); };
  const bool ends_ok = has(r.head) && has(r.tail) && (r.head == r.tail) == (members.size() == 1);
  const bool nbrs_ok = (r.prev == -1 || (has(r.prev) && r.prev != real_rank)) &&
                       (r.next == -1 || (has(r.next) && r.next != real_rank)) &&
                       (r.prev == -1 || r.prev != r.next);
  // Preset leaves prev (next) at -1 exactly when R is the ring's first (last) rank.
  const bool agree =
      (r.prev == -1) == (r.head == real_rank) && (r.next == -1) == (r.tail == real_rank);
  if (!ends_ok || !nbrs_ok || !agree)
    throw ProtocolError(fmt::format(
        "channel {}: real rank {}'s ring (recv {}, send {}, prev {}, next {}) is no ring over "
        "node {}",
        c, real_rank, r.head, r.tail, r.prev, r.next, members));
  std::vector<int> seg;
  if (r.prev != -1) seg.push_back(r.prev);
  seg.push_back(real_rank);
  if (r.next != -1) seg.push_back(r.next);
  return seg;
}

// The one chain per channel that all V agree on: [H] + free + [p R n] + [T], where an end
// already in R's run is not repeated (the run then sits at that end) and free = the other
// members in rank order. Simple path over all members from H to T through p-R-n.
[[nodiscard]] std::vector<int> nodeChain(std::span<const int> members, int real_rank,
                                         const RingView& r, int c) {
  const std::vector<int> seg = realSegment(members, real_rank, r, c);
  const bool run_at_head = seg.front() == r.head;
  const bool run_at_tail = seg.back() == r.tail;
  // An end inside R's run anywhere else (say next == head) would close the ring early.
  const bool end_inside = std::count(seg.begin(), seg.end(), r.head) != (run_at_head ? 1 : 0) ||
                          std::count(seg.begin(), seg.end(), r.tail) != (run_at_tail ? 1 : 0);
  std::vector<int> free;
  for (int m : members) {
    const bool placed = m == r.head || m == r.tail || std::count(seg.begin(), seg.end(), m) > 0;
    if (!placed) free.push_back(m);
  }
  std::vector<int> chain;
  if (run_at_head) {
    chain = seg;
    chain.insert(chain.end(), free.begin(), free.end());
  } else {
    chain.push_back(r.head);
    chain.insert(chain.end(), free.begin(), free.end());
    chain.insert(chain.end(), seg.begin(), seg.end());
  }
  if (!run_at_tail) chain.push_back(r.tail);
  // With the run at both ends no other member may be left over.
  const bool leftover = run_at_head && run_at_tail && seg.size() != members.size();
  if (end_inside || leftover || chain.size() != members.size())
    throw ProtocolError(fmt::format("channel {}: no ring over node {} from {} to {} through {}", c,
                                    members, r.head, r.tail, seg));
  return chain;
}
}  // namespace

wire::AllGatherInfo sameNodeGraphInfo(const VirtualRankContext& v, const wire::AllGatherInfo& real,
                                      int real_rank, std::span<const int> members) {
  checkMembers(members, real_rank, v.rank);
  const int n_channels = presetChannels(real);
  // graphInfo, cpu and the node-level topoRanks as R sent them; so is localRanks, which
  // 2.28.9 neither writes nor reads (calloc's 0 on every real rank).
  wire::AllGatherInfo g = real;
  auto& t = g.topo_ranks;
  for (int c = 0; c < n_channels; ++c) {
    const auto& rt = real.topo_ranks;
    const RingView view{rt.ring_recv[c], rt.ring_send[c], rt.ring_prev[c], rt.ring_next[c]};
    const std::vector<int> chain = nodeChain(members, real_rank, view, c);
    const auto at = std::find(chain.begin(), chain.end(), v.rank);
    t.ring_prev[c] = at == chain.begin() ? -1 : *(at - 1);
    t.ring_next[c] = at + 1 == chain.end() ? -1 : *(at + 1);
  }
  return g;
}

wire::AllGatherInfo mirroredGraphInfo(const VirtualRankContext& v, const wire::AllGatherInfo& real,
                                      int real_rank, std::span<const int> real_members,
                                      int node_base) {
  if (real_members.empty())
    throw ProtocolError("mirrored node: the real rank's node has no members");
  const int shift = node_base - real_members.front();
  const int local = v.rank - node_base;
  if (shift == 0 || local < 0 || local >= static_cast<int>(real_members.size()))
    throw ProtocolError(fmt::format("rank {} is not on a copy of the {}-rank node at {}", v.rank,
                                    real_members.size(), real_members.front()));
  const int as = real_members[static_cast<std::size_t>(local)];
  VirtualRankContext twin = v;
  twin.rank = as;
  wire::AllGatherInfo g = as == real_rank ? real : sameNodeGraphInfo(twin, real, real_rank,
                                                                      real_members);
  const int n_channels = presetChannels(real);
  auto& t = g.topo_ranks;
  const auto move = [&](std::int32_t& r) {
    if (r >= 0) r += shift;
  };
  for (int c = 0; c < n_channels; ++c) {
    for (std::int32_t* f : {&t.ring_recv[c], &t.ring_send[c], &t.ring_prev[c], &t.ring_next[c],
                            &t.tree_to_parent[c], &t.tree_to_child0[c], &t.tree_to_child1[c]})
      move(*f);
  }
  for (int h = 0; h < std::clamp(t.nvls_head_num, 0, wire::kMaxChannels); ++h)
    move(t.nvls_heads[h]);
  return g;
}

}  // namespace crystal::host
