// Symmetric mode (one representative per class) against naive mode (every rank).
#include <gtest/gtest.h>

#include "crystal/replay/replay.h"
#include "test_graphs.h"

namespace crystal::replay {
namespace {

using namespace testing;

ReplayResult run(const graph::Graph& g, ReplayMode mode, int iterations = 1) {
  FakeCost cost;
  ReplayOptions o;
  o.mode = mode;
  o.iterations = iterations;
  return runReplay(g, cost, o);
}

void expectSameTimes(const graph::Graph& g, const ReplayResult& a, const ReplayResult& b) {
  for (std::int32_t r = 0; r < g.worldSize(); ++r) {
    const UnitResult& x = a.unitOf(g, r);
    const UnitResult& y = b.unitOf(g, r);
    ASSERT_EQ(x.end, y.end) << "rank " << r;
    ASSERT_EQ(x.peak_memory, y.peak_memory) << "rank " << r;
    ASSERT_EQ(x.iterations.size(), y.iterations.size()) << "rank " << r;
    for (std::size_t i = 0; i < x.iterations.size(); ++i) {
      EXPECT_EQ(x.iterations[i].time, y.iterations[i].time) << "rank " << r << " it " << i;
      EXPECT_EQ(x.iterations[i].compute, y.iterations[i].compute) << "rank " << r;
      EXPECT_EQ(x.iterations[i].exposed_comm, y.iterations[i].exposed_comm) << "rank " << r;
      EXPECT_EQ(x.iterations[i].bubble, y.iterations[i].bubble) << "rank " << r;
    }
  }
}

TEST(Symmetry, MixedClassCollectiveStartsAtLastClass) {
  TinyGraph g(4);
  g.setClasses({0, 0, 1, 1}, 2);
  const auto c = g.addComm("world", {0, 1, 2, 3});
  for (int r = 0; r < 4; ++r)
    g.ops(r) = {compute(r < 2 ? 10 : 30), coll(CollKind::AllReduce, c, 1000)};
  const auto sym = run(g, ReplayMode::Symmetric);
  ASSERT_EQ(sym.units.size(), 2u);
  EXPECT_EQ(sym.units[0].end, 41'000);
  EXPECT_EQ(sym.units[0].ranks, 2);
  expectSameTimes(g, sym, run(g, ReplayMode::Naive));
}

struct LayoutCase {
  int tp, dp, pp, micro, iterations;
  bool barrier;
};

class SymmetryLayouts : public ::testing::TestWithParam<LayoutCase> {};

TEST_P(SymmetryLayouts, NaiveAndSymmetricAgreeOnEveryRank) {
  const LayoutCase c = GetParam();
  LayoutGraph::Shape s;
  s.tp = c.tp;
  s.dp = c.dp;
  s.pp = c.pp;
  s.micro = c.micro;
  s.gpus_per_node = 4;
  s.world_barrier = c.barrier;
  LayoutGraph g(s);
  const auto sym = run(g, ReplayMode::Symmetric, c.iterations);
  const auto naive = run(g, ReplayMode::Naive, c.iterations);
  EXPECT_EQ(sym.units.size(), static_cast<std::size_t>(c.pp));
  EXPECT_EQ(sym.uncoupled_ops, 0u);
  expectSameTimes(g, sym, naive);
  EXPECT_LT(sym.events, naive.events);
}

INSTANTIATE_TEST_SUITE_P(Engine, SymmetryLayouts,
                         ::testing::Values(LayoutCase{2, 2, 2, 2, 1, false},
                                           LayoutCase{2, 2, 4, 4, 2, true},
                                           LayoutCase{4, 2, 3, 3, 2, false},
                                           LayoutCase{1, 4, 2, 2, 1, true}));

// Pipeline timing by hand for pp=2, tp=1, dp=1, one micro-batch, ranks on different nodes:
// r0 fwd 0-100 us, then sends 4 MiB (xfer = 2 us + 1 ns/B); r1 runs fwd 110 us and bwd
// 220 us after receiving, sends back (xfer); r0 then runs bwd 200 us.
TEST(Symmetry, PipelineMatchesClosedForm) {
  LayoutGraph::Shape s;
  s.tp = 1;
  s.dp = 1;
  s.pp = 2;
  s.micro = 1;
  s.gpus_per_node = 1;
  LayoutGraph g(s);
  const auto res = run(g, ReplayMode::Symmetric);
  const TimeNs xfer = 2000 + (1 << 22);  // 2 us + 1 ns per byte
  const TimeNs r1_end = 100'000 + xfer + 110'000 + 220'000;
  const TimeNs r0_end = r1_end + xfer + 200'000;
  EXPECT_EQ(res.units[1].end, r1_end + xfer);  // its send back ends when r0 receives
  EXPECT_EQ(res.units[0].end, r0_end);
}

// The cost of symmetric replay does not grow with the world: dp 2 -> 512 (8 -> 2048 ranks).
TEST(Symmetry, CostIndependentOfWorldSize) {
  LayoutGraph::Shape s;
  s.tp = 2;
  s.pp = 2;
  s.micro = 4;
  s.dp = 2;
  const auto small = run(LayoutGraph(s), ReplayMode::Symmetric);
  s.dp = 512;
  const auto big = run(LayoutGraph(s), ReplayMode::Symmetric);
  EXPECT_EQ(small.events, big.events);
  EXPECT_EQ(small.units.size(), big.units.size());
  EXPECT_EQ(small.units[0].ops, big.units[0].ops);
}

}  // namespace
}  // namespace crystal::replay

namespace crystal::replay {
namespace {

// Classes that are not symmetric: rank 0 sends to rank 3, but class 1's representative
// (rank 2) never receives. The symmetric replay times the send from its own side (posted
// at 10 us, 2 us + 1 ns/B across nodes) and counts it; naive mode is exact and has no
// such op.
TEST(Symmetry, AsymmetricClassesAreTimedFromTheArrivingSideAndCounted) {
  TinyGraph g(4, 1);
  g.setClasses({0, 0, 1, 1}, 2);
  const auto c = g.addComm("pp", {0, 1, 2, 3});
  g.ops(0) = {compute(10), p2p(OpKind::Send, c, 3, 0, 1000)};
  g.ops(1) = {compute(10)};
  g.ops(2) = {compute(10)};
  g.ops(3) = {compute(10), p2p(OpKind::Recv, c, 0, 0, 1000)};
  const auto sym = run(g, ReplayMode::Symmetric);
  EXPECT_EQ(sym.uncoupled_ops, 1u);
  EXPECT_EQ(sym.units[0].end, 13'000);
  const auto naive = run(g, ReplayMode::Naive);
  EXPECT_EQ(naive.uncoupled_ops, 0u);
  EXPECT_EQ(naive.units[0].end, 13'000);
  EXPECT_EQ(naive.units[3].end, 13'000);
}

}  // namespace
}  // namespace crystal::replay
