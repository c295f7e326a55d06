// The engine on real graphs (crystal_graph generator) priced by the NCCL model
// (crystal_model): symmetric = naive on every rank, and what-if changes in the config move
// the prediction in the expected direction.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "crystal/config/config.h"
#include "crystal/graph/graph.h"
#include "crystal/replay/cost_model.h"
#include "crystal/replay/replay.h"
#include "test_graphs.h"

namespace crystal::replay {
namespace {

// 128 ranks: 16 nodes x 8 GPUs, TP8 (one node) PP4 DP4, a short Llama-like model. The
// what-if tests change one knob of this YAML (the config is parsed, as users give it).
struct Knobs {
  double nic_GBps = 50;
  int nics = 8;
  double nvlink_GBps = 450;
  std::string order = "tp-cp-ep-dp-pp";
};

Config smallJob(const Knobs& k = {}) {
  const std::string yaml = fmt::format(R"(
cluster:
  preset: h200-dgx-ib
  nodes: 16
  gpus_per_node: 8
  nvlink: {{bandwidth_GBps: {}, latency_us: 0.7}}
  fabric:
    nics_per_node: {}
    nic: {{bandwidth_GBps: {}, latency_us: 2.0}}
job:
  world_size: 128
  layout: {{tp: 8, cp: 1, ep: 1, dp: 4, pp: 4, order: {}}}
workload:
  kind: dense
  layers: 8
  hidden: 8192
  ffn_hidden: 28672
  heads: 64
  kv_heads: 8
  vocab: 128256
  seq_len: 4096
  micro_batches: 8
)",
                                       k.nvlink_GBps, k.nics, k.nic_GBps, k.order);
  return parseConfig(yaml, "<what-if>");
}

ReplayResult replayOf(const Config& c, ReplayMode mode = ReplayMode::Symmetric) {
  const auto g = graph::buildGraph(c);
  const NcclCostModel cost(c.cluster, c.model);
  ReplayOptions o;
  o.mode = mode;
  return runReplay(*g, cost, o);
}

// The job's iteration time: its slowest class.
TimeNs iteration(const Config& c) {
  const ReplayResult r = replayOf(c);
  EXPECT_EQ(r.uncoupled_ops, 0u);
  TimeNs t = 0;
  for (const auto& u : r.units) t = std::max(t, u.iterations.at(0).time);
  return t;
}

TEST(ConfigReplay, SymmetricEqualsNaiveOnTheSmallExample) {
  const Config c = loadConfig(CRYSTAL_SOURCE_DIR "/config/examples/dense-8gpu.yaml");
  const auto g = graph::buildGraph(c);
  const NcclCostModel cost(c.cluster, c.model);
  ReplayOptions o;
  const ReplayResult sym = runReplay(*g, cost, o);
  o.mode = ReplayMode::Naive;
  const ReplayResult naive = runReplay(*g, cost, o);
  EXPECT_EQ(sym.uncoupled_ops, 0u);
  for (std::int32_t r = 0; r < g->worldSize(); ++r) {
    EXPECT_EQ(sym.unitOf(*g, r).end, naive.unitOf(*g, r).end) << "rank " << r;
    EXPECT_EQ(sym.unitOf(*g, r).peak_memory, naive.unitOf(*g, r).peak_memory) << "rank " << r;
  }
}

TEST(ConfigReplay, SymmetricEqualsNaiveAcrossNodes) {
  const Config c = smallJob();
  const auto g = graph::buildGraph(c);
  const NcclCostModel cost(c.cluster, c.model);
  ReplayOptions o;
  const ReplayResult sym = runReplay(*g, cost, o);
  o.mode = ReplayMode::Naive;
  const ReplayResult naive = runReplay(*g, cost, o);
  for (std::int32_t r = 0; r < g->worldSize(); ++r)
    ASSERT_EQ(sym.unitOf(*g, r).end, naive.unitOf(*g, r).end) << "rank " << r;
}

TEST(ConfigReplay, PredictionIsPositiveAndHasComputeAndMemory) {
  const ReplayResult r = replayOf(smallJob());
  ASSERT_FALSE(r.units.empty());
  for (const auto& u : r.units) EXPECT_EQ(u.iterations.size(), 1u);
  for (const auto& u : r.units) {
    EXPECT_GT(u.iterations.at(0).time, 0);
    EXPECT_GT(u.iterations.at(0).compute, 0);
    EXPECT_LE(u.iterations.at(0).compute, u.iterations.at(0).time);
    EXPECT_GT(u.peak_memory, 0u);
  }
}

// One collective over the whole world, every rank in one class: the replayed time is the
// model's time for that call, from 2 to 8192 ranks (the engine adds nothing of its own).
TEST(ConfigReplay, LoneCollectiveTakesExactlyTheModelTime) {
  using testing::TinyGraph;
  const ModelConfig calib;
  for (const int world : {2, 64, 8192}) {
    for (const auto kind :
         {graph::CollKind::AllReduce, graph::CollKind::AllGather, graph::CollKind::ReduceScatter}) {
      TinyGraph g(world, 8);
      std::vector<std::int32_t> all(static_cast<std::size_t>(world));
      for (int r = 0; r < world; ++r) all[static_cast<std::size_t>(r)] = r;
      const auto c = g.addComm("world", all);
      g.setClasses(std::vector<std::int32_t>(static_cast<std::size_t>(world), 0), 1);
      const std::uint64_t bytes = 256ull << 20;
      for (int r = 0; r < world; ++r) g.ops(r) = {testing::coll(kind, c, bytes)};
      const NcclCostModel cost(g.config().cluster, calib);
      const model::NcclModel m(g.config().cluster, calib);
      const ReplayResult res = runReplay(g, cost, ReplayOptions{});
      const model::CommShape shape{world, std::max(1, world / 8), std::min(world, 8)};
      const double want = m.choose(static_cast<model::Func>(kind), bytes, shape).time_us;
      EXPECT_EQ(res.units.at(0).end, usToNs(want)) << world << " ranks, kind " << int(kind);
    }
  }
}

TEST(WhatIf, FasterNicsShortenTheIteration) {
  EXPECT_LT(iteration(smallJob({.nic_GBps = 200})), iteration(smallJob()));
}

TEST(WhatIf, FewerNicsLengthenTheIteration) {
  EXPECT_GT(iteration(smallJob({.nics = 1})), iteration(smallJob()));
}

TEST(WhatIf, SlowerNvlinkLengthensTheIteration) {
  EXPECT_GT(iteration(smallJob({.nvlink_GBps = 450.0 / 8})), iteration(smallJob()));
}

// Tensor parallelism strided across nodes (dp fastest-varying) puts every TP all-reduce on
// the network instead of NVLink.
TEST(WhatIf, TensorParallelAcrossNodesLengthensTheIteration) {
  EXPECT_GT(iteration(smallJob({.order = "dp-tp-cp-ep-pp"})), iteration(smallJob()));
}

}  // namespace
}  // namespace crystal::replay
