// NCCL-tests' sizing and bandwidth rules, and the sweep against the model it must follow.
#include "crystal/sweep/sweep.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "crystal/base/error.h"
#include "crystal/sweep/sweep_report.h"

namespace crystal::sweep {
namespace {

ClusterConfig dgx(int nodes) {
  ClusterConfig c;  // defaults: 8 x H200 per node, NVLink 450 GB/s, 8 x 50 GB/s NICs
  c.nodes = nodes;
  return c;
}

TEST(BusBw, FactorsAreNcclTests) {
  EXPECT_DOUBLE_EQ(busBwFactor(TestOp::AllReduce, 8), 2.0 * 7 / 8);
  EXPECT_DOUBLE_EQ(busBwFactor(TestOp::AllReduce, 8192), 2.0 * 8191 / 8192);
  EXPECT_DOUBLE_EQ(busBwFactor(TestOp::AllGather, 64), 63.0 / 64);
  EXPECT_DOUBLE_EQ(busBwFactor(TestOp::ReduceScatter, 1024), 1023.0 / 1024);
  EXPECT_DOUBLE_EQ(busBwFactor(TestOp::AllToAll, 2), 0.5);
  EXPECT_DOUBLE_EQ(busBwFactor(TestOp::Broadcast, 8192), 1.0);
  EXPECT_DOUBLE_EQ(busBwFactor(TestOp::SendRecv, 8192), 1.0);
  EXPECT_DOUBLE_EQ(busBwFactor(TestOp::Reduce, 8192), 1.0);
  // One rank: NCCL-tests prints busbw 0 for the collectives that move nothing between ranks.
  EXPECT_DOUBLE_EQ(busBwFactor(TestOp::AllReduce, 1), 0.0);
  EXPECT_DOUBLE_EQ(busBwFactor(TestOp::AllGather, 1), 0.0);
  EXPECT_DOUBLE_EQ(busBwFactor(TestOp::Broadcast, 1), 1.0);
}

TEST(TestSize, PerRankBlocksRoundDownTo16Bytes) {
  const DataType f = parseDataType("float");
  // 1 MiB of floats on 64 ranks: 262144 / 64 = 4096 elements per rank.
  EXPECT_EQ(testSize(TestOp::AllGather, 1 << 20, f, 64).count, 4096u);
  EXPECT_EQ(testSize(TestOp::AllGather, 1 << 20, f, 64).size_bytes, 1u << 20);
  // 512 B on 64 ranks: 128 / 64 = 2 elements -> rounded down to 16 B = 4 floats -> 0.
  EXPECT_EQ(testSize(TestOp::ReduceScatter, 512, f, 64).count, 0u);
  EXPECT_EQ(testSize(TestOp::ReduceScatter, 512, f, 64).size_bytes, 0u);
  // 1000 B on 3 ranks: 250 / 3 = 83 -> 80 elements; size 80 * 3 * 4.
  EXPECT_EQ(testSize(TestOp::AllToAll, 1000, f, 3).count, 80u);
  EXPECT_EQ(testSize(TestOp::AllToAll, 1000, f, 3).size_bytes, 960u);
  // Whole-buffer ops keep the count: 8 B of floats = 2 elements on any N.
  EXPECT_EQ(testSize(TestOp::AllReduce, 8, f, 8192).count, 2u);
  EXPECT_EQ(testSize(TestOp::Broadcast, 8, f, 8192).size_bytes, 8u);
  EXPECT_EQ(testSize(TestOp::Reduce, 8, f, 8192).count, 2u);
  EXPECT_EQ(testSize(TestOp::SendRecv, 10, f, 2).size_bytes, 8u);
  // int8: 16-element alignment.
  EXPECT_EQ(testSize(TestOp::AllGather, 1000, parseDataType("int8"), 2).count, 496u);
}

TEST(Steps, FactorAndIncrement) {
  EXPECT_EQ(stepSizes(8, 128, 2, 0), (std::vector<std::uint64_t>{8, 16, 32, 64, 128}));
  EXPECT_EQ(stepSizes(8, 100, 4, 0), (std::vector<std::uint64_t>{8, 32}));
  EXPECT_EQ(stepSizes(10, 40, 0, 10), (std::vector<std::uint64_t>{10, 20, 30, 40}));
  EXPECT_EQ(stepSizes(8, 8ULL << 30, 2, 0).size(), 31u);
  EXPECT_THROW((void)stepSizes(16, 8, 2, 0), InputError);
  EXPECT_THROW((void)stepSizes(8, 16, 1, 0), InputError);
  EXPECT_THROW((void)stepSizes(8, 16, 0, 0), InputError);
  EXPECT_THROW((void)stepSizes(0, 16, 2, 0), InputError);
  EXPECT_EQ(stepSizes(1, kMaxSteps, 0, 1).size(), kMaxSteps);
  EXPECT_THROW((void)stepSizes(1, 1ULL << 30, 0, 1), InputError);
}

TEST(Args, SizesOpsTypes) {
  EXPECT_EQ(parseSizeArg("-b", "8"), 8u);
  EXPECT_EQ(parseSizeArg("-e", "1G"), 1ULL << 30);
  EXPECT_EQ(parseSizeArg("-e", "64k"), 64u << 10);
  EXPECT_EQ(parseSizeArg("-e", "3M"), 3u << 20);
  for (const char* bad : {"", "G", "1.5M", "-1", "12X", "99999999999G"})
    EXPECT_THROW((void)parseSizeArg("-b", bad), InputError) << bad;
  EXPECT_EQ(parseTestOp("all_reduce_perf"), TestOp::AllReduce);
  EXPECT_EQ(parseTestOp("/opt/nccl-tests/build/alltoall_perf"), TestOp::AllToAll);
  EXPECT_EQ(parseTestOp("reduce_scatter"), TestOp::ReduceScatter);
  EXPECT_EQ(parseTestOp("sendrecv"), TestOp::SendRecv);
  EXPECT_EQ(parseTestOp("reduce_perf"), TestOp::Reduce);  // not reduce_scatter_perf's prefix
  EXPECT_EQ(parseTestOp("reduce"), TestOp::Reduce);
  EXPECT_EQ(parseTestOp("python3"), std::nullopt);
  EXPECT_EQ(parseTestOpList("allreduce,broadcast"),
            (std::vector<TestOp>{TestOp::AllReduce, TestOp::Broadcast}));
  try {
    (void)parseTestOpList("allreduce,gather");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("'gather'"), std::string::npos);
  }
  EXPECT_EQ(parseDataType("bfloat16").bytes, 2);
  EXPECT_THROW((void)parseDataType("fp32"), InputError);
}

TEST(Shape, WholeNodes) {
  const ClusterConfig c = dgx(1024);
  const model::CommShape s = sweepShape(c, 8192);
  EXPECT_EQ(s.nnodes, 1024);
  EXPECT_EQ(s.ranks_per_node, 8);
  EXPECT_EQ(sweepShape(c, 4).nnodes, 1);
  EXPECT_EQ(sweepShape(c, 4).ranks_per_node, 4);
  EXPECT_THROW((void)sweepShape(c, 12), InputError);
  EXPECT_THROW((void)sweepShape(c, 0), InputError);
}

// Hand-computed from docs/model.md: a cross-node p2p is one NET hop in 128 KiB chunks,
// alpha = NIC 2.0 + one leaf hop 0.25 + Simple proxy overhead 11.75 = 14.0 us, plus NCCL's
// Ring/Simple base latency 8.4 us. 16 ranks: NCCL gives the NET peer 2 channels, each moving
// 14.3 GB/s (the GPU's pace, below the 50 GB/s rail NIC), so the chunks go at 28.6 GB/s after
// the first crossed the NIC: T = 8.4 + 14.0 + 131072 / 50e3 + bytes / 28.6e3.
TEST(Sweep, SendRecvAcrossNodesByHand) {
  const model::NcclModel m(dgx(2), ModelConfig{});
  SweepOptions o;
  o.ops = {TestOp::SendRecv};
  o.steps = {1 << 21};
  o.nranks = 16;
  const auto rows = runSweep(m, o);
  ASSERT_EQ(rows.size(), 1u);
  const double t = 8.4 + 14.0 + 131072.0 / 50e3 + 2097152.0 / 28.6e3;
  EXPECT_NEAR(rows[0].time_us, t, 1e-9);
  EXPECT_NEAR(rows[0].algbw_GBps, 2097152.0 / 1e3 / t, 1e-9);
  EXPECT_DOUBLE_EQ(rows[0].busbw_GBps, rows[0].algbw_GBps);
  EXPECT_EQ(rows[0].count, 524288u);
  EXPECT_EQ(rows[0].redop, "none");
  EXPECT_EQ(rows[0].root, -1);
}

// --rank R: broadcast rows as rank R sees them (root 0), other ops as before.
TEST(Sweep, BroadcastAtARanksPlace) {
  const model::NcclModel m(dgx(8), ModelConfig{});
  SweepOptions o;
  o.ops = {TestOp::Broadcast, TestOp::AllReduce};
  o.steps = {256 << 20};
  o.nranks = 64;
  const auto whole = runSweep(m, o);
  o.rank = 0;
  const auto root = runSweep(m, o);
  o.rank = 63;
  const auto last = runSweep(m, o);
  ASSERT_EQ(whole.size(), 2u);
  const model::CommShape shape{64, 8, 8};
  const model::Choice c = m.choose(model::Func::Broadcast, 256 << 20, shape);
  // Per operation of NCCL-tests' 20 back to back.
  EXPECT_DOUBLE_EQ(root[0].time_us, m.loopTimeAtRank(model::Func::Broadcast, 256 << 20, shape,
                                                     c.algo, c.proto, c.channels, 0, 0, 20));
  EXPECT_LT(root[0].time_us, whole[0].time_us);
  EXPECT_DOUBLE_EQ(last[0].time_us, whole[0].time_us);  // the chain's last rank
  EXPECT_DOUBLE_EQ(root[1].time_us, whole[1].time_us);  // all-reduce: every rank alike
  // -n 1: one operation alone.
  o.iters = 1;
  o.rank = 0;
  const auto alone = runSweep(m, o);
  EXPECT_DOUBLE_EQ(alone[0].time_us, m.timeAtRank(model::Func::Broadcast, 256 << 20, shape, c.algo,
                                                  c.proto, c.channels, 0, 0));
  EXPECT_DOUBLE_EQ(alone[1].time_us, root[1].time_us);
  o.rank.reset();
  EXPECT_DOUBLE_EQ(runSweep(m, o)[0].time_us, c.time_us);
}

// --rank R: ring all-gather / reduce-scatter rows as rank R sees them (its own finish): a
// node's first rank ends with the whole operation, one later in its node earlier.
TEST(Sweep, RingRowsAtARanksPlace) {
  const model::NcclModel m(dgx(8), ModelConfig{});
  SweepOptions o;
  o.ops = {TestOp::AllGather, TestOp::ReduceScatter};
  o.steps = {256u << 20};
  o.nranks = 64;
  o.proto = model::Proto::Simple;
  const auto whole = runSweep(m, o);
  o.rank = 8;
  const auto first = runSweep(m, o);
  o.rank = 13;
  const auto middle = runSweep(m, o);
  ASSERT_EQ(whole.size(), 2u);
  const model::CommShape shape{64, 8, 8};
  for (std::size_t i = 0; i < 2; ++i) {
    ASSERT_EQ(whole[i].algo, "Ring");
    EXPECT_NEAR(first[i].time_us, whole[i].time_us, 1e-6 * whole[i].time_us);
    EXPECT_LT(middle[i].time_us, 0.99 * whole[i].time_us);
  }
  EXPECT_DOUBLE_EQ(middle[0].time_us,
                   m.timeAtRank(model::Func::AllGather, 256u << 20, shape, model::Algo::Ring,
                                model::Proto::Simple, whole[0].channels, 13, -1));
}

TEST(Sweep, CollectivesAreTheModelsChoice) {
  const model::NcclModel m(dgx(1024), ModelConfig{});
  SweepOptions o;
  o.steps = stepSizes(8, 1ULL << 30, 4, 0);
  o.nranks = 8192;
  const auto rows = runSweep(m, o);
  ASSERT_EQ(rows.size(), o.steps.size() * 7);
  const model::CommShape shape{8192, 1024, 8};
  for (const SweepRow& r : rows) {
    SCOPED_TRACE(std::string(name(r.op)) + " " + std::to_string(r.size_bytes));
    if (r.count == 0) {
      EXPECT_EQ(r.time_us, 0);
      continue;
    }
    double want = 0;
    switch (r.op) {
      case TestOp::AllReduce:
        want = m.choose(model::Func::AllReduce, r.size_bytes, shape).time_us;
        EXPECT_EQ(r.redop, "sum");
        break;
      case TestOp::AllGather:
        want = m.choose(model::Func::AllGather, r.size_bytes, shape).time_us;
        break;
      case TestOp::ReduceScatter:
        want = m.choose(model::Func::ReduceScatter, r.size_bytes, shape).time_us;
        break;
      case TestOp::Broadcast:
        want = [&] {
          const model::Choice c = m.choose(model::Func::Broadcast, r.size_bytes, shape);
          return m.loopTimeAtRank(model::Func::Broadcast, r.size_bytes, shape, c.algo, c.proto,
                                  c.channels, -1, 0, 20);
        }();
        EXPECT_EQ(r.root, 0);
        break;
      case TestOp::Reduce:  // per operation of 20 back to back, at the root: the chain's end
        want = [&] {
          const model::Choice c = m.choose(model::Func::Reduce, r.size_bytes, shape);
          return m.loopTimeAtRank(model::Func::Reduce, r.size_bytes, shape, c.algo, c.proto,
                                  c.channels, 0, 0, 20);
        }();
        EXPECT_EQ(r.root, 0);
        EXPECT_EQ(r.redop, "sum");
        break;
      case TestOp::AllToAll:
        want = std::max(m.allToAllTime(r.count * 4, shape), m.allToAllHostUs(shape));
        break;
      case TestOp::SendRecv:
        want = m.p2pTime(r.size_bytes, false, 8192);
        break;
    }
    EXPECT_DOUBLE_EQ(r.time_us, want);
    EXPECT_GT(r.time_us, 0);
    EXPECT_NEAR(r.busbw_GBps,
                static_cast<double>(r.size_bytes) / 1e3 / r.time_us * busBwFactor(r.op, 8192),
                1e-12 * r.busbw_GBps + 1e-15);
  }
}

// nccl-tests' all-to-all loop is host-bound at small sizes: a row is the larger of the GPU's
// time and NCCL's enqueue of the 2 N grouped calls (64 ranks: 98.26 us).
TEST(Sweep, AllToAllRowsAreBoundByTheHost) {
  const model::NcclModel m(dgx(8), ModelConfig{});
  SweepOptions o;
  o.ops = {TestOp::AllToAll};
  o.steps = {1024, 1ULL << 30};
  o.nranks = 64;
  const auto rows = runSweep(m, o);
  ASSERT_EQ(rows.size(), 2u);
  const model::CommShape shape{64, 8, 8};
  EXPECT_NEAR(rows[0].time_us, 2.9 + 1.49 * 64, 1e-9);
  EXPECT_GT(rows[0].time_us, m.allToAllTime(16, shape));
  EXPECT_DOUBLE_EQ(rows[1].time_us, m.allToAllTime((1ULL << 30) / 64, shape));
  ModelConfig free_host;
  free_host.overrides.emplace_back("a2a_peer_host_us", 0.0);
  free_host.overrides.emplace_back("a2a_group_host_us", 0.0);
  const model::NcclModel gpu_only(dgx(8), free_host);
  EXPECT_DOUBLE_EQ(runSweep(gpu_only, o)[0].time_us, gpu_only.allToAllTime(16, shape));
}

TEST(Sweep, SelfSendOnOneRankHasNoPrice) {
  const model::NcclModel m(dgx(1), ModelConfig{});
  SweepOptions o;
  o.ops = {TestOp::SendRecv};
  o.steps = {1024};
  o.nranks = 1;
  const auto rows = runSweep(m, o);
  EXPECT_EQ(rows[0].algo, "self");
  EXPECT_EQ(rows[0].time_us, 0);
}

TEST(Report, NcclTestsNumberFormat) {
  EXPECT_EQ(ncclTestsNumber(12.345, 7), "  12.35");
  EXPECT_EQ(ncclTestsNumber(12345.6, 7), "12345.6");
  EXPECT_EQ(ncclTestsNumber(1234567.0, 7), "1234567");
  EXPECT_EQ(ncclTestsNumber(123456789.0, 7), "1.2e+08");
  EXPECT_EQ(ncclTestsNumber(291.85, 6), "291.85");
  EXPECT_EQ(ncclTestsNumber(1234.5, 6), "1234.5");
}

TEST(Report, TableAndJson) {
  const model::NcclModel m(dgx(1), ModelConfig{});
  SweepOptions o;
  o.ops = {TestOp::AllReduce, TestOp::Broadcast};
  o.steps = {1024, 4096};
  o.nranks = 8;
  const auto rows = runSweep(m, o);
  const std::string t = formatSweepTable(rows, 8, RowSource::Model);
  EXPECT_NE(t.find("# allreduce (all_reduce_perf) on 8 ranks"), std::string::npos);
  EXPECT_NE(t.find("# broadcast (broadcast_perf) on 8 ranks"), std::string::npos);
  EXPECT_NE(t.find("        1024           256     float     sum      -1"), std::string::npos);
  const nlohmann::json j = sweepJson(rows, 8, RowSource::Model);
  EXPECT_EQ(j["nranks"], 8);
  EXPECT_EQ(j["source"], "model");
  ASSERT_EQ(j["results"].size(), 4u);
  EXPECT_EQ(j["results"][3]["op"], "broadcast");
  EXPECT_EQ(j["results"][3]["size"], 4096);
  EXPECT_EQ(j["results"][3]["root"], 0);
  EXPECT_DOUBLE_EQ(j["results"][0]["bus_bw"].get<double>(), rows[0].busbw_GBps);
  EXPECT_DOUBLE_EQ(j["results"][3]["time_after_first"].get<double>(), rows[3].time_after_first_us);
}

// -n N: the time per operation after the loop's first, for a program that times its first
// operation apart (hybrid_nccl's after_first_us). A reduce's chain fills once, in the first
// operation, so the rest run at the chain's pace; an all-reduce's operations all cost the same.
TEST(Sweep, TimeAfterTheFirstOperation) {
  const model::NcclModel m(dgx(8), ModelConfig{});
  SweepOptions o;
  o.ops = {TestOp::Reduce, TestOp::AllReduce, TestOp::SendRecv};
  o.steps = {1 << 20};
  o.nranks = 64;
  o.rank = 0;
  o.proto = model::Proto::Simple;
  o.iters = 20;
  const auto loop = runSweep(m, o);
  o.iters = 1;
  const auto alone = runSweep(m, o);
  ASSERT_EQ(loop.size(), 3u);
  const double rest = (20 * loop[0].time_us - alone[0].time_us) / 19;
  EXPECT_DOUBLE_EQ(loop[0].time_after_first_us, rest);
  EXPECT_GT(alone[0].time_us, 5 * loop[0].time_us) << "the fill dominates one reduce alone";
  EXPECT_LT(loop[0].time_after_first_us, loop[0].time_us);
  o.iters = 1000;  // the fill spread over 1000: close to the rest's pace
  EXPECT_NEAR(runSweep(m, o)[0].time_us, rest, 0.05 * rest);
  EXPECT_DOUBLE_EQ(loop[1].time_after_first_us, loop[1].time_us);
  EXPECT_DOUBLE_EQ(loop[2].time_after_first_us, loop[2].time_us);
  EXPECT_LT(alone[1].time_after_first_us, 0) << "-n 1 has no operation after the first";
  EXPECT_FALSE(sweepJson(alone, 64, RowSource::Model)["results"][1].contains("time_after_first"));
}

}  // namespace
}  // namespace crystal::sweep

