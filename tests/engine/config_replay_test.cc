// The engine on real graphs (crystal_graph generator) priced by the NCCL model
// (crystal_model): symmetric = naive on every rank, and what-if changes in the config move
// the prediction in the expected direction.
#include <gtest/gtest.h>

#include <algorithm>

#include "crystal/config/config.h"
#include "crystal/graph/graph.h"
#include "crystal/replay/cost_model.h"
#include "crystal/replay/replay.h"

namespace crystal::replay {
namespace {

// 128 ranks: 16 nodes x 8 GPUs, TP8 (one node) PP4 DP4, a short Llama-like model.
Config smallJob() {
  Config c = loadConfig(CRYSTAL_SOURCE_DIR "/config/examples/llama3-70b-8192.yaml");
  c.cluster.nodes = 16;
  c.job.world_size = 128;
  c.job.layout.tp = 8;
  c.job.layout.pp = 4;
  c.job.layout.dp = 4;
  c.job.layout.cp = 1;
  c.job.layout.ep = 1;
  c.workload.layers = 8;
  c.workload.seq_len = 4096;
  c.workload.micro_batches = 8;
  return c;
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
  for (const auto& u : r.units) {
    EXPECT_GT(u.iterations.at(0).time, 0);
    EXPECT_GT(u.iterations.at(0).compute, 0);
    EXPECT_LE(u.iterations.at(0).compute, u.iterations.at(0).time);
    EXPECT_GT(u.peak_memory, 0u);
  }
}

TEST(WhatIf, FasterNicsShortenTheIteration) {
  Config fast = smallJob();
  fast.cluster.fabric.nic.bandwidth_GBps *= 4;
  EXPECT_LT(iteration(fast), iteration(smallJob()));
}

TEST(WhatIf, FewerNicsLengthenTheIteration) {
  Config few = smallJob();
  few.cluster.fabric.nics_per_node = 1;
  EXPECT_GT(iteration(few), iteration(smallJob()));
}

TEST(WhatIf, SlowerNvlinkLengthensTheIteration) {
  Config slow = smallJob();
  slow.cluster.nvlink.bandwidth_GBps /= 8;
  EXPECT_GT(iteration(slow), iteration(smallJob()));
}

// Tensor parallelism strided across nodes (dp fastest-varying) puts every TP all-reduce on
// the network instead of NVLink.
TEST(WhatIf, TensorParallelAcrossNodesLengthensTheIteration) {
  Config strided = smallJob();
  strided.job.layout.order = "dp-tp-cp-ep-pp";
  EXPECT_GT(iteration(strided), iteration(smallJob()));
}

}  // namespace
}  // namespace crystal::replay
