// HostOptions::p2p_peers against a fake real rank: the virtual ranks of its target node come
// back as GPUs of its own host (peerInfo), each with the real rank's topology XML cloned for
// it in the intra-node all-gather, node-ring slices that close one cycle per channel, and
// the intra-node barrier answered; a connection setup toward such a rank fails the comm with
// a clear message. Nodes of 8, 3 and 2 ranks, the real rank at the head, middle and tail.
#include <gtest/gtest.h>

#include <algorithm>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <set>
#include <thread>

#include "crystal/base/error.h"
#include "crystal/host/bootstrap_host.h"
#include "fake_rank.h"
#include "topo_xml.h"
#include "virtual_slices.h"

namespace crystal::host {
namespace {

using test::FakeRank;

struct NodeCase {
  int nranks, gpus_per_node, real;
};

std::unique_ptr<BootstrapHost> p2pHost(int gpus_per_node) {
  HostOptions o;
  o.stall_timeout = std::chrono::milliseconds(20000);
  o.gpus_per_node = gpus_per_node;
  o.p2p_peers = true;
  auto h = std::make_unique<BootstrapHost>(o);
  h->start();
  return h;
}

std::vector<int> membersOf(const NodeCase& c) {
  const int base = c.real / c.gpus_per_node * c.gpus_per_node;
  std::vector<int> m;
  for (int r = base; r < std::min(base + c.gpus_per_node, c.nranks); ++r) m.push_back(r);
  return m;
}

// The real rank's allGatherInfo as ncclTopoPreset leaves it on a node ring: channel 0 runs
// the members upwards, channel 1 downwards; H/T are the ring's ends, R's prev/next its
// neighbours (-1 at an end).
wire::AllGatherInfo nodeGraphInfo(int real, const std::vector<int>& members) {
  wire::AllGatherInfo g = test::fakeGraphInfo(real);
  for (int c = 0; c < 2; ++c) {
    std::vector<int> order = members;
    if (c == 1) std::reverse(order.begin(), order.end());
    const auto at = std::find(order.begin(), order.end(), real) - order.begin();
    auto& t = g.topo_ranks;
    t.ring_recv[c] = order.front();
    t.ring_send[c] = order.back();
    t.ring_prev[c] = at == 0 ? -1 : order[static_cast<std::size_t>(at - 1)];
    t.ring_next[c] =
        at + 1 == static_cast<long>(order.size()) ? -1 : order[static_cast<std::size_t>(at + 1)];
    t.tree_to_parent[c] = t.tree_to_child0[c] = t.tree_to_child1[c] = order.front();
  }
  g.local_ranks = static_cast<int>(members.size());
  return g;
}

bool waitDestroyed(BootstrapHost& h) {
  for (int i = 0; i < 400; ++i) {
    for (const auto& s : h.comms())
      if (s.phase == CommPhase::Destroyed) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

class IntraNode : public ::testing::TestWithParam<NodeCase> {};

TEST_P(IntraNode, NodeMembersBecomeGpusOfTheRealRanksHost) {
  const NodeCase c = GetParam();
  auto host = p2pHost(c.gpus_per_node);
  const UniqueId id = host->mintUniqueId();
  (void)host->declareComm(id, {c.nranks, {c.real}, kSupportedNcclVersion, "world"});
  const std::vector<int> members = membersOf(c);
  const int n = static_cast<int>(members.size());
  const int real_local =
      static_cast<int>(std::find(members.begin(), members.end(), c.real) - members.begin());

  FakeRank f(id, c.real, c.nranks);
  (void)f.init();
  std::vector<std::vector<std::byte>> xml;
  const auto own_slot = topo_xml::buildSlot({.rank = c.real, .dev = 0, .bus_id = 0x18000});
  f.initAllGathersWith(nodeGraphInfo(c.real, members), kSupportedNcclVersion,
                       [&] { xml = f.intraNodeAllGather(members, own_slot); });
  f.intraNodeBarrier(members);
  f.intraNodeBarrier(members);  // a second instance (NCCL_TOPO_DUMP_FILE runs two)

  const wire::PeerInfo& me = f.peer_info[static_cast<std::size_t>(c.real)];
  std::set<int> devs{me.nvml_dev};
  std::set<std::int64_t> buses{me.bus_id};
  ASSERT_EQ(static_cast<int>(xml.size()), n);
  EXPECT_EQ(xml[static_cast<std::size_t>(real_local)], own_slot);
  for (int j = 0; j < n; ++j) {
    const int m = members[static_cast<std::size_t>(j)];
    if (m == c.real) continue;
    const wire::PeerInfo& p = f.peer_info[static_cast<std::size_t>(m)];
    EXPECT_EQ(p.host_hash, me.host_hash) << m;
    EXPECT_EQ(p.shm_dev, me.shm_dev) << m;
    EXPECT_NE(p.pid_hash, me.pid_hash) << m;
    EXPECT_EQ(p.bus_id, sameNodeBusId(j)) << m;
    devs.insert(p.nvml_dev);
    buses.insert(p.bus_id);
    // Its XML slot: the real one with this member's GPU in place of the real GPU.
    const auto gpu = topo_xml::findGpu(xml[static_cast<std::size_t>(j)], m);
    EXPECT_EQ(gpu.rank, m);
    EXPECT_EQ(gpu.dev, p.nvml_dev) << m;
    EXPECT_EQ(gpu.busid, topo_xml::busIdText(p.bus_id)) << m;
    EXPECT_EQ(f.graph_info[static_cast<std::size_t>(m)].local_ranks, n) << m;
  }
  EXPECT_EQ(static_cast<int>(devs.size()), n) << "NVML indices must be distinct on a node";
  EXPECT_EQ(static_cast<int>(buses.size()), n) << "busIds must be distinct on a node";
  // Ranks of other nodes stay hosts of their own.
  for (int r = 0; r < c.nranks; ++r) {
    if (std::find(members.begin(), members.end(), r) == members.end()) {
      EXPECT_NE(f.peer_info[static_cast<std::size_t>(r)].host_hash, me.host_hash) << r;
    }
  }

  // Per channel, following ring_next from a node's ring head visits each of its members once
  // and ends at its tail (ncclTopoPostset's view): R's node, and every other full node, a
  // copy of R's when R's node is full itself; ranks of a partial node are nodes of their own.
  const auto& rs = f.graph_info[static_cast<std::size_t>(c.real)].topo_ranks;
  const bool copies = n == c.gpus_per_node;
  std::set<int> heads;
  int expected_nodes = 0;
  for (int base = 0; base < c.nranks; base += c.gpus_per_node) {
    const int size = std::min(c.gpus_per_node, c.nranks - base);
    const bool mine = c.real >= base && c.real < base + size;
    if (!mine && !(copies && size == c.gpus_per_node)) {
      for (int r = base; r < base + size; ++r) {
        EXPECT_EQ(f.graph_info[static_cast<std::size_t>(r)].topo_ranks.ring_recv[0], r);
        heads.insert(r);
        ++expected_nodes;
      }
      continue;
    }
    const int shift = mine ? 0 : base - members.front();
    const auto& first = f.graph_info[static_cast<std::size_t>(base)].topo_ranks;
    heads.insert(first.ring_recv[0]);
    ++expected_nodes;
    for (int ch = 0; ch < 2; ++ch) {
      EXPECT_EQ(first.ring_recv[ch], rs.ring_recv[ch] + shift) << "node " << base;
      int at = first.ring_recv[ch], seen = 0, last = -1;
      std::set<int> visited;
      while (at != -1 && seen <= size) {
        EXPECT_TRUE(at >= base && at < base + size) << at << " outside node " << base;
        if (at < base || at >= base + size) break;
        visited.insert(at);
        ++seen;
        last = at;
        at = f.graph_info[static_cast<std::size_t>(at)].topo_ranks.ring_next[ch];
      }
      EXPECT_EQ(seen, size) << "node " << base << " channel " << ch;
      EXPECT_EQ(static_cast<int>(visited.size()), size) << "node " << base << " channel " << ch;
      EXPECT_EQ(last, rs.ring_send[ch] + shift) << "node " << base << " channel " << ch;
    }
  }
  // NCCL's nodes are the distinct ring heads of channel 0 (init.cc): one per node built above.
  EXPECT_EQ(static_cast<int>(heads.size()), expected_nodes);
  f.close();
  EXPECT_TRUE(waitDestroyed(*host));
  EXPECT_TRUE(host->errors().empty()) << host->errors().front().message;
}

INSTANTIATE_TEST_SUITE_P(
    Nodes, IntraNode,
    ::testing::Values(NodeCase{8, 8, 0}, NodeCase{8, 8, 3}, NodeCase{8, 8, 7},
                      NodeCase{64, 8, 13}, NodeCase{8, 3, 4}, NodeCase{8, 3, 7}),
    [](const auto& param_info) {
      const NodeCase& p = param_info.param;
      return "n" + std::to_string(p.nranks) + "_gpn" + std::to_string(p.gpus_per_node) +
             "_real" + std::to_string(p.real);
    });

// Two real ranks on one target node: each stays a host of its own (each has its own
// NCCL_HOSTID), so the node's virtual ranks stay flat too and no intra-node exchange happens.
TEST(IntraNode, TwoRealRanksOnANodeKeepEveryRankAHost) {
  auto host = p2pHost(8);
  const UniqueId id = host->mintUniqueId();
  (void)host->declareComm(id, {8, {0, 1}, kSupportedNcclVersion, "world"});
  std::vector<wire::PeerInfo> seen[2];
  std::vector<wire::AllGatherInfo> graphs[2];
  NodePlace place[2];
  std::thread t[2];
  for (int r = 0; r < 2; ++r)
    t[r] = std::thread([&, r] {
      FakeRank f(id, r, 8);
      (void)f.init();
      f.initAllGathers();
      // Nothing will use a pool here: the host says so instead of failing the comm.
      place[r] = host->addBlockPool(
          f.commHash(), r, {kP2pRecvBlockBytes, kP2pSendBlockBytes, {0xa0000000}, {0xb0000000}});
      seen[r] = f.peer_info;
      graphs[r] = f.graph_info;
      f.close();
    });
  for (auto& th : t) th.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(place[r].members, 0) << r;
    ASSERT_EQ(seen[r].size(), 8u);
    std::set<std::uint64_t> hosts;
    for (const auto& p : seen[r]) hosts.insert(p.host_hash);
    EXPECT_EQ(hosts.size(), 8u) << "every rank its own host";
    for (int v = 2; v < 8; ++v)
      EXPECT_EQ(graphs[r][static_cast<std::size_t>(v)].topo_ranks.ring_recv[0], v);
  }
  EXPECT_TRUE(waitDestroyed(*host));
  EXPECT_TRUE(host->errors().empty()) << host->errors().front().message;
}

// ncclCommSplit under p2p_peers: a child made of whole target nodes in rank order (the groups of
// 8 consecutive ranks) plays the real rank's node mates as GPUs of its host, as the world
// does; a child with one rank per node (color = rank % 8) keeps every rank a host of its own.
// Rank 13 of 64 real; the world's own node exchange runs first.
struct SplitCase {
  bool blocks;  // color rank / 8 (whole nodes) or rank % 8 (one rank per node)
};
class IntraNodeSplit : public ::testing::TestWithParam<SplitCase> {};

TEST_P(IntraNodeSplit, ChildOfWholeNodesGetsGpusOfTheRealRanksHost) {
  const bool blocks = GetParam().blocks;
  auto host = p2pHost(8);
  host->setSplitResolver([blocks](std::uint64_t, int, int r) {
    return SplitChoice{blocks ? r / 8 : r % 8, r};
  });
  const UniqueId id = host->mintUniqueId();
  (void)host->declareComm(id, {64, {13}, kSupportedNcclVersion, "world"});
  // Its NCCL_GRAPH_FILE: the world's graphs, then the child's (inherited by the split).
  const std::string path = ::testing::TempDir() + "crystal-split-graph-" +
                           std::to_string(::getpid()) + (blocks ? "-b" : "-s") + ".xml";
  host->setGraphFile(commHashOf(id), 13, path);
  const auto readFile = [&] {
    std::string text;
    if (std::FILE* in = std::fopen(path.c_str(), "r")) {
      char buf[4096];
      std::size_t n = 0;
      while ((n = std::fread(buf, 1, sizeof buf, in)) > 0) text.append(buf, n);
      std::fclose(in);
    }
    return text;
  };
  const std::vector<int> world_node{8, 9, 10, 11, 12, 13, 14, 15};
  FakeRank f(id, 13, 64);
  (void)f.init();
  const auto slot = topo_xml::buildSlot({.rank = 13, .dev = 0, .bus_id = 0x18000});
  f.initAllGathersWith(nodeGraphInfo(13, world_node), kSupportedNcclVersion,
                       [&] { (void)f.intraNodeAllGather(world_node, slot); });
  f.intraNodeBarrier(world_node);
  // Rank 13 sits inside its node: the ring in rank order, as NCCL would search it (R has
  // NVML index 0, so rank 8 in slot 0 has R's slot 5).
  EXPECT_NE(readFile().find("<gpu dev=\"0x5\"/>\n      <gpu dev=\"0x1\"/>\n      <gpu "
                            "dev=\"0x2\"/>\n      <gpu dev=\"0x3\"/>\n      <gpu dev=\"0x4\"/>\n"
                            "      <gpu dev=\"0\"/>\n      <gpu dev=\"0x6\"/>"),
            std::string::npos)
      << readFile();

  auto child = f.split(blocks ? 1 : 5, 13);
  ASSERT_NE(child, nullptr);
  const int me = blocks ? 5 : 1;  // rank 13 in its group of 8
  ASSERT_EQ(child->rank(), me);
  ASSERT_EQ(child->nranks(), 8);
  const std::vector<int> all{0, 1, 2, 3, 4, 5, 6, 7};
  const BlockPoolSpec pool{kP2pRecvBlockBytes, kP2pSendBlockBytes, {0xa0000000}, {0xb0000000}};
  if (blocks) {
    const auto child_slot = topo_xml::buildSlot({.rank = me, .dev = 0, .bus_id = 0x18000});
    std::vector<std::vector<std::byte>> xml;
    child->initAllGathersWith(nodeGraphInfo(me, all), kSupportedNcclVersion,
                              [&] { xml = child->intraNodeAllGather(all, child_slot); });
    child->intraNodeBarrier(all);
    ASSERT_EQ(xml.size(), 8u);
    const wire::PeerInfo& r = child->peer_info[static_cast<std::size_t>(me)];
    for (int c = 0; c < 8; ++c) {
      if (c == me) continue;
      const wire::PeerInfo& p = child->peer_info[static_cast<std::size_t>(c)];
      EXPECT_EQ(p.host_hash, r.host_hash) << c;
      EXPECT_EQ(p.bus_id, sameNodeBusId(c)) << c;
      EXPECT_EQ(topo_xml::findGpu(xml[static_cast<std::size_t>(c)], c).rank, c);
      EXPECT_EQ(child->graph_info[static_cast<std::size_t>(c)].local_ranks, 8) << c;
    }
    const NodePlace at = host->addBlockPool(child->commHash(), me, pool);
    EXPECT_EQ(at.members, 8);
    EXPECT_EQ(at.prev, me - 1);
    EXPECT_EQ(at.next, me + 1);
  } else {
    child->initAllGathers();
    std::set<std::uint64_t> hosts;
    for (const auto& p : child->peer_info) hosts.insert(p.host_hash);
    EXPECT_EQ(hosts.size(), 8u) << "every rank its own host";
    const NodePlace at = host->addBlockPool(child->commHash(), me, pool);
    EXPECT_EQ(at.members, 0);
  }
  // A child of one node, or of one rank per node: nothing imposed, NCCL searches.
  EXPECT_EQ(readFile().find("<graph "), std::string::npos) << readFile();
  std::remove(path.c_str());
  child->close();
  f.close();
  for (int i = 0; i < 400; ++i) {
    int destroyed = 0;
    for (const auto& s : host->comms()) destroyed += s.phase == CommPhase::Destroyed ? 1 : 0;
    if (destroyed == 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(host->errors().empty()) << host->errors().front().message;
}

INSTANTIATE_TEST_SUITE_P(Splits, IntraNodeSplit,
                         ::testing::Values(SplitCase{true}, SplitCase{false}),
                         [](const auto& param_info) {
                           return std::string(param_info.param.blocks ? "WholeNodes"
                                                                      : "OnePerNode");
                         });

// NCCL_GRAPH_FILE (node_graph.h): rank 0 of 64, alone on its node, gets a ring chain with
// itself between local 7 and 1 ([2 .. 7, 0, 1]) and the tree in rank order, written before
// the host answers the peerInfo all-gather; NCCL's view of that ring (R's allGatherInfo)
// then yields node chains every member agrees on, and the block pool's answer names R's
// neighbours 7 and 1.
TEST(IntraNode, GraphFileRotatesTheRingOfARankAtItsNodesEnd) {
  auto host = p2pHost(8);
  const UniqueId id = host->mintUniqueId();
  (void)host->declareComm(id, {64, {0}, kSupportedNcclVersion, "world"});
  const std::string path =
      ::testing::TempDir() + "crystal-graph-" + std::to_string(::getpid()) + ".xml";
  std::remove(path.c_str());
  host->setGraphFile(commHashOf(id), 0, path);
  host->setGraphFile(commHashOf(id), 5, "/nonexistent/ignored.xml");  // a virtual rank
  const std::vector<int> members{0, 1, 2, 3, 4, 5, 6, 7};
  FakeRank f(id, 0, 64);
  (void)f.init();
  // R's view of the ring NCCL loads from that file: head 2, tail 1, 7 -> R -> 1.
  wire::AllGatherInfo mine = test::fakeGraphInfo(0);
  for (int c = 0; c < 2; ++c) {
    auto& t = mine.topo_ranks;
    t.ring_recv[c] = 2;
    t.ring_send[c] = 1;
    t.ring_prev[c] = 7;
    t.ring_next[c] = 1;
    t.tree_to_parent[c] = t.tree_to_child0[c] = t.tree_to_child1[c] = 0;
  }
  std::string written;
  f.initAllGathersWith(mine, kSupportedNcclVersion, [&] {
    // NCCL reads the file here, after the peerInfo all-gather.
    std::FILE* in = std::fopen(path.c_str(), "r");
    ASSERT_NE(in, nullptr) << path;
    char buf[4096];
    std::size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, in)) > 0) written.append(buf, n);
    std::fclose(in);
    (void)f.intraNodeAllGather(members, topo_xml::buildSlot({.rank = 0, .dev = 0}));
  });
  f.intraNodeBarrier(members);
  // R's NVML index is 0 (fakePeerInfo): the members' devs are their slots.
  EXPECT_NE(written.find("<graph id=\"0\" pattern=\"4\""), std::string::npos) << written;
  const std::string ring_channel =
      "      <net dev=\"0\"/>\n      <gpu dev=\"0x2\"/>\n      <gpu dev=\"0x3\"/>\n"
      "      <gpu dev=\"0x4\"/>\n      <gpu dev=\"0x5\"/>\n      <gpu dev=\"0x6\"/>\n"
      "      <gpu dev=\"0x7\"/>\n      <gpu dev=\"0\"/>\n      <gpu dev=\"0x1\"/>\n";
  EXPECT_NE(written.find(ring_channel), std::string::npos) << written;
  // Every member follows one chain from 2 to 1 through 7, 0, 1.
  int at = 2, seen = 0;
  std::vector<int> chain;
  while (at != -1 && seen++ <= 8) {
    chain.push_back(at);
    at = f.graph_info[static_cast<std::size_t>(at)].topo_ranks.ring_next[0];
  }
  EXPECT_EQ(chain, (std::vector<int>{2, 3, 4, 5, 6, 7, 0, 1}));
  const NodePlace place = host->addBlockPool(
      f.commHash(), 0, {kP2pRecvBlockBytes, kP2pSendBlockBytes, {0xa0000000}, {0xb0000000}});
  EXPECT_EQ(place.members, 8);
  EXPECT_EQ(place.prev, 7);
  EXPECT_EQ(place.next, 1);
  EXPECT_EQ(place.tree_channels, 2) << "min(tree 3, ring 2) of R's graphs";
  f.close();
  EXPECT_TRUE(waitDestroyed(*host));
  EXPECT_TRUE(host->errors().empty()) << host->errors().front().message;
  std::remove(path.c_str());
}

// An 8-rank one-node comm with rank 0 real, checked in and ring-connected; errors polled.
struct OneNodeComm {
  std::unique_ptr<BootstrapHost> host = p2pHost(8);
  std::vector<int> members{0, 1, 2, 3, 4, 5, 6, 7};
  std::unique_ptr<FakeRank> rank0;
  OneNodeComm() {
    const UniqueId id = host->mintUniqueId();
    (void)host->declareComm(id, {8, {0}, kSupportedNcclVersion, "world"});
    rank0 = std::make_unique<FakeRank>(id, 0, 8);
    (void)rank0->init();
  }
  std::vector<HostError> waitErrors() const {
    std::vector<HostError> errors;
    for (int i = 0; i < 400 && errors.empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      errors = host->errors();
    }
    return errors;
  }
};

// NCCL connects a GPU of its own host over P2P: until that is emulated, a setup message to
// such a rank is answered with a reply longer than any connect message (NCCL's bootstrapRecv
// then fails with "Message truncated" instead of waiting forever), and the host says why,
// once.
TEST(IntraNodeFaults, ConnectingToAVirtualNodeMemberFailsClearly) {
  OneNodeComm c;
  FakeRank& f = *c.rank0;
  f.initAllGathersWith(nodeGraphInfo(0, c.members), kSupportedNcclVersion, [&] {
    (void)f.intraNodeAllGather(c.members, topo_xml::buildSlot({.rank = 0}));
  });
  const std::vector<std::byte> entry(256, std::byte{0x5a});  // a p2pConnectInfo, not crystal's
  f.bootstrapSend(1, (1 << 8) + 1, entry);  // ring graph, distance 1
  f.bootstrapSend(7, (1 << 8) + 1, entry);  // and to its prev
  EXPECT_EQ(f.bootstrapRecv(1, (1 << 8) + 1).size(),
            static_cast<std::size_t>(wire::kMaxMessageBytes + wire::kConnectEntryBytes));
  EXPECT_EQ(f.bootstrapRecv(7, (1 << 8) + 1).size(),
            static_cast<std::size_t>(wire::kMaxMessageBytes + wire::kConnectEntryBytes));
  const auto errors = c.waitErrors();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].message.find("virtual GPU of this rank's node"), std::string::npos)
      << errors[0].message;
  EXPECT_NE(errors[0].message.find("p2p_peers"), std::string::npos) << errors[0].message;
}

