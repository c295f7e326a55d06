// The step-level max-plus recurrences (pipeline.h) against their closed forms
// (closed_form.h), over the ranks and sizes the issue names: n = 2, 3, 8, 64, 1024, 8192
// and 1 KiB .. 8 GiB, for every ring collective, tree all-reduce, and each protocol
// (LL/LL128 up to 256 MiB).
#include "model/closed_form.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "crystal/model/nccl_model.h"
#include "model/pipeline.h"

namespace crystal::model {
namespace {

struct Case {
  CommShape shape;
  int nodes;
};

// Shapes on DGX-like nodes: 1 GPU per node for n = 2, 3; otherwise 8 per node.
std::vector<Case> shapes() {
  return {{{2, 2, 1}, 2},  {{3, 3, 1}, 3},        {{8, 1, 8}, 1},
          {{64, 8, 8}, 8}, {{1024, 128, 8}, 128}, {{8192, 1024, 8}, 1024}};
}

NcclModel modelFor(int nodes) {
  ClusterConfig c;
  c.nodes = nodes;
  return NcclModel(c, ModelConfig{});
}

TEST(ClosedForm, RecurrenceMatchesWithinOnePercent) {
  const std::uint64_t sizes[] = {1ULL << 10, 1ULL << 16, 1ULL << 22, 1ULL << 28, 8ULL << 30};
  const Func ring_funcs[] = {Func::AllReduce, Func::AllGather, Func::ReduceScatter};
  const Proto protos[] = {Proto::LL, Proto::LL128, Proto::Simple};
  int checked = 0;
  for (const Case& cs : shapes()) {
    const NcclModel m = modelFor(cs.nodes);
    const int ch = m.commChannels(cs.shape);
    for (std::uint64_t bytes : sizes) {
      for (Proto p : protos) {
        // NCCL never runs LL/LL128 at GiB sizes; their line-grain recurrences there would
        // only slow the sanitizer build down.
        if (p != Proto::Simple && bytes > (256ULL << 20)) continue;
        for (Func f : ring_funcs) {
          const double closed = m.time(f, bytes, cs.shape, Algo::Ring, p, ch);
          const double rec = m.timeByRecurrence(f, bytes, cs.shape, Algo::Ring, p, ch);
          ASSERT_GT(closed, 0);
          EXPECT_NEAR(closed, rec, 0.01 * rec) << toString(f) << " n=" << cs.shape.nranks
                                               << " bytes=" << bytes << " " << toString(p);
          ++checked;
        }
        const double closed = m.time(Func::AllReduce, bytes, cs.shape, Algo::Tree, p, ch);
        const double rec = m.timeByRecurrence(Func::AllReduce, bytes, cs.shape, Algo::Tree, p, ch);
        ASSERT_GT(closed, 0);
        EXPECT_NEAR(closed, rec, 0.01 * rec)
            << "tree n=" << cs.shape.nranks << " bytes=" << bytes << " " << toString(p);
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 6 * (5 + 4 + 4) * 4);
}

// The pipelined closed form reduces to the textbook alpha-beta forms in their regimes.
TEST(ClosedForm, RingLimitsAreTextbookAlphaBeta) {
  RingRun r;
  r.period = 1;
  r.nvl = Hop{2.0, 1e-4};  // 2 us, 10 GB/s
  r.steps = 2 * (8 - 1);
  r.slices = 2;
  r.loops = 1000;
  r.slice_bytes = 1 << 20;  // bandwidth-bound: S*t = 210 us >> a + t
  const double bytes = static_cast<double>(r.units()) * r.slice_bytes;  // per rank moved
  // All data leaves each rank once per unit: T = U*t + a.
  EXPECT_NEAR(ringClosedForm(r), bytes * 1e-4 + 2.0, 1e-6);
  EXPECT_NEAR(ringRecurrence(r), ringClosedForm(r), 1e-6 * ringClosedForm(r));
  // Latency-bound (tiny slices, one loop): every step pays a + t, the textbook
  // 2(n-1)(a + b*m/n) with m/n = one chunk per step.
  r.loops = 1;
  r.slices = 1;
  r.slice_bytes = 64;
  const double tb = textbookRing(Func::AllReduce, 8, 64.0 * 8, 2.0, 1e-4);
  EXPECT_NEAR(ringClosedForm(r), tb, 1e-9);
  EXPECT_NEAR(ringRecurrence(r), tb, 1e-9);
}

TEST(ClosedForm, TreeChainIsTandemLine) {
  ChainRun c;
  c.nvl_hops = 14;
  c.net_hops = 6;
  c.nvl = Hop{0.7, 1.0 / 28e3};
  c.net = Hop{3.0, 1.0 / 25e3};
  c.units = 500;
  c.unit_bytes = 1 << 19;
  c.share = 2;
  const double s_net = (1 << 19) / 25e3;
  const double s_nvl = (1 << 19) / 28e3;
  const double expect = 14 * (s_nvl + 0.7) + 6 * (s_net + 3.0) + 499 * 2 * s_net;
  EXPECT_NEAR(chainClosedForm(c), expect, 1e-6);
  EXPECT_NEAR(chainRecurrence(c), expect, 1e-6);
}

// Members arriving at different times: the class closed form against a brute-force
// recurrence over every rank of the ring.
TEST(ClosedForm, StartOffsetsMatchPerRankRecurrence) {
  for (double alpha : {0.5, 20.0}) {  // bandwidth-bound and latency-bound steps
    RingRun r;
    r.period = 1;
    r.nvl = Hop{alpha, 1e-3};
    r.steps = 2 * (12 - 1);
    r.slices = 2;
    r.loops = 1;
    r.slice_bytes = 4096;  // t = 4.1 us
    const std::vector<StartClass> classes = {{0.0, 3}, {50.0, 2}, {5.0, 4}, {120.0, 1}, {0.0, 2}};
    std::vector<double> starts;
    for (const StartClass& c : classes) starts.insert(starts.end(), c.count, c.offset_us);
    const std::vector<double> per_rank = ringRecurrencePerRank(r, 12, starts);
    const std::vector<double> by_class = ringFinishByClass(r, 12, classes);
    int rank = 0;
    for (std::size_t k = 0; k < classes.size(); ++k) {
      double worst = 0;
      for (int i = 0; i < classes[k].count; ++i) worst = std::max(worst, per_rank[rank++]);
      EXPECT_NEAR(by_class[k], worst, 1e-6) << "alpha " << alpha << " class " << k;
    }
    // Equal starts reproduce the symmetric ring.
    const std::vector<StartClass> same = {{7.0, 12}};
    EXPECT_NEAR(ringFinishByClass(r, 12, same)[0], 7.0 + ringClosedForm(r), 1e-6);
  }
}

// Rings mixing NVLink and NET hops (4 nodes x 4), bandwidth- and latency-bound.
TEST(ClosedForm, StartOffsetsOnMixedRing) {
  RingRun r;
  r.period = 4;
  r.has_net = true;
  r.nvl = Hop{1.0, 1.0 / 28e3};
  r.net = Hop{14.0, 1.0 / 12.5e3};
  r.steps = 2 * (16 - 1);
  r.slices = 2;
  r.loops = 3;
  r.slice_bytes = 1 << 18;
  const std::vector<StartClass> classes = {{0.0, 4}, {300.0, 4}, {40.0, 8}};
  std::vector<double> starts;
  for (const StartClass& c : classes) starts.insert(starts.end(), c.count, c.offset_us);
  const std::vector<double> per_rank = ringRecurrencePerRank(r, 16, starts);
  const std::vector<double> by_class = ringFinishByClass(r, 16, classes);
  int rank = 0;
  for (std::size_t k = 0; k < classes.size(); ++k) {
    double worst = 0;
    for (int i = 0; i < classes[k].count; ++i) worst = std::max(worst, per_rank[rank++]);
    EXPECT_NEAR(by_class[k], worst, 1e-6 * worst) << "class " << k;
  }
  // With equal starts the per-rank recurrence is the per-position one.
  const std::vector<double> zero(16, 0.0);
  double end = 0;
  for (double f : ringRecurrencePerRank(r, 16, zero)) end = std::max(end, f);
  EXPECT_NEAR(end, ringRecurrence(r), 1e-6);
}

// Random arrival blocks (not aligned to nodes, some shorter than a node) on mixed rings:
// within 1 % (the path bound ignores where loop boundaries force serial sends).
TEST(ClosedForm, StartOffsetsRandomBlocks) {
  std::uint64_t seed = 12345;
  auto next = [&](int mod) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<int>((seed >> 33) % static_cast<std::uint64_t>(mod));
  };
  for (int trial = 0; trial < 40; ++trial) {
    RingRun r;
    r.period = trial % 2 == 0 ? 4 : 8;
    const int n = r.period * (2 + next(3));
    r.has_net = true;
    r.nvl = Hop{0.7 + next(3), 1.0 / 28e3};
    r.net = Hop{2.0 + next(20), 1.0 / (5e3 + 1e3 * next(40))};
    r.steps = trial % 3 == 0 ? n - 1 : 2 * (n - 1);
    r.slices = 1 + next(2);
    r.loops = 1 + next(3);
    r.slice_bytes = 64.0 * (1 << next(14));
    std::vector<StartClass> classes;
    for (int left = n; left > 0;) {
      const int c = std::min(left, 1 + next(n / 2));
      classes.push_back({static_cast<double>(next(400)), c});
      left -= c;
    }
    std::vector<double> starts;
    for (const StartClass& c : classes) starts.insert(starts.end(), c.count, c.offset_us);
    const std::vector<double> per_rank = ringRecurrencePerRank(r, n, starts);
    const std::vector<double> by_class = ringFinishByClass(r, n, classes);
    int rank = 0;
    for (std::size_t k = 0; k < classes.size(); ++k) {
      double worst = 0;
      for (int i = 0; i < classes[k].count; ++i) worst = std::max(worst, per_rank[rank++]);
      EXPECT_NEAR(by_class[k], worst, 0.01 * worst) << "trial " << trial << " class " << k;
      EXPECT_GE(by_class[k], worst - 1e-6 * worst);  // never optimistic
    }
  }
}

}  // namespace
}  // namespace crystal::model
