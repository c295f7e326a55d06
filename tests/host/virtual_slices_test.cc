// Same-node virtual slices (research note §9.1, §9.4): the busId/dev rules, peerInfo field by
// field, and allGatherInfo run through a test-only model of what NCCL 2.28.9 builds from the
// gathered slices of one node.
#include "virtual_slices.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "crystal/base/error.h"

namespace crystal::host {
namespace {

// ---- busId, dev, peerInfo -----------------------------------------------------------------

// NCCL's busId text form "%04lx:%02lx:%02lx.%01lx" and its parse (hex digits, ':'/'.'
// skipped), written from the documented format.
std::int64_t roundTripBusId(std::int64_t id) {
  char text[32];
  std::snprintf(text, sizeof(text), "%04llx:%02llx:%02llx.%01llx",
                static_cast<unsigned long long>(id >> 20),
                static_cast<unsigned long long>((id & 0xff000) >> 12),
                static_cast<unsigned long long>((id & 0xff0) >> 4),
                static_cast<unsigned long long>(id & 0xf));
  std::string hex;
  for (const char* p = text; *p; ++p)
    if (*p != ':' && *p != '.') hex += *p;
  return std::strtoll(hex.c_str(), nullptr, 16);
}

TEST(VirtualSlicesSameNode, BusIdValues) {
  EXPECT_EQ(sameNodeBusId(0), 0xfffe01000LL);
  EXPECT_EQ(sameNodeBusId(1), 0xfffe02000LL);
  EXPECT_EQ(sameNodeBusId(7), 0xfffe08000LL);
  EXPECT_EQ(sameNodeBusId(31), 0xfffe20000LL);
  std::set<std::int64_t> seen;
  for (int slot = 0; slot < 32; ++slot) {
    const std::int64_t id = sameNodeBusId(slot);
    EXPECT_EQ(roundTripBusId(id), id) << slot;
    EXPECT_TRUE(seen.insert(id).second) << slot;
  }
}

TEST(VirtualSlicesSameNode, DevRule) {
  // R at slot 3 with NVML index 5: the V at slot 5 takes 3.
  const int expect[8] = {0, 1, 2, -1, 4, 3, 6, 7};
  for (int slot = 0; slot < 8; ++slot)
    if (slot != 3) {
      EXPECT_EQ(sameNodeDev(slot, 3, 5), expect[slot]) << slot;
    }
  for (int size : {2, 8, 32})
    for (int real_slot = 0; real_slot < size; ++real_slot)
      for (int real_dev = 0; real_dev < 32; ++real_dev) {
        std::set<int> devs{real_dev};
        for (int slot = 0; slot < size; ++slot) {
          if (slot == real_slot) continue;
          const int dev = sameNodeDev(slot, real_slot, real_dev);
          EXPECT_LT(dev, 32);
          EXPECT_TRUE(devs.insert(dev).second) << size << " " << real_slot << " " << real_dev;
        }
      }
}

wire::PeerInfo realPeer() {
  wire::PeerInfo r;
  r.rank = 27;
  r.cuda_dev = 0;
  r.nvml_dev = 2;
  r.gdr_support = 1;
  r.host_hash = 0x1111222233334444ULL;
  r.pid_hash = 0x5555666677778888ULL;
  r.shm_dev = 0x2a;
  r.bus_id = 0x18000;
  r.comm = 0x7f0000001000ULL;
  r.cuda_comp_cap = 90;
  r.total_global_mem = 150ULL << 30;
  std::memset(r.fabric_info, 0x5a, sizeof(r.fabric_info));
  r.cu_mem_support = 1;
  r.version = 22809;
  return r;
}

TEST(VirtualSlicesSameNode, PeerInfoFields) {
  const wire::PeerInfo r = realPeer();
  const VirtualRankContext v{.comm_hash = 0xabc, .rank = 26, .nranks = 64};
  const wire::PeerInfo p = sameNodePeerInfo(v, r, /*slot=*/2, /*real_slot=*/3);
  EXPECT_EQ(p.rank, 26);
  EXPECT_EQ(p.nvml_dev, 3);  // slot 2 == R's NVML index: takes R's slot
  EXPECT_EQ(p.cuda_dev, 3);
  EXPECT_EQ(p.gdr_support, 1);
  EXPECT_EQ(p.host_hash, r.host_hash);
  EXPECT_NE(p.pid_hash, r.pid_hash);
  EXPECT_EQ(p.shm_dev, r.shm_dev);
  EXPECT_EQ(p.bus_id, 0xfffe03000LL);
  EXPECT_EQ(p.comm, 0u);
  EXPECT_EQ(p.cuda_comp_cap, 90);
  EXPECT_EQ(p.total_global_mem, 150ULL << 30);
  for (auto b : p.fabric_info) EXPECT_EQ(b, 0);
  EXPECT_EQ(p.cu_mem_support, 1);
  EXPECT_EQ(p.version, 22809);
  EXPECT_EQ(sameNodePeerInfo(v, r, 5, 3).nvml_dev, 5);
}

TEST(VirtualSlicesSameNode, PeerInfoPidHashes) {
  wire::PeerInfo r = realPeer();
  std::set<std::uint64_t> seen{r.pid_hash};
  for (int slot = 0; slot < 8; ++slot) {
    if (slot == 3) continue;
    const VirtualRankContext v{.comm_hash = 0xabc, .rank = 24 + slot, .nranks = 64};
    EXPECT_TRUE(seen.insert(sameNodePeerInfo(v, r, slot, 3).pid_hash).second) << slot;
  }
  // A real pidHash equal to the derived one is stepped around.
  const VirtualRankContext v{.comm_hash = 0xabc, .rank = 24, .nranks = 64};
  r.pid_hash = sameNodePeerInfo(v, realPeer(), 0, 3).pid_hash;
  EXPECT_NE(sameNodePeerInfo(v, r, 0, 3).pid_hash, r.pid_hash);
}

TEST(VirtualSlicesSameNode, PeerInfoRefusals) {
  wire::PeerInfo r = realPeer();
  const VirtualRankContext v{.comm_hash = 0xabc, .rank = 24, .nranks = 64};
  EXPECT_THROW((void)sameNodePeerInfo(v, r, 3, 3), ProtocolError);
  EXPECT_THROW((void)sameNodePeerInfo(v, r, 32, 3), ProtocolError);
  EXPECT_THROW((void)sameNodePeerInfo(v, r, 0, -1), ProtocolError);
  r.bus_id = sameNodeBusId(0);
  EXPECT_THROW((void)sameNodePeerInfo(v, r, 0, 3), ProtocolError);
}

// ---- allGatherInfo --------------------------------------------------------------------------

using Ring = std::vector<int>;  // one channel's intra-node ring order, as the search gives it

// R's slice as ncclTopoPreset writes it for rings[c] on c < min(ring, tree channels); the
// tree and NVLS values are arbitrary markers that must travel unchanged.
wire::AllGatherInfo realSlice(int real, const std::vector<Ring>& rings, int ring_ch, int tree_ch) {
  wire::AllGatherInfo g;
  g.graph_info[wire::kAlgoRing].n_channels = ring_ch;
  g.graph_info[wire::kAlgoTree].n_channels = tree_ch;
  g.graph_info[wire::kAlgoRing].bw_intra = 40.f;
  g.cpu_arch = 1;
  g.cpu_vendor = 2;
  auto& t = g.topo_ranks;
  t.cross_nic_ring = 1;
  t.nvls_head_num = 1;
  for (int c = 0; c < std::min(ring_ch, tree_ch); ++c) {
    const Ring& ring = rings[static_cast<std::size_t>(c)];
    const auto i = std::find(ring.begin(), ring.end(), real) - ring.begin();
    t.ring_recv[c] = ring.front();
    t.ring_send[c] = ring.back();
    t.ring_prev[c] = i == 0 ? -1 : ring[static_cast<std::size_t>(i - 1)];
    t.ring_next[c] = ring[static_cast<std::size_t>(i)] == ring.back()
                         ? -1
                         : ring[static_cast<std::size_t>(i + 1)];
    t.tree_to_parent[c] = t.tree_to_child0[c] = t.tree_to_child1[c] = ring.back();
    t.nvls_heads[c] = ring.front();
  }
  return g;
}

// Test-only model of NCCL 2.28.9 for a comm whose ranks are one node: init.cc's node grouping
// (a node = a distinct ringRecv[0]), ncclTopoPostset (ringRecv/ringSend from the rank numbered
// ringRecv[0], ringPrev/ringNext from every rank, channels below the min-reduced
// min(ring, tree) count), connectRings with one node (prev[recv] = send, next[send] = recv).
struct NodeRings {
  int nodes = 0;
  std::vector<std::map<int, int>> prev, next;  // per channel
};
NodeRings modelNccl(const std::map<int, wire::AllGatherInfo>& slices) {
  NodeRings out;
  std::set<int> first_ranks;
  int n_channels = wire::kMaxChannels;
  for (const auto& [r, s] : slices) {
    first_ranks.insert(s.topo_ranks.ring_recv[0]);
    n_channels = std::min({n_channels, s.graph_info[wire::kAlgoRing].n_channels,
                           s.graph_info[wire::kAlgoTree].n_channels});
  }
  out.nodes = static_cast<int>(first_ranks.size());
  const auto first = slices.find(slices.begin()->second.topo_ranks.ring_recv[0]);
  if (out.nodes != 1 || first == slices.end()) return out;
  const wire::TopoRanks& node = first->second.topo_ranks;
  for (int c = 0; c < n_channels; ++c) {
    auto& prev = out.prev.emplace_back();
    auto& next = out.next.emplace_back();
    for (const auto& [r, s] : slices) {
      prev[r] = s.topo_ranks.ring_prev[c];
      next[r] = s.topo_ranks.ring_next[c];
    }
    prev[node.ring_recv[c]] = node.ring_send[c];
    next[node.ring_send[c]] = node.ring_recv[c];
  }
  return out;
}

std::map<int, wire::AllGatherInfo> gatherNode(const std::vector<int>& members, int real,
                                              const wire::AllGatherInfo& real_slice) {
  std::map<int, wire::AllGatherInfo> slices{{real, real_slice}};
  for (int m : members) {
    if (m == real) continue;
    const VirtualRankContext v{.comm_hash = 0x77, .rank = m, .nranks = 64};
    slices[m] = sameNodeGraphInfo(v, real_slice, real, members);
  }
  return slices;
}

// Every channel: one cycle over all members (ncclBuildRings from any rank), prev the inverse
// of next, R's neighbours those of its own ring.
void expectRings(const std::vector<int>& members, int real, const std::vector<Ring>& rings,
                 int n_channels) {
  const NodeRings model =
      modelNccl(gatherNode(members, real, realSlice(real, rings, n_channels, n_channels)));
  ASSERT_EQ(model.nodes, 1);
  ASSERT_EQ(model.next.size(), static_cast<std::size_t>(n_channels));
  const auto n = static_cast<int>(members.size());
  for (int c = 0; c < n_channels; ++c) {
    const Ring& ring = rings[static_cast<std::size_t>(c)];
    auto& next = model.next[static_cast<std::size_t>(c)];
    auto& prev = model.prev[static_cast<std::size_t>(c)];
    std::set<int> visited;
    int at = ring.front();
    for (int i = 0; i < n; ++i) {
      ASSERT_TRUE(visited.insert(at).second) << "channel " << c << " revisits " << at;
      ASSERT_TRUE(next.count(at)) << "channel " << c << " leaves the node at " << at;
      if (i == n - 1) {
        EXPECT_EQ(at, ring.back()) << "channel " << c;
      }
      EXPECT_EQ(prev.at(next.at(at)), at) << "channel " << c;
      at = next.at(at);
    }
    EXPECT_EQ(at, ring.front()) << "channel " << c << " does not loop back";
    const auto i = std::find(ring.begin(), ring.end(), real) - ring.begin();
    EXPECT_EQ(next.at(real), ring[static_cast<std::size_t>((i + 1) % n)]) << "channel " << c;
    EXPECT_EQ(prev.at(real), ring[static_cast<std::size_t>((i + n - 1) % n)]) << "channel " << c;
  }
}

std::vector<int> iota(int first, int count) {
  std::vector<int> v(static_cast<std::size_t>(count));
  std::iota(v.begin(), v.end(), first);
  return v;
}

TEST(VirtualSlicesSameNode, ChainExactValues) {
  const std::vector<int> node = iota(24, 8);
  const int real = 27;
  // Only R's view matters (ends and its own neighbours), so the rings are given partially.
  // Channel 0: R in the middle, H = 29, T = 24, R's run 31-27-25.
  // Channel 1: R at the head, run 27-30. Channel 2: R at the tail, run 24-27.
  // Channel 3: run starts at the head (p == H = 29).
  const std::vector<Ring> rings = {
      {29, 31, 27, 25, 24}, {27, 30, 24}, {31, 24, 27}, {29, 27, 25, 24}};
  const wire::AllGatherInfo r = realSlice(real, rings, 4, 4);
  const std::map<int, std::array<int, 8>> expect_next = {
      // chain 0: 29 26 28 30 31 27 25 24; chain 1: 27 30 25 26 28 29 31 24
      // chain 2: 31 25 26 28 29 30 24 27; chain 3: 29 27 25 26 28 30 31 24
      // (indexed by rank - 24; R's entry 0 is unused)
      {0, {-1, 24, 28, 0, 30, 26, 31, 27}},
      {1, {-1, 26, 28, 0, 29, 31, 25, 24}},
      {2, {27, 26, 28, 0, 29, 30, 24, 25}},
      {3, {-1, 26, 28, 0, 30, 27, 31, 24}}};
  for (int m : node) {
    if (m == real) continue;
    const VirtualRankContext v{.comm_hash = 1, .rank = m, .nranks = 32};
    const wire::AllGatherInfo g = sameNodeGraphInfo(v, r, real, node);
    for (const auto& [c, next] : expect_next)
      EXPECT_EQ(g.topo_ranks.ring_next[c], next[static_cast<std::size_t>(m - 24)]) << c << " " << m;
  }
  const VirtualRankContext v26{.comm_hash = 1, .rank = 26, .nranks = 32};
  const wire::AllGatherInfo g = sameNodeGraphInfo(v26, r, real, node);
  EXPECT_EQ(g.topo_ranks.ring_prev[0], 29);
  EXPECT_EQ(g.topo_ranks.ring_prev[1], 25);
  EXPECT_EQ(g.topo_ranks.ring_prev[2], 25);
  const VirtualRankContext v29{.comm_hash = 1, .rank = 29, .nranks = 32};
  EXPECT_EQ(sameNodeGraphInfo(v29, r, real, node).topo_ranks.ring_prev[0], -1);
}

TEST(VirtualSlicesSameNode, CopiesAllButOwnNeighbours) {
  const std::vector<int> node = iota(0, 4);
  const std::vector<Ring> rings(8, Ring{2, 0, 3, 1});
  // Preset fills min(ring 6, tree 3) = 3 channels; channels 3.. stay R's zeros.
  const wire::AllGatherInfo r = realSlice(0, rings, 6, 3);
  const VirtualRankContext v{.comm_hash = 1, .rank = 3, .nranks = 4};
  const wire::AllGatherInfo g = sameNodeGraphInfo(v, r, 0, node);
  wire::AllGatherInfo masked = g;
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(g.topo_ranks.ring_prev[c], 0);
    EXPECT_EQ(g.topo_ranks.ring_next[c], 1);
    masked.topo_ranks.ring_prev[c] = r.topo_ranks.ring_prev[c];
    masked.topo_ranks.ring_next[c] = r.topo_ranks.ring_next[c];
  }
  EXPECT_EQ(std::memcmp(&masked, &r, sizeof(r)), 0);
}

TEST(VirtualSlicesSameNode, ChainRefusals) {
  const std::vector<int> node = iota(8, 4);
  const VirtualRankContext v{.comm_hash = 1, .rank = 9, .nranks = 16};
  const wire::AllGatherInfo good = realSlice(10, {Ring{8, 10, 9, 11}}, 1, 1);
  EXPECT_NO_THROW((void)sameNodeGraphInfo(v, good, 10, node));
  const auto bad = [&](auto edit) {
    wire::AllGatherInfo r = good;
    edit(r.topo_ranks);
    return r;
  };
  const auto refuses = [&](const wire::AllGatherInfo& r) {
    EXPECT_THROW((void)sameNodeGraphInfo(v, r, 10, node), ProtocolError);
  };
  refuses(bad([](wire::TopoRanks& t) { t.ring_recv[0] = 12; }));  // end not a member
  refuses(bad([](wire::TopoRanks& t) { t.ring_next[0] = 3; }));   // neighbour not a member
  refuses(bad([](wire::TopoRanks& t) { t.ring_recv[0] = 10; }));  // R is H but has a prev
  refuses(bad([](wire::TopoRanks& t) { t.ring_prev[0] = -1; }));  // no prev, not H
  refuses(bad([](wire::TopoRanks& t) { t.ring_prev[0] = 9, t.ring_next[0] = 8; }));  // next is H
  refuses(bad([](wire::TopoRanks& t) { t.ring_prev[0] = 11; }));                     // prev is T
  refuses(bad([](wire::TopoRanks& t) { t.ring_send[0] = 8; }));  // H == T on 4 ranks
  // Run 8-10-9 spans H..T but 11 is left over.
  refuses(bad([](wire::TopoRanks& t) { t.ring_send[0] = 9; }));
  wire::AllGatherInfo no_channels = good;
  no_channels.graph_info[wire::kAlgoTree].n_channels = 0;
  refuses(no_channels);
  const std::vector<int> unsorted = {9, 8, 10, 11};
  EXPECT_THROW((void)sameNodeGraphInfo(v, good, 10, unsorted), ProtocolError);
  EXPECT_THROW((void)sameNodeGraphInfo(v, good, 12, node), ProtocolError);  // R not a member
  const VirtualRankContext self{.comm_hash = 1, .rank = 10, .nranks = 16};
  EXPECT_THROW((void)sameNodeGraphInfo(self, good, 10, node), ProtocolError);
}

TEST(VirtualSlicesSameNode, RingsCloseAtHeadMiddleTail) {
  const std::vector<int> node = iota(24, 8);
  const int real = 27;
  std::vector<Ring> rings;
  for (int pos : {0, 3, 7}) {  // R at the head, in the middle, at the tail
    Ring ring = {24, 25, 26, 28, 29, 30, 31};
    ring.insert(ring.begin() + pos, real);
    rings.push_back(ring);
  }
  expectRings(node, real, rings, 3);
}

TEST(VirtualSlicesSameNode, RandomRingsClose) {
  std::mt19937 rng(20261204);
  for (int size : {2, 3, 4, 8}) {
    for (int trial = 0; trial < 200; ++trial) {
      // Contiguous nodes at a random base, or any increasing set of ranks (a split).
      std::vector<int> members;
      if (trial % 2 == 0) {
        members = iota(size * static_cast<int>(rng() % 8), size);
      } else {
        std::vector<int> all = iota(0, 64);
        std::shuffle(all.begin(), all.end(), rng);
        members.assign(all.begin(), all.begin() + size);
        std::sort(members.begin(), members.end());
      }
      const int real = members[rng() % members.size()];
      const int n_channels = 1 + static_cast<int>(rng() % wire::kMaxChannels);
      std::vector<Ring> rings;
      for (int c = 0; c < n_channels; ++c) {
        Ring ring = members;
        std::shuffle(ring.begin(), ring.end(), rng);
        rings.push_back(ring);
      }
      SCOPED_TRACE(::testing::Message() << "size " << size << " trial " << trial << " R " << real);
      expectRings(members, real, rings, n_channels);
    }
  }
}

// A node without real ranks copies R's node: the member at the same local index, every rank
// moved by the node distance (-1 stays), values past Preset's channels untouched; a rank off
// such a copy is refused.
TEST(VirtualSlicesMirror, CopiesRsNodeShifted) {
  const std::vector<int> node = iota(24, 8);
  const int real = 27;
  const std::vector<Ring> rings = {{29, 31, 27, 25, 24, 26, 28, 30}, {27, 30, 24, 25, 26, 28, 29, 31}};
  const wire::AllGatherInfo r = realSlice(real, rings, 2, 2);
  for (int local = 0; local < 8; ++local) {
    const VirtualRankContext v{.comm_hash = 1, .rank = 40 + local, .nranks = 64};
    const wire::AllGatherInfo g = mirroredGraphInfo(v, r, real, node, 40);
    const int as = 24 + local;
    const wire::AllGatherInfo twin =
        as == real ? r : sameNodeGraphInfo({.comm_hash = 1, .rank = as, .nranks = 64}, r, real, node);
    for (int c = 0; c < 2; ++c) {
      const auto moved = [](int x) { return x < 0 ? x : x + 16; };
      EXPECT_EQ(g.topo_ranks.ring_recv[c], moved(twin.topo_ranks.ring_recv[c]));
      EXPECT_EQ(g.topo_ranks.ring_send[c], moved(twin.topo_ranks.ring_send[c]));
      EXPECT_EQ(g.topo_ranks.ring_prev[c], moved(twin.topo_ranks.ring_prev[c])) << local << c;
      EXPECT_EQ(g.topo_ranks.ring_next[c], moved(twin.topo_ranks.ring_next[c])) << local << c;
      EXPECT_EQ(g.topo_ranks.tree_to_parent[c], moved(twin.topo_ranks.tree_to_parent[c]));
    }
    EXPECT_EQ(g.topo_ranks.ring_recv[2], 0);  // past Preset's channels: calloc's zeros
    EXPECT_EQ(g.topo_ranks.nvls_heads[0], 29 + 16);
  }
  // The copy of R itself is R's own slice, moved.
  const VirtualRankContext v43{.comm_hash = 1, .rank = 43, .nranks = 64};
  EXPECT_EQ(mirroredGraphInfo(v43, r, real, node, 40).topo_ranks.ring_prev[0], 31 + 16);
  const VirtualRankContext v48{.comm_hash = 1, .rank = 48, .nranks = 64};
  EXPECT_THROW((void)mirroredGraphInfo(v48, r, real, node, 40), ProtocolError);
  const VirtualRankContext v25{.comm_hash = 1, .rank = 25, .nranks = 64};
  EXPECT_THROW((void)mirroredGraphInfo(v25, r, real, node, 24), ProtocolError);
}

}  // namespace
}  // namespace crystal::host