// A slot of the wrong size (not NCCL 2.28.9's xmlMemSize(256)) fails the comm. Sent by hand:
// the fake rank's own ring would stop at the host's size first.
TEST(IntraNodeFaults, WrongSlotSizeFailsTheComm) {
  OneNodeComm c;
  FakeRank& f = *c.rank0;
  std::vector<HostError> errors;
  try {
    f.initAllGathersWith(nodeGraphInfo(0, c.members), kSupportedNcclVersion, [&] {
      test::Sock next = test::connectTo(f.ring_data[1].peer_address, f.magic());
      const std::int32_t ack_size = 8, slot_size = 1000;
      next.sendValue(ack_size);
      next.sendValue(wire::SocketAck{0, wire::kTagIntraNodeAllGather});
      next.sendValue(slot_size);
      errors = c.waitErrors();
    });
  } catch (const std::exception&) {
    // the failed comm's sockets are closed: the graph all-gather cannot complete
  }
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].message.find("1000-byte topology slot"), std::string::npos)
      << errors[0].message;
}

// A graph file the host cannot write (its directory gone) fails the comm with the path and
// the reason, before NCCL could read a stale one: the real rank's peerInfo all-gather ends.
TEST(IntraNodeFaults, UnwritableGraphFileFailsTheCommClearly) {
  auto host = p2pHost(8);
  const UniqueId id = host->mintUniqueId();
  (void)host->declareComm(id, {64, {0}, kSupportedNcclVersion, "world"});
  host->setGraphFile(commHashOf(id), 0, "/nonexistent-crystal-dir/graph-1.xml");
  FakeRank f(id, 0, 64);
  (void)f.init();
  EXPECT_ANY_THROW(f.initAllGathers());
  std::vector<HostError> errors;
  for (int i = 0; i < 400 && errors.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    errors = host->errors();
  }
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].message.find("cannot write its NCCL_GRAPH_FILE "
                                   "/nonexistent-crystal-dir/graph-1.xml: No such file"),
            std::string::npos)
      << errors[0].message;
}