namespace crystal::sweep {
namespace {

TEST(Sweep, ProtoRestrictionPicksCheapestAlgorithmOfThatProtocol) {
  ClusterConfig c;
  c.nodes = 128;
  const model::NcclModel m(c, ModelConfig{});
  SweepOptions o;
  o.ops = {TestOp::AllReduce, TestOp::AllGather};
  o.steps = stepSizes(8, 1ULL << 30, 16, 0);
  o.nranks = 1024;
  o.proto = model::Proto::Simple;
  const model::CommShape shape{1024, 128, 8};
  for (const SweepRow& r : runSweep(m, o)) {
    SCOPED_TRACE(std::string(name(r.op)) + " " + std::to_string(r.size_bytes));
    if (r.count == 0) continue;
    EXPECT_EQ(r.proto, "Simple");
    const auto f = r.op == TestOp::AllReduce ? model::Func::AllReduce : model::Func::AllGather;
    const model::CostTable cost = m.costTable(f, r.size_bytes, shape);
    // No algorithm's Simple entry is cheaper than the chosen one's in NCCL's estimate.
    int chosen = -1;
    for (int a = 0; a < model::kNumAlgos; ++a)
      if (model::toString(static_cast<model::Algo>(a)) == r.algo) chosen = a;
    ASSERT_GE(chosen, 0);
    ASSERT_GE(cost[chosen][2], 0);
    for (int a = 0; a < model::kNumAlgos; ++a)
      if (cost[a][2] >= 0) {
        EXPECT_LE(cost[chosen][2], cost[a][2]);
      }
    const model::Choice own = m.choose(f, r.size_bytes, shape);
    if (own.proto == model::Proto::Simple) {
      EXPECT_DOUBLE_EQ(r.time_us, own.time_us);
      EXPECT_EQ(r.channels, own.channels);
    } else {
      EXPECT_EQ(r.channels, m.commChannels(shape));
      EXPECT_DOUBLE_EQ(r.time_us, m.time(f, r.size_bytes, shape, static_cast<model::Algo>(chosen),
                                         model::Proto::Simple, r.channels));
    }
  }
  EXPECT_EQ(parseProto("simple"), model::Proto::Simple);
  EXPECT_EQ(parseProto("LL128"), model::Proto::LL128);
  EXPECT_THROW((void)parseProto("fast"), InputError);
}

}  // namespace
}  // namespace crystal::sweep
