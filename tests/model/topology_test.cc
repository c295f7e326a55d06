#include "model/topology.h"

#include <gtest/gtest.h>

#include "crystal/base/error.h"
#include "model/nccl_graph.h"

namespace crystal::model {
namespace {

ClusterConfig dgx(int nodes) {
  ClusterConfig c;
  c.nodes = nodes;
  return c;  // defaults: 8 x H200, NVLink 450 GB/s, 8 x 50 GB/s NICs, radix 64
}

TEST(Topology, SingleNodeIsNvlinkOnly) {
  const Placement p = Topology(dgx(1)).place({8, 1, 8});
  EXPECT_FALSE(p.multiNode());
  EXPECT_DOUBLE_EQ(p.nvlink_GBps, 450.0);
  EXPECT_EQ(p.switch_hops, 0);
  EXPECT_DOUBLE_EQ(p.net_lat_us, 0.0);
}

TEST(Topology, RailNicsFollowMembersPerNode) {
  const Topology t(dgx(64));
  EXPECT_EQ(t.place({64 * 8, 64, 8}).nics_used, 8);
  EXPECT_DOUBLE_EQ(t.place({64 * 8, 64, 8}).node_net_GBps, 400.0);
  // A DP communicator with one member per node drives only that member's rail NIC.
  EXPECT_EQ(t.place({64, 64, 1}).nics_used, 1);
  EXPECT_DOUBLE_EQ(t.place({64, 64, 1}).node_net_GBps, 50.0);
}

TEST(Topology, LeafSpineHopsAndOversubscription) {
  ClusterConfig c = dgx(1024);
  c.fabric.oversubscription = 2.0;
  const Topology t(c);
  EXPECT_EQ(t.nodesPerLeaf(), 32);
  const Placement in_leaf = t.place({32 * 8, 32, 8});
  EXPECT_EQ(in_leaf.switch_hops, 1);
  EXPECT_DOUBLE_EQ(in_leaf.fabric_factor, 1.0);
  EXPECT_DOUBLE_EQ(in_leaf.net_lat_us, 2.0 + 0.25);
  const Placement across = t.place({64 * 8, 64, 8});
  EXPECT_EQ(across.switch_hops, 3);
  EXPECT_DOUBLE_EQ(across.fabric_factor, 0.5);
  EXPECT_DOUBLE_EQ(across.node_net_GBps, 200.0);
  EXPECT_DOUBLE_EQ(across.net_lat_us, 2.0 + 3 * 0.25);
}

TEST(Topology, UnevenMembersPerNodeAreAccepted) {
  // The engine passes the largest member count per node: 3 members as 2 + 1.
  const Placement p = Topology(dgx(2)).place({3, 2, 2});
  EXPECT_EQ(p.ppn, 2);
  EXPECT_EQ(p.nics_used, 2);
}

TEST(Topology, BadInputNamesTheField) {
  ClusterConfig c = dgx(2);
  c.fabric.nic.bandwidth_GBps = 0;
  try {
    Topology t(c);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("cluster.fabric.nic.bandwidth_GBps"), std::string::npos);
  }
  ClusterConfig o = dgx(2);
  o.fabric.oversubscription = 0.5;
  EXPECT_THROW(Topology{o}, InputError);
  EXPECT_THROW((void)Topology(dgx(2)).place({16, 2, 7}), InputError);  // 2 x 7 < 16
  EXPECT_THROW((void)Topology(dgx(2)).place({1, 2, 1}), InputError);   // 2 nodes, 1 rank
  EXPECT_THROW((void)Topology(dgx(2)).place({18, 2, 9}), InputError);  // 9 > 8 GPUs per node
}

// Outcome of NCCL's graph search (search.cc / connect.cc) for the node kinds we model.
TEST(NcclGraph, TwoHostsOneGpuSocketMatchesNcclLog) {
  // NCCL 2.28.9 on the GPU machine (docs/model/nccl-2.28.9-2x1-socket-rank0.log):
  // "Pattern 4 ... nChannels 1, bw 1.2/1.2, type LOC/PHB", "Pattern 3 ... bw 2.4/1.2",
  // "2 coll channels".
  ClusterConfig c;
  c.nodes = 2;
  c.gpus_per_node = 1;
  c.fabric.nics_per_node = 1;
  c.fabric.nic.bandwidth_GBps = 1.25;  // 10 Gb/s Socket
  const Placement p = Topology(c).place({2, 2, 1});
  GraphOptions o;
  o.nic_path = kPathPhb;
  const CommGraphs g = searchGraphs(p, o);
  EXPECT_EQ(g.ring.nChannels, 1);
  EXPECT_DOUBLE_EQ(g.ring.bwIntra, 1.2);
  EXPECT_DOUBLE_EQ(g.tree.bwIntra, 2.4);
  EXPECT_DOUBLE_EQ(g.tree.bwInter, 1.2);
  EXPECT_EQ(g.tree.pattern, kPatternTree);
  EXPECT_EQ(g.commChannels, 2);
}

TEST(NcclGraph, DgxEightRailNics) {
  const Placement p = Topology(dgx(4)).place({32, 4, 8});
  const CommGraphs g = searchGraphs(p, GraphOptions{});
  EXPECT_EQ(g.ring.nChannels, 8);  // one 48 GB/s channel per 50 GB/s NIC, no dup (sm90)
  EXPECT_DOUBLE_EQ(g.ring.bwInter, 48.0);
  EXPECT_EQ(g.commChannels, 16);  // connect.cc doubles
  GraphOptions capped;
  capped.max_channels = 4;
  EXPECT_EQ(searchGraphs(p, capped).commChannels, 4);
}

// Public NCCL logs of H100 clusters: NVIDIA/nccl issue #1453 (3 nodes x 8 H100, 8 NICs:
// "Channel 05/16") and #1357 (2 nodes x 8 H100, 4 NICs: channels 00..15).
TEST(NcclGraph, ChannelCountsSeenInPublicH100Logs) {
  EXPECT_EQ(searchGraphs(Topology(dgx(3)).place({24, 3, 8}), GraphOptions{}).commChannels, 16);
  ClusterConfig four = dgx(2);
  four.fabric.nics_per_node = 4;
  const CommGraphs g = searchGraphs(Topology(four).place({16, 2, 8}), GraphOptions{});
  EXPECT_EQ(g.ring.nChannels, 8);  // 4 NICs x 48 GB/s, duplicated to 8 x 24 GB/s
  EXPECT_DOUBLE_EQ(g.ring.bwInter, 24.0);
  EXPECT_EQ(g.commChannels, 16);
}

}  // namespace
}  // namespace crystal::model
