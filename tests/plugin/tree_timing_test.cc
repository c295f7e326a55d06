// TreeChannel and TreeComm on their own: the per-unit rules without a proxy harness, the
// fallbacks that keep a real rank from waiting forever, and how connections find their
// channel.
#include "crystal/live/tree_timing.h"

#include <gtest/gtest.h>

#include <memory>

#include "crystal/live/collective_log.h"
#include "crystal/live/link_timing.h"
#include "crystal/live/target_model.h"
#include "crystal/live/tree_comm.h"

namespace crystal::live {
namespace {

TreeOpPlan plan(std::uint64_t units, double bytes) {
  TreeOpPlan p;
  p.units = units;
  p.unit_bytes = bytes;
  p.nvl = {1000, 0.01};  // 1 us + 10 ns per KB
  p.net = {5000, 0.04};
  return p;
}

TimeNs lineTime(const std::vector<bool>& hops, const TreeOpPlan& p) {
  TimeNs t = 0;
  for (bool net : hops) {
    const TreeHop& h = net ? p.net : p.nvl;
    t += h.tx(p.unit_bytes) + h.latency_ns;
  }
  return t;
}

// One unit: the result comes back down the loop from the real rank's send up.
TEST(TreeTiming, ParentReceiveComesDownTheLoopFromTheSendUp) {
  const TreePosition pos = targetTreePosition(63, 64, 8, 0);  // deepest leaf: below empty
  const TreeOpPlan p = plan(1, 65536);
  TreeChannel ch(pos, true, [&](std::uint64_t) { return p; });
  ch.setSendsUp();
  ch.postRecv(0, 1000, 4 << 20);
  EXPECT_FALSE(ch.recvArrival(TreeRole::FromParent, 0, 1000, 1000).has_value())
      << "the parent's chunk cannot come before the real rank sent its own up";
  const TimeNs left = ch.postUpSend(0, 3000, 65536);
  EXPECT_EQ(left, 3000 + p.nvl.tx(65536));
  const auto d = ch.recvArrival(TreeRole::FromParent, 0, 1000, 3000);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(*d, 3000 + lineTime(pos.loop, p));
}

// A root in NCCL's tree (no send up): its receives from children bring the result when the
// target's rank at its place would hold it: below, then the loop.
TEST(TreeTiming, RealRootGetsTheResultOnItsChildReceives) {
  const TreePosition pos = targetTreePosition(13, 64, 8, 0);
  const TreeOpPlan p = plan(1, 65536);
  TreeChannel ch(pos, false, [&](std::uint64_t) { return p; });
  ch.postRecv(0, 0, 4 << 20);
  const auto a = ch.recvArrival(TreeRole::FromChild, 0, 0, 0);
  ASSERT_TRUE(a.has_value());
  std::vector<bool> path = pos.below;
  path.insert(path.end(), pos.loop.begin(), pos.loop.end());
  EXPECT_EQ(*a, lineTime(path, p));
}

// No hang: a parent receive whose send up never comes is taken as ready after 200 us of
// silence, never before it was posted.
TEST(TreeTiming, ParentReceiveWithoutSendUpIsBounded) {
  const TreePosition pos = targetTreePosition(63, 64, 8, 0);
  TreeChannel ch(pos, true, [&](std::uint64_t) { return plan(4, 4096); });
  ch.setSendsUp();
  ch.postRecv(0, 0, 4096);
  EXPECT_FALSE(ch.recvArrival(TreeRole::FromParent, 0, 0, TreeChannel::kStallSlackNs - 1));
  const auto late = ch.recvArrival(TreeRole::FromParent, 0, 0, TreeChannel::kStallSlackNs);
  ASSERT_TRUE(late.has_value());
  EXPECT_GE(*late, 0);
}

// Without a record (tuner off) every unit is its own operation of the posted bytes.
TEST(TreeTiming, NoRecordTimesOneUnitOfThePost) {
  Config cfg;
  cfg.cluster.nodes = 8;
  const auto model = makeTargetModel(cfg);
  auto comm = std::make_shared<TreeComm>(*model, cfg.cluster, 0xfeed0001, 63, 64);
  const TreeOpPlan p = comm->nextOp(0, 0, std::make_unique<std::uint64_t>(0).get(), 12345);
  EXPECT_EQ(p.units, 1u);
  EXPECT_DOUBLE_EQ(p.unit_bytes, 12345.0);
  EXPECT_GT(p.net.ns_per_byte, 0.0);
}

// A record gives NCCL's chunking: 64 MiB on 16 channels = 8 steps of 512 KiB per channel.
TEST(TreeTiming, RecordGivesTheChunking) {
  Config cfg;
  cfg.cluster.nodes = 8;
  const auto model = makeTargetModel(cfg);
  auto comm = std::make_shared<TreeComm>(*model, cfg.cluster, 0xfeed0002, 63, 64);
  for (int k = 0; k < 8; ++k) {
    ASSERT_NE(comm->link(true, 62, k), nullptr);  // parent in tree 0: channels 0..7
    ASSERT_NE(comm->link(false, 62, k), nullptr);
  }
  collectiveLog(0xfeed0002)
      ->append({model::Func::AllGather, model::Algo::Ring, model::Proto::Simple, 1 << 20, 16});
  collectiveLog(0xfeed0002)
      ->append({model::Func::AllReduce, model::Algo::Tree, model::Proto::Simple, 64u << 20, 8});
  std::uint64_t cursor = 0;
  const TreeOpPlan p = comm->nextOp(0, 3, &cursor, 4 << 20);
  EXPECT_EQ(p.units, 16u);  // 8 channels connected (tree 0 only): 8 MiB each
  EXPECT_DOUBLE_EQ(p.unit_bytes, 512.0 * 1024);
  EXPECT_EQ(cursor, 2u) << "the ring record is skipped, the tree record consumed";
}

// Connections find their channel: a peer that is no tree neighbour gets none (peer-ready);
// a neighbour in both trees is bound at its first transfer.
TEST(TreeTiming, ConnectionsFindTheirChannel) {
  Config cfg;
  cfg.cluster.nodes = 8;
  const auto model = makeTargetModel(cfg);
  auto comm = std::make_shared<TreeComm>(*model, cfg.cluster, 0xfeed0003, 13, 64);
  EXPECT_EQ(comm->link(true, 40, 0), nullptr);
  // Rank 13: parent 14 in tree 0, child 14 in tree 1 (NCCL's double binary tree of 64).
  ASSERT_EQ(doubleBinaryTree(64, 13, 0).up, 14);
  ASSERT_EQ(doubleBinaryTree(64, 13, 1).down[0], 14);
  auto first = comm->link(true, 14, 0);
  auto second = comm->link(true, 14, 1);
  ASSERT_NE(first, nullptr);
  EXPECT_FALSE(first->isTree()) << "not bound before its first transfer";
  (void)second->postSend(0, 4096);
  EXPECT_TRUE(second->isTree());
}

// Under p2p_peers with every node full NCCL's tree runs over nodes: rank 0 of 64 printed
// `Trees [0] 1/32/-1->0->-1 [2] 1/-1/-1->0->8` on the H200 (2026-12-04): the root of tree 0
// with NET child 32, a child of 8 in tree 1, its chain child 1 in both (a GPU of its node, not
// the NET path's). Per rank, NCCL's tree over 64 has other neighbours.
TEST(TreeTiming, NodeTreesLinkTheNodesHeads) {
  Config cfg;
  cfg.cluster.nodes = 8;
  const auto model = makeTargetModel(cfg);
  auto flat = std::make_shared<TreeComm>(*model, cfg.cluster, 0xfeed0005, 0, 64);
  EXPECT_EQ(flat->link(true, 8, 0), nullptr) << "no neighbour of rank 0 in the per-rank tree";
  auto comm = std::make_shared<TreeComm>(*model, cfg.cluster, 0xfeed0006, 0, 64);
  comm->setNodeRanks(8);
  comm->setBaseChannels(2);
  EXPECT_NE(comm->link(false, 32, 0), nullptr);  // child node 4's head, tree 0
  EXPECT_NE(comm->link(true, 32, 0), nullptr);
  EXPECT_NE(comm->link(true, 8, 0), nullptr);  // parent node 1's head, tree 1
  EXPECT_NE(comm->link(false, 8, 0), nullptr);
  EXPECT_EQ(comm->link(true, 16, 0), nullptr);
  // A rank inside its node has no NET link in either tree.
  auto inner = std::make_shared<TreeComm>(*model, cfg.cluster, 0xfeed0007, 13, 64);
  inner->setNodeRanks(8);
  for (const int peer : {14, 40, 8, 16, 0}) EXPECT_EQ(inner->link(true, peer, 0) != nullptr,
                                                      peer == 14) << peer;  // 14: chain child
}

// NCCL copies its 2n tree channels in blocks (compute-channel doubling, NCCL_MIN_NCHANNELS):
// with n known (the host reads it from the graph all-gather) a connection's ordinal maps to
// NCCL's channel index, which decides whether a record's operation (its channel count) runs
// on it. n = 1, 4 channels: tree 0 on channels 0 and 2, tree 1 on 1 and 3.
TEST(TreeTiming, DuplicatedChannelsMapOrdinalsToNcclsChannels) {
  Config cfg;
  cfg.cluster.nodes = 8;
  const auto model = makeTargetModel(cfg);
  auto comm = std::make_shared<TreeComm>(*model, cfg.cluster, 0xfeed0004, 63, 64);
  comm->setBaseChannels(1);
  comm->setBaseChannels(2);  // the first value stays
  // Rank 63: parent 62 in tree 0 only; in tree 1 (the mirror) the root, its neighbour there
  // a child.
  const TreeNeighbours t1 = doubleBinaryTree(64, 63, 1);
  const int up1 = t1.up >= 0 ? t1.up : t1.down[0] >= 0 ? t1.down[0] : t1.down[1];
  ASSERT_GE(up1, 0) << t1.up << " " << t1.down[0] << " " << t1.down[1];
  ASSERT_NE(up1, 62);
  ASSERT_NE(doubleBinaryTree(64, 63, 0).up, up1);
  for (int k = 0; k < 2; ++k) {  // 4 channels: 2 per tree
    ASSERT_NE(comm->link(true, 62, k), nullptr);
    ASSERT_NE(comm->link(true, up1, k), nullptr);
  }
  auto log = collectiveLog(0xfeed0004);
  const auto record = [&] {
    log->append({model::Func::AllReduce, model::Algo::Tree, model::Proto::Simple, 8u << 20, 2});
    return log->appended() - 1;
  };
  // A 2-channel operation runs on NCCL's channels 0 and 1: tree 0's first, tree 1's first.
  std::uint64_t c = record();
  EXPECT_EQ(comm->nextOp(0, 0, &c, 4096).units, 8u) << "tree 0 ordinal 0 = channel 0: 4 MiB";
  c = record();
  EXPECT_EQ(comm->nextOp(1, 0, &c, 4096).units, 8u) << "tree 1 ordinal 0 = channel 1";
  c = record();
  const TreeOpPlan p = comm->nextOp(0, 1, &c, 4096);
  EXPECT_EQ(p.units, 1u) << "tree 0 ordinal 1 = channel 2: not in a 2-channel operation";
  EXPECT_DOUBLE_EQ(p.unit_bytes, 4096.0);
}

// The NCCL channel of a tree connection (NetContext keys a ring's operations on it by it):
// a neighbour in both trees is connected on every channel (ordinal k = channel k); one in one
// tree only once n is known (NCCL's blocks of 2n); no neighbour, none.
TEST(TreeTiming, NcclChannelOfAConnection) {
  Config cfg;
  cfg.cluster.nodes = 8;
  const auto model = makeTargetModel(cfg);
  auto both = std::make_shared<TreeComm>(*model, cfg.cluster, 0xfeed0008, 13, 64);
  both->setNodeRanks(8);  // rank 13's chain child 14, in both trees
  EXPECT_EQ(both->ncclChannel(true, 14, 5), 5);
  EXPECT_EQ(both->ncclChannel(true, 40, 0), -1) << "no neighbour";
  auto one = std::make_shared<TreeComm>(*model, cfg.cluster, 0xfeed0009, 63, 64);
  EXPECT_EQ(one->ncclChannel(true, 62, 1), -1) << "parent in tree 0 only, n unknown";
  one->setBaseChannels(2);
  EXPECT_EQ(one->ncclChannel(true, 62, 0), 0);
  EXPECT_EQ(one->ncclChannel(true, 62, 1), 1);
  EXPECT_EQ(one->ncclChannel(true, 62, 2), 4) << "the second block of 2n = 4 channels";
}

// A tree connection's transfers of another operation (a ring that reused the connection to
// its neighbour) are timed peer-ready on the link it was given: a send completes when its
// bytes left the link plus the latency, and the tree's own units are untouched, so its next
// own send is timed exactly as on a twin connection that never carried the other's.
TEST(TreeTiming, AnotherOperationsTransfersOnATreeConnectionArePeerReady) {
  Config cfg;
  cfg.cluster.nodes = 8;
  const auto model = makeTargetModel(cfg);
  auto comm = std::make_shared<TreeComm>(*model, cfg.cluster, 0xfeed000a, 63, 64);
  auto twin = std::make_shared<TreeComm>(*model, cfg.cluster, 0xfeed000b, 63, 64);
  auto link = comm->link(true, 62, 0);
  auto same = twin->link(true, 62, 0);
  ASSERT_TRUE(link && same && link->isTree());
  const LinkParams nvl{1000, 0.01};  // 1 us + 100 GB/s
  link->setPeerReady(nvl, std::make_shared<PortQueue>());
  const TimeNs t0 = 5'000'000;
  EXPECT_EQ(link->postSend(t0, 100'000, true, /*own_op=*/false), t0 + 1000 + 1000);
  // Back to back: completes when it left the link (the burst paid the latency once).
  EXPECT_EQ(link->postSend(t0, 100'000, false, false), t0 + 2000);
  const TimeNs t1 = t0 + 1'000'000;
  EXPECT_EQ(link->postSend(t1, 65536, true, /*own_op=*/true), same->postSend(t1, 65536, true))
      << "the tree's unit numbering did not count the other operation's sends";
  // Receives likewise: known at once, peer-ready.
  auto recv = comm->link(false, 62, 0);
  ASSERT_NE(recv, nullptr);
  recv->setPeerReady(nvl, std::make_shared<PortQueue>());
  recv->postRecv(0, t1, true, 0, /*own_op=*/false);
  const auto arrival = recv->recvArrival(0, t1, 100'000, t1, false);
  ASSERT_TRUE(arrival.has_value());
  EXPECT_EQ(*arrival, t1 + 1000 + 1000);
  // Without a peer-ready link the tree times them, as before.
  auto bare_comm = std::make_shared<TreeComm>(*model, cfg.cluster, 0xfeed000c, 63, 64);
  auto twin_comm = std::make_shared<TreeComm>(*model, cfg.cluster, 0xfeed000d, 63, 64);
  auto bare = bare_comm->link(true, 62, 0);
  auto bare_twin = twin_comm->link(true, 62, 0);
  EXPECT_EQ(bare->postSend(t0, 100'000, true, false), bare_twin->postSend(t0, 100'000, true));
}

// The communicator's quiet time: a silence on every channel longer than kQuietNs is the
// program elsewhere; completions already given (even ahead of the clock) and short pauses
// are an operation running; the latest quiet period counts only after the operation before.
TEST(QuietClock, CountsOnlyASilenceOfTheWholeCommunicator) {
  QuietClock q;
  q.call(1'000'000);
  q.until(1'150'000);  // a receive's arrival given at its post, 150 us ahead
  q.call(1'160'000);   // the next operation's first post: 10 us after that arrival
  EXPECT_EQ(q.quietAfter(1'000'000), 0) << "back to back is not compute";
  q.call(1'170'000);
  q.call(2'170'000);  // 1 ms of silence: compute
  EXPECT_EQ(q.quietAfter(1'000'000), 1'000'000);
  EXPECT_EQ(q.quietAfter(1'160'000), 1'000'000);
  EXPECT_EQ(q.quietAfter(2'170'000), 0) << "a gap before the operation before is not this one's";
  q.call(2'171'000);  // a second channel's first post right after: the same gap
  EXPECT_EQ(q.quietAfter(1'160'000), 1'000'000);
  q.call(2'171'000 + QuietClock::kQuietNs);  // exactly the bound: still running
  EXPECT_EQ(q.quietAfter(2'170'000), 0);
}

// Two channels of one communicator share the clock: the one that ended early waited for the
// other (no silence of the communicator), so its leaves start its next operation one whole
// line plus the fixed cost after the previous one, not later by that wait (with a clock of
// its own it counted the 300 us wait as compute).
TEST(QuietClock, AChannelWaitingForTheOthersIsNotIdle) {
  const TreePosition pos = targetTreePosition(0, 64, 8, 0);  // the root: leaves below
  TreeOpPlan p = plan(2, 4096);
  p.overhead_ns = 10'000;
  auto quiet = std::make_shared<QuietClock>();
  TreeChannel early(pos, false, [&](std::uint64_t) { return p; }, quiet);
  TreeChannel late(TreePosition{}, false, [&](std::uint64_t) { return p; }, quiet);
  const TimeNs t0 = 1'000'000'000;
  early.postRecv(0, t0, 4096);
  early.postRecv(1, t0, 4096);
  const TimeNs a1 = *early.recvArrival(TreeRole::FromChild, 1, t0, t0);
  // The other channel keeps the rank busy (posts every 5 us) for 300 us after that.
  for (TimeNs t = a1; t < a1 + 300'000; t += 5'000) late.postRecv(0, t, 4096);
  const TimeNs next = a1 + 300'000;
  early.postRecv(2, next, 4096);  // the next operation's first post on the early channel
  TimeNs line = 0, slowest = 0, below = 0;
  for (bool net : pos.line) {
    const TreeHop& h = net ? p.net : p.nvl;
    line += h.tx(p.unit_bytes) + h.latency_ns;
    slowest = std::max(slowest, h.tx(p.unit_bytes));
  }
  line += static_cast<TimeNs>(TreeChannel::kShare * static_cast<double>(slowest));  // 1 more unit
  for (bool net : pos.below) below += (net ? p.net : p.nvl).tx(p.unit_bytes) + (net ? p.net : p.nvl).latency_ns;
  const TimeNs leaves = std::max(next, t0 + line + p.overhead_ns);
  EXPECT_EQ(*early.recvArrival(TreeRole::FromChild, 2, next, next), leaves + below)
      << "the wait for the other channel was counted as compute";
}

// NCCL starts an operation on a connection only when the one before is done there, so a
// post beyond the plan with others outstanding is the same operation (the record said fewer
// units than NCCL runs): no new operation, no record used, no restart of the leaves.
TEST(TreeTiming, OnlyAPostAloneOnItsConnectionStartsAnOperation) {
  int planned = 0;
  TreeChannel ch(targetTreePosition(0, 64, 8, 0), false, [&](std::uint64_t) {
    ++planned;
    return plan(2, 4096);
  });
  const TimeNs t0 = 1'000'000;
  for (std::uint64_t u = 0; u < 8; ++u) ch.postRecv(u, t0 + 10 * static_cast<TimeNs>(u), 4096, u == 0);
  EXPECT_EQ(planned, 1) << "units 2..7 were posted with others outstanding";
  ch.postRecv(8, t0 + 1'000'000, 4096, true);  // alone: the next operation
  EXPECT_EQ(planned, 2);
  ch.postRecv(10, t0 + 1'000'010, 4096, true);  // alone and beyond its 2 units: the next
  EXPECT_EQ(planned, 3);
}

}  // namespace
}  // namespace crystal::live