// R's own p2pConnectInfo (rank, read, directPtr, size at 0/4/8/16 of a 256-byte entry).
std::vector<std::byte> rEntries(const std::vector<std::uint64_t>& sizes, std::int32_t read = 0) {
  std::vector<std::byte> out(sizes.size() * 256);
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    const std::int32_t rank = 0;
    const std::uint64_t ptr = 0x7e0000000000ull + k * 0x1000000;
    std::memcpy(out.data() + k * 256 + 0, &rank, 4);
    std::memcpy(out.data() + k * 256 + 4, &read, 4);
    std::memcpy(out.data() + k * 256 + 8, &ptr, 8);
    std::memcpy(out.data() + k * 256 + 16, &sizes[k], 8);
  }
  return out;
}

struct VEntry {
  std::int32_t rank, read;
  std::uint64_t ptr, size;
};
std::vector<VEntry> vEntries(const std::vector<std::byte>& payload) {
  std::vector<VEntry> out;
  for (std::size_t at = 0; at + 256 <= payload.size(); at += 256) {
    VEntry e{};
    std::memcpy(&e.rank, payload.data() + at, 4);
    std::memcpy(&e.read, payload.data() + at + 4, 4);
    std::memcpy(&e.ptr, payload.data() + at + 8, 8);
    std::memcpy(&e.size, payload.data() + at + 16, 8);
    for (std::size_t b = 24; b < 256; ++b)
      if (payload[at + b] != std::byte{0}) ADD_FAILURE() << "byte " << b << " of a V entry set";
    out.push_back(e);
  }
  return out;
}

