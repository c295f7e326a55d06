#include "virtual_slices.h"

#include <fmt/core.h>

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

}  // namespace crystal::host
