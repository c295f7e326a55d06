// Slicing: recordings of one rank per pipeline stage rebuild the generated graph op for op.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "crystal/base/error.h"
#include "crystal/graph/import.h"
#include "graph/template_graph.h"
#include "graph/validate.h"
#include "tests/graph/test_configs.h"
#include "tests/record/graph_compare.h"

namespace crystal::graph {
namespace {

using testing::Compare;
using testing::firstDifference;
using ::testing::HasSubstr;

// A Llama-like dense job at 8192 ranks with two pipeline stages: the 2-class slice.
Config dense8192TwoStages() {
  return parseConfig(
      "cluster: {preset: h200-dgx-ib, nodes: 1024}\n"
      "job: {world_size: 8192, layout: {tp: 8, dp: 512, pp: 2}}\n"
      "workload: {kind: dense, layers: 4, hidden: 8192, ffn_hidden: 28672, heads: 64, "
      "kv_heads: 8, vocab: 128256, seq_len: 8192, micro_batches: 4}\n",
      "dense8192.yaml");
}

// One recording per class, from `pick(cls)` (default: the representative).
std::vector<RecordedRank> record(const Graph& g, int offset = 0, bool strip_names = false) {
  std::vector<RecordedRank> out;
  for (std::int32_t c = 0; c < g.numClasses(); ++c) {
    const std::int32_t rank = g.representative(c) + offset;
    out.push_back(recordingOf(g, rank));
    if (strip_names)
      for (auto& comm : out.back().comms) comm.name.clear();
  }
  return out;
}

TEST(Slice, DenseEightGpuExampleComesBackOpForOp) {
  const Config cfg = loadConfig(CRYSTAL_SOURCE_DIR "/config/examples/dense-8gpu.yaml");
  const auto yaml = buildGraph(cfg);
  ASSERT_EQ(yaml->numClasses(), 2);
  const auto sliced = sliceRecordings(cfg, record(*yaml));
  EXPECT_EQ(firstDifference(*yaml, *sliced, Compare::Exact), "");
  EXPECT_EQ(sliced->totalOps(), yaml->totalOps());
  EXPECT_NO_THROW((void)validateGraph(*sliced));
}

TEST(Slice, TwoStageSliceExpandsTo8192RanksOpForOp) {
  const Config cfg = dense8192TwoStages();
  const auto yaml = buildGraph(cfg);
  ASSERT_EQ(yaml->numClasses(), 2);
  // Not the representatives, and comm names dropped: families come from members alone.
  const auto sliced = sliceRecordings(cfg, record(*yaml, 8 * 37 + 3, true));
  EXPECT_EQ(firstDifference(*yaml, *sliced, Compare::Exact), "");
  EXPECT_EQ(sliced->totalOps(), yaml->totalOps());
}

TEST(Slice, MoeWithContextParallelAndExplicitCommComesBack) {
  const Config cfg = graph::testing::smallMoe();
  const auto yaml = buildGraph(cfg);
  const auto sliced = sliceRecordings(cfg, record(*yaml, 0, true));
  EXPECT_EQ(firstDifference(*yaml, *sliced, Compare::Exact), "");
}

TEST(Slice, TwoRecordingsOfOneStageMustAgree) {
  const Config cfg = graph::testing::smallDense();
  const auto yaml = buildGraph(cfg);
  auto recs = record(*yaml);
  recs.push_back(recordingOf(*yaml, yaml->representative(1) + 2));  // same stage, agrees
  EXPECT_NO_THROW(sliceRecordings(cfg, recs));
  auto bad = recordingOf(*yaml, yaml->representative(1) + 4);
  bad.source = "other.json";
  for (auto& op : bad.ops)
    if (op.kind == OpKind::Compute) {
      op.duration_us += 1;
      break;
    }
  recs.push_back(bad);
  try {
    (void)sliceRecordings(cfg, recs);
    FAIL() << "accepted disagreeing recordings";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("other.json (rank 12)"));
    EXPECT_THAT(e.what(), HasSubstr("both pipeline stage 1 but differ at op"));
  }
}

TEST(Slice, MissingStagesAreListed) {
  const Config cfg = dense8192TwoStages();
  const auto yaml = buildGraph(cfg);
  auto recs = record(*yaml);
  recs.erase(recs.begin() + 1);
  try {
    (void)sliceRecordings(cfg, recs);
    FAIL() << "sliced without stage 1";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("cover 1 of 2 pipeline stages; missing stage 1 (e.g. rank 4096)"));
  }
}

TEST(Slice, CommunicatorThatFitsNoFamilyIsNamed) {
  const Config cfg = graph::testing::smallDense();
  const auto yaml = buildGraph(cfg);
  auto recs = record(*yaml);
  recs[0].source = "r0.json";
  recs[0].comms[0].ranks = {0, 3};  // rank 0 with rank 3: no layout comm is that
  recs[0].comms[0].name.clear();
  try {
    (void)sliceRecordings(cfg, recs);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("r0.json: rank 0: communicator 'comm"));
    EXPECT_THAT(e.what(), HasSubstr("fits no communicator of the layout"));
  }
}

TEST(Slice, SizeOnlyCommunicatorsMustBeUnambiguous) {
  // tp2 dp4 pp2: tp and pp comms both have 2 members; without members nor name, a size-2
  // comm cannot be placed.
  const Config cfg = graph::testing::smallDense();
  const auto yaml = buildGraph(cfg);
  auto recs = record(*yaml);
  for (auto& c : recs[0].comms) {
    c.ranks.clear();
    c.name.clear();
    c.rank = -1;
  }
  try {
    (void)sliceRecordings(cfg, recs);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("fits layout families tp, pp alike"));
  }
  // A family name settles it.
  auto named = record(*yaml);
  for (auto& c : named[0].comms) c.ranks.clear();
  const auto sliced = sliceRecordings(cfg, named);
  EXPECT_EQ(firstDifference(*yaml, *sliced, Compare::Exact), "");
}

TEST(Slice, BadOpsAreNamed) {
  const Config cfg = graph::testing::smallDense();
  const auto yaml = buildGraph(cfg);
  auto recs = record(*yaml);
  recs[1].source = "r8.json";
  for (std::size_t i = 0; i < recs[1].ops.size(); ++i)
    if (recs[1].ops[i].kind == OpKind::Send) {
      recs[1].ops[i].peer = 99;
      recs[1].where.assign(recs[1].ops.size(), "");
      recs[1].where[i] = "traceEvents[5]";
      try {
        (void)sliceRecordings(cfg, recs);
        FAIL();
      } catch (const InputError& e) {
        EXPECT_THAT(e.what(), HasSubstr(fmt::format(
                                  "r8.json: rank 8 op {} (traceEvents[5]): peer 99 outside", i)));
      }
      return;
    }
  FAIL() << "stage 1 sends nothing";
}

TEST(Slice, RankOutsideTheWorld) {
  const Config cfg = graph::testing::smallDense();
  const auto yaml = buildGraph(cfg);
  auto recs = record(*yaml);
  recs[0].rank = 16;
  EXPECT_THROW((void)sliceRecordings(cfg, recs), InputError);
}

}  // namespace
}  // namespace crystal::graph