// With a block pool from R's process, V's entries name R as the owner of pool blocks (the
// same-process route, research note §11.7): recv blocks for R's send connectors, send blocks
// for its recv connectors, handed out in order; syncs are answered; a used-up pool refuses.
TEST(NodeConnect, EntriesNameTheRealRankAndItsPoolBlocks) {
  OneNodeComm c;
  FakeRank& f = *c.rank0;
  f.initAllGathersWith(nodeGraphInfo(0, c.members), kSupportedNcclVersion, [&] {
    (void)f.intraNodeAllGather(c.members, topo_xml::buildSlot({.rank = 0}));
  });
  BlockPoolSpec pool{kP2pRecvBlockBytes, kP2pSendBlockBytes, {0xa0000000, 0xa1000000, 0xa2000000},
                     {0xb0000000, 0xb1000000, 0xb2000000}};
  c.host->addBlockPool(f.commHash(), 0, pool);
  const int ring = (1 << 8) + 1;  // distance 1, ring graph
  f.bootstrapSend(1, ring, rEntries({kP2pSendBlockBytes, kP2pSendBlockBytes}));  // R sends to 1
  f.bootstrapSend(7, ring, rEntries({kP2pRecvBlockBytes, kP2pRecvBlockBytes}));  // 7 sends to R
  const auto to1 = vEntries(f.bootstrapRecv(1, ring));
  const auto to7 = vEntries(f.bootstrapRecv(7, ring));
  ASSERT_EQ(to1.size(), 2u);
  ASSERT_EQ(to7.size(), 2u);
  for (int k = 0; k < 2; ++k) {
    EXPECT_EQ(to1[k].rank, 0);
    EXPECT_EQ(to1[k].read, 0);
    EXPECT_EQ(to1[k].ptr, pool.recv[static_cast<std::size_t>(k)]);
    EXPECT_EQ(to1[k].size, kP2pRecvBlockBytes);
    EXPECT_EQ(to7[k].rank, 0);
    EXPECT_EQ(to7[k].ptr, pool.send[static_cast<std::size_t>(k)]);
    EXPECT_EQ(to7[k].size, kP2pSendBlockBytes);
  }
  const int sync = (1 << 8) + (1 << 7) + 1;
  f.bootstrapSend(1, sync, {});
  EXPECT_TRUE(f.bootstrapRecv(1, sync).empty());
  // sendPeer == recvPeer (distance 4 of 8): [R recv entries][R send entries] in one message;
  // the reply is [V recv blocks for R's sends][V send blocks for R's receives].
  const int p2p4 = (4 << 8) + 0;
  f.bootstrapSend(4, p2p4, rEntries({kP2pRecvBlockBytes, kP2pSendBlockBytes}));
  const auto to4 = vEntries(f.bootstrapRecv(4, p2p4));
  ASSERT_EQ(to4.size(), 2u);
  EXPECT_EQ(to4[0].ptr, pool.recv[2]);
  EXPECT_EQ(to4[0].size, kP2pRecvBlockBytes);
  EXPECT_EQ(to4[1].ptr, pool.send[2]);
  EXPECT_TRUE(c.host->errors().empty()) << c.host->errors().front().message;
  // R's own counters of those connections, set free-running: the head of each send block and
  // the tail of each recv block R named in its entries, in the order the entries came.
  // Each names its connection and the pool block whose counter R's GPU moves: the tail of V's
  // recv block for a send connector, the head of V's send block for a recv connector.
  const auto writes = c.host->takeDeviceWrites(f.commHash(), 0, 4);
  ASSERT_EQ(writes.size(), 4u);
  for (std::size_t k = 0; k < 4; ++k) {
    EXPECT_EQ(writes[k].address, 0x7e0000000000ull + (k % 2) * 0x1000000) << k;
    EXPECT_EQ(writes[k].value, kFreeRunningStep);
    EXPECT_EQ(writes[k].send, k < 2) << k;
    EXPECT_EQ(writes[k].peer, k < 2 ? 1 : 7) << k;
    EXPECT_EQ(writes[k].watch, k < 2 ? pool.recv[k] : pool.send[k - 2]) << k;
    EXPECT_EQ(writes[k].ordinal, static_cast<int>(k % 2)) << k;
    EXPECT_EQ(writes[k].nranks, 8);
    EXPECT_EQ(writes[k].graph, 1);
  }
  const auto both = c.host->takeDeviceWrites(f.commHash(), 0, 100);  // distance 4's two
  ASSERT_EQ(both.size(), 2u);
  EXPECT_FALSE(both[0].send);  // R's recv entry came first in its message
  EXPECT_EQ(both[0].watch, pool.send[2]);
  EXPECT_TRUE(both[1].send);
  EXPECT_EQ(both[1].watch, pool.recv[2]);
  EXPECT_EQ(both[1].ordinal, 0);
  EXPECT_EQ(both[1].graph, 0);
  EXPECT_TRUE(c.host->takeDeviceWrites(f.commHash(), 0, 100).empty());
  EXPECT_TRUE(c.host->takeDeviceWrites(f.commHash() + 1, 0, 100).empty());
  // The pool is used up: refused with an oversized reply and one error line.
  f.bootstrapSend(2, (2 << 8) + 1, rEntries({kP2pSendBlockBytes}));
  EXPECT_EQ(f.bootstrapRecv(2, (2 << 8) + 1).size(),
            static_cast<std::size_t>(wire::kMaxMessageBytes + wire::kConnectEntryBytes));
  const auto errors = c.waitErrors();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].message.find("used up"), std::string::npos) << errors[0].message;
}

