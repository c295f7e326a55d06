// Engine semantics on hand-made graphs; every expected time is worked out in the comment.
#include "crystal/replay/replay.h"

#include <gtest/gtest.h>

#include "crystal/base/error.h"
#include "test_graphs.h"

namespace crystal::replay {
namespace {

using namespace testing;

ReplayResult run(const graph::Graph& g, ReplayMode mode = ReplayMode::Naive, int iterations = 1,
                 std::vector<std::int32_t> trace = {}) {
  FakeCost cost;
  ReplayOptions o;
  o.mode = mode;
  o.iterations = iterations;
  o.trace_ranks = std::move(trace);
  return runReplay(g, cost, o);
}

constexpr TimeNs us(double v) { return static_cast<TimeNs>(v * 1000); }

// s0: compute 0-10, record; s1: compute 0-5, wait (-> 10), compute 10-13; s0: 10-12.
TEST(Replay, StreamsAndEvents) {
  TinyGraph g(1);
  g.ops(0) = {compute(10, 0), simple(OpKind::Record, 1, 0),
              compute(5, 1),  simple(OpKind::Wait, 1, 1),
              compute(3, 1),  compute(2, 0)};
  const auto r = run(g);
  ASSERT_EQ(r.units.size(), 1u);
  EXPECT_EQ(r.units[0].end, us(13));
  ASSERT_EQ(r.units[0].iterations.size(), 1u);
  EXPECT_EQ(r.units[0].iterations[0].time, us(13));
  EXPECT_EQ(r.units[0].iterations[0].compute, us(13));
  EXPECT_EQ(r.units[0].iterations[0].bubble, 0);
  EXPECT_EQ(r.units[0].ops, 6u);
}

// Arrivals 10/20/30/40 us; all-reduce of 1000 B costs 11 us from the last arrival: 40-51.
TEST(Replay, CollectiveStartsWhenLastMemberArrives) {
  TinyGraph g(4);
  const auto c = g.addComm("world", {0, 1, 2, 3});
  for (int r = 0; r < 4; ++r)
    g.ops(r) = {compute(10.0 * (r + 1)), coll(CollKind::AllReduce, c, 1000), compute(1)};
  const auto res = run(g, ReplayMode::Naive, 1, {2});
  for (int r = 0; r < 4; ++r) EXPECT_EQ(res.units[static_cast<std::size_t>(r)].end, us(52)) << r;
  const auto& it0 = res.units[0].iterations[0];
  EXPECT_EQ(it0.compute, us(11));
  EXPECT_EQ(it0.exposed_comm, us(11));
  EXPECT_EQ(it0.bubble, us(30));
  ASSERT_EQ(res.collectives.size(), 1u);
  EXPECT_EQ(res.collectives[0].calls, 4u);
  EXPECT_EQ(res.collectives[0].nranks, 4);
  EXPECT_EQ(res.collectives[0].time, us(11));
  EXPECT_EQ(res.collectives[0].family, "world");
  EXPECT_EQ(res.model_calls, 1u);  // one question for four identical calls
  // Trace of rank 2: compute 0-30, all-reduce posted 30, runs 40-51, compute 51-52.
  ASSERT_EQ(res.trace.size(), 3u);
  EXPECT_EQ(res.trace[1].rank, 2);
  EXPECT_EQ(res.trace[1].posted, us(30));
  EXPECT_EQ(res.trace[1].start, us(40));
  EXPECT_EQ(res.trace[1].end, us(51));
  EXPECT_EQ(res.trace[2].start, us(51));
}

// DP all-reduce on stream 1 behind Record/Wait overlaps the next compute on stream 0.
TEST(Replay, CommunicationOverlapsCompute) {
  for (const auto& [bytes, end, exposed] :
       {std::tuple{40000ull, us(200), TimeNs{0}}, std::tuple{190000ull, us(300), us(100)}}) {
    TinyGraph g(2);
    const auto c = g.addComm("dp", {0, 1});
    for (int r = 0; r < 2; ++r)
      g.ops(r) = {compute(100, 0), simple(OpKind::Record, 7, 0), simple(OpKind::Wait, 7, 1),
                  coll(CollKind::AllReduce, c, bytes, 1), compute(100, 0)};
    const auto res = run(g);
    EXPECT_EQ(res.units[0].end, end) << bytes;
    EXPECT_EQ(res.units[0].iterations[0].compute, us(200));
    EXPECT_EQ(res.units[0].iterations[0].exposed_comm, exposed) << bytes;
  }
}

// Send posted at 10, receive at 0 (other node): transfer 10-13 (2 us + 1 ns/B).
TEST(Replay, SendRecvMeet) {
  TinyGraph g(2, /*gpus_per_node=*/1);
  const auto c = g.addComm("pp", {0, 1});
  g.ops(0) = {compute(10), p2p(OpKind::Send, c, 1, 0, 1000)};
  g.ops(1) = {p2p(OpKind::Recv, c, 0, 0, 1000), compute(5)};
  const auto res = run(g);
  EXPECT_EQ(res.units[0].end, us(13));
  EXPECT_EQ(res.units[1].end, us(18));
  EXPECT_EQ(res.units[1].iterations[0].exposed_comm, us(3));
  EXPECT_EQ(res.units[1].iterations[0].bubble, us(10));
}

// Same node: 1 us + 0.1 ns/B.
TEST(Replay, SendRecvInsideANodeUsesTheNodeCost) {
  TinyGraph g(2, 8);
  const auto c = g.addComm("pp", {0, 1});
  g.ops(0) = {p2p(OpKind::Send, c, 1, 0, 10000)};
  g.ops(1) = {p2p(OpKind::Recv, c, 0, 0, 10000)};
  EXPECT_EQ(run(g).units[1].end, us(2));
}

std::vector<Op> ringStep(std::int32_t comm, int r, int n, bool grouped) {
  std::vector<Op> ops{compute(10.0 * (r + 1))};
  if (grouped) ops.push_back(simple(OpKind::GroupBegin));
  ops.push_back(p2p(OpKind::Send, comm, (r + 1) % n, 0, 0));
  ops.push_back(p2p(OpKind::Recv, comm, (r + n - 1) % n, 0, 0));
  if (grouped) ops.push_back(simple(OpKind::GroupEnd));
  ops.push_back(compute(1));
  return ops;
}

// Grouped ring exchange (send next, recv prev), posts at 10/20/30/40, 2 us per transfer:
// r0's group ends at 42 (recv from r3 posted at 40), r1's at 32 (send to r2 posted at 30),
// r2's and r3's at 42 (r2 -> r3 starts at 40); each then computes 1 us.
TEST(Replay, GroupedSendRecvRunTogether) {
  TinyGraph g(4, 1);
  const auto c = g.addComm("cp", {0, 1, 2, 3});
  for (int r = 0; r < 4; ++r) g.ops(r) = ringStep(c, r, 4, true);
  const auto res = run(g);
  EXPECT_EQ(res.units[0].end, us(43));
  EXPECT_EQ(res.units[1].end, us(33));
  EXPECT_EQ(res.units[2].end, us(43));
  EXPECT_EQ(res.units[3].end, us(43));
}

// Without the group every rank's recv waits behind its own send: a real deadlock.
TEST(Replay, UngroupedRingDeadlockIsAnInputError) {
  TinyGraph g(4, 1);
  const auto c = g.addComm("cp", {0, 1, 2, 3});
  for (int r = 0; r < 4; ++r) g.ops(r) = ringStep(c, r, 4, false);
  EXPECT_THROW((void)run(g), InputError);
}

TEST(Replay, PeakMemoryIsRunningMaximum) {
  TinyGraph g(1);
  g.ops(0) = {simple(OpKind::Alloc, 0, 0, 100), simple(OpKind::Alloc, 0, 0, 50),
              simple(OpKind::Free, 0, 0, 100), simple(OpKind::Alloc, 0, 0, 80)};
  EXPECT_EQ(run(g).units[0].peak_memory, 150u);
}

TEST(Replay, IterationsRepeatTheStream) {
  TinyGraph g(1);
  g.ops(0) = {compute(10)};
  const auto res = run(g, ReplayMode::Naive, 3);
  ASSERT_EQ(res.units[0].iterations.size(), 3u);
  for (const auto& it : res.units[0].iterations) EXPECT_EQ(it.time, us(10));
  EXPECT_EQ(res.units[0].end, us(30));
}

TEST(Replay, IterationMarkSplitsIterations) {
  TinyGraph g(1);
  g.ops(0) = {simple(OpKind::Alloc, 0, 0, 64), simple(OpKind::IterationMark, 0), compute(10),
              simple(OpKind::IterationMark, 1), compute(5, 1)};
  const auto res = run(g);
  ASSERT_EQ(res.units[0].iterations.size(), 2u);
  EXPECT_EQ(res.units[0].iterations[0].time, us(10));
  EXPECT_EQ(res.units[0].iterations[1].time, us(5));
}

TEST(Replay, BadGraphsAreInputErrors) {
  {
    TinyGraph g(1);
    g.ops(0) = {simple(OpKind::Wait, 3, 0)};
    EXPECT_THROW((void)run(g), InputError);
  }
  {
    TinyGraph g(1);
    g.ops(0) = {coll(CollKind::AllReduce, 5, 8)};
    EXPECT_THROW((void)run(g), InputError);
  }
  {
    TinyGraph g(2);
    const auto c = g.addComm("tp", {0, 1});
    g.ops(0) = {coll(CollKind::AllReduce, c, 8)};  // rank 1 never joins
    EXPECT_THROW((void)run(g), InputError);
  }
  {
    TinyGraph g(1);
    g.ops(0) = {simple(OpKind::GroupBegin)};
    EXPECT_THROW((void)run(g), InputError);
  }
  {
    TinyGraph g(2);
    EXPECT_THROW((void)run(g, ReplayMode::Naive, 1, {2}), InputError);
    EXPECT_THROW((void)run(g, ReplayMode::Naive, 0), InputError);
  }
}

}  // namespace
}  // namespace crystal::replay