TEST(NodeConnect, PoolsAreCheckedAndReadModeRefused) {
  OneNodeComm c;
  FakeRank& f = *c.rank0;
  f.initAllGathersWith(nodeGraphInfo(0, c.members), kSupportedNcclVersion, [&] {
    (void)f.intraNodeAllGather(c.members, topo_xml::buildSlot({.rank = 0}));
  });
  const BlockPoolSpec ok{kP2pRecvBlockBytes, kP2pSendBlockBytes, {0xa0000000}, {0xb0000000}};
  EXPECT_THROW(c.host->addBlockPool(f.commHash() + 1, 0, ok), InputError);  // unknown comm
  EXPECT_THROW(c.host->addBlockPool(f.commHash(), 3, ok), InputError);      // virtual rank
  BlockPoolSpec small = ok;
  small.recv_block_bytes = 4096;
  EXPECT_THROW(c.host->addBlockPool(f.commHash(), 0, small), InputError);
  const NodePlace at = c.host->addBlockPool(f.commHash(), 0, ok);
  EXPECT_EQ(at.members, 8);
  EXPECT_EQ(at.prev, 7) << "one node: the chain closes";
  EXPECT_EQ(at.next, 1);
  f.bootstrapSend(1, (1 << 8) + 1, rEntries({kP2pSendBlockBytes}, /*read=*/1));
  EXPECT_EQ(f.bootstrapRecv(1, (1 << 8) + 1).size(),
            static_cast<std::size_t>(wire::kMaxMessageBytes + wire::kConnectEntryBytes));
  const auto errors = c.waitErrors();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].message.find("read mode"), std::string::npos) << errors[0].message;
  // A host without p2p_peers takes no pool.
  BootstrapHost flat{HostOptions{}};
  EXPECT_THROW(flat.addBlockPool(1, 0, ok), InputError);
}

}  // namespace
}  // namespace crystal::host
