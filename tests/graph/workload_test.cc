// Workload generators: modelled values, the 1F1B memory profile, and slicing equivalence
// (every materialised rank equals a per-rank generation from brute-force communicators).
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "graph/layout.h"
#include "graph/rank_summary.h"
#include "graph/template_graph.h"
#include "graph/workload_costs.h"
#include "test_configs.h"

namespace crystal::graph {
namespace {

using testing::smallDense;
using testing::smallMoe;

std::uint64_t countNamed(const Graph& g, int rank, std::string_view name) {
  std::vector<Op> ops;
  g.materialize(rank, ops);
  std::uint64_t n = 0;
  for (const Op& op : ops) n += g.name(op.name) == name;
  return n;
}

TEST(Workload, ClassesArePipelineStages) {
  auto g = buildGraph(smallDense());
  EXPECT_EQ(g->numClasses(), 2);
  EXPECT_EQ(g->classOf(3), 0);
  EXPECT_EQ(g->classOf(8), 1);
  EXPECT_EQ(g->representative(1), 8);
  EXPECT_EQ(g->classSize(1), 8);
  EXPECT_EQ(g->totalOps(), 8 * g->opCount(0) + 8 * g->opCount(8));
}

TEST(Workload, ModelledTimesAndBytes) {
  const Config c = smallDense();
  const WorkloadCosts k = computeCosts(c);
  // Hand-computed (docs/graph.md): T = 128 tokens, attention params 2*256*256 + 2*256*256,
  // matmul 2*T*p/tp + causal core 0.5*4*T*s*h/tp FLOPs at 100 TFLOP/s * 0.5, plus 6*T*h*2
  // bytes at 1000 GB/s.
  EXPECT_NEAR(k.attn_us, (33554432.0 + 4194304.0) / 5e7 + 393216.0 / 1e6, 1e-9);
  EXPECT_EQ(k.tp_allreduce_bytes, 128u * 256 * 2);
  EXPECT_EQ(k.layer_params, (262144u + 3u * 256 * 1024) / 2);
  auto g = buildGraph(c);
  std::vector<Op> ops;
  g->materialize(0, ops);
  for (const Op& op : ops) {
    if (g->name(op.name) == "fwd.attn") {
      EXPECT_DOUBLE_EQ(op.duration_us, k.attn_us);
    }
    if (g->name(op.name) == "bwd.attn") {
      EXPECT_DOUBLE_EQ(op.duration_us, 2 * k.attn_us);
    }
    if (g->name(op.name) == "fwd.attn.tp") {
      EXPECT_EQ(op.coll, CollKind::AllReduce);
      EXPECT_EQ(op.bytes, 65536u);
      EXPECT_EQ(op.comm, g->comms().commOf("tp", 0));
    }
  }
  // 4 micro-batches x 2 layers per stage; TP all-reduce after attention and MLP.
  EXPECT_EQ(countNamed(*g, 0, "fwd.attn"), 8u);
  EXPECT_EQ(countNamed(*g, 0, "fwd.mlp.tp"), 8u);
  EXPECT_EQ(countNamed(*g, 0, "fwd.embed"), 4u);
  EXPECT_EQ(countNamed(*g, 0, "fwd.head"), 0u);
  EXPECT_EQ(countNamed(*g, 8, "fwd.head"), 4u);
  EXPECT_EQ(countNamed(*g, 0, "pp.send_act"), 4u);
  EXPECT_EQ(countNamed(*g, 8, "pp.recv_act"), 4u);
  EXPECT_EQ(countNamed(*g, 0, "optimizer"), 1u);
}

TEST(Workload, OpCostOverride) {
  auto g = buildGraph(smallDense(", op_costs_us: {fwd.attn: 7.5}"));
  std::vector<Op> ops;
  g->materialize(9, ops);
  int seen = 0;
  for (const Op& op : ops)
    if (g->name(op.name) == "fwd.attn") {
      EXPECT_EQ(op.duration_us, 7.5);
      ++seen;
    }
  EXPECT_EQ(seen, 8);
}

TEST(Workload, PeakMemoryFollows1F1BStage) {
  // Pipeline of 4 stages, 8 micro-batches: stage s holds 4 - s micro-batches in flight.
  const Config c = smallDense("", "{tp: 1, dp: 4, pp: 4}");
  const WorkloadCosts k = computeCosts(c);
  auto g = buildGraph(c);
  for (int s = 0; s < 4; ++s) {
    const auto sum = summarizeRank(*g, g->representative(s));
    std::uint64_t act = k.layers_per_stage * k.layer_activation_bytes;
    if (s == 0) act += k.embed_activation_bytes;
    if (s == 3) act += k.head_activation_bytes;
    EXPECT_EQ(sum.peak_memory - sum.static_memory, static_cast<std::uint64_t>(4 - s) * act) << s;
  }
  // GPipe keeps every micro-batch alive.
  Config gp = c;
  gp.workload.schedule = PipelineSchedule::GPipe;
  auto g2 = buildGraph(gp);
  const auto s1 = summarizeRank(*g2, g2->representative(1));
  EXPECT_EQ(s1.peak_memory - s1.static_memory, 4u * k.layers_per_stage * k.layer_activation_bytes);
}

TEST(Workload, DistributedOptimizerBuckets) {
  const Config c = smallDense();
  const WorkloadCosts k = computeCosts(c);
  auto g = buildGraph(c);
  std::vector<Op> ops;
  g->materialize(0, ops);
  std::uint64_t rs = 0, ag = 0;
  for (const Op& op : ops) {
    if (op.kind != OpKind::Collective || op.comm != g->comms().commOf("dp", 0)) continue;
    EXPECT_LE(op.bytes, 300000u);
    EXPECT_EQ(op.stream, 2);
    (op.coll == CollKind::ReduceScatter ? rs : ag) += op.bytes;
  }
  // Stage 0 gradients: 2 layers + embedding, bf16.
  const std::uint64_t grad = 2 * (2 * k.layer_params + k.embed_params);
  EXPECT_EQ(rs, grad);
  EXPECT_EQ(ag, grad);
}

// Brute force: members of rank r's comm of a layout family, by scanning all ranks.
std::vector<int> bruteMembers(const Layout& l, DimMask dims, int r) {
  std::vector<std::pair<int, int>> m;  // (sub-index, rank)
  for (int s = 0; s < l.world(); ++s) {
    bool same = true;
    for (int d = 0; d < kNumDims; ++d)
      if (!(dims & bit(Dim(d))) && l.coord(s, Dim(d)) != l.coord(r, Dim(d))) same = false;
    if (same) m.emplace_back(l.subIndex(s, dims), s);
  }
  std::sort(m.begin(), m.end());
  std::vector<int> out;
  for (auto& [i, s] : m) out.push_back(s);
  return out;
}

void expectSlicingEquivalence(const Config& c) {
  auto g = buildGraph(c);
  const auto& tg = static_cast<const TemplateGraph&>(*g);
  const Layout l(c.job.layout, c.job.world_size);
  const std::map<std::string, DimMask> dims{
      {"world", kAllDims}, {"tp", bit(kTp)}, {"cp", bit(kCp)}, {"ep", bit(kEp)},
      {"dp", bit(kEp) | bit(kEdp)}, {"edp", bit(kEdp)}, {"pp", bit(kPp)},
      {"dp-cp", bit(kCp) | bit(kEp) | bit(kEdp)}};
  std::vector<Op> ops;
  for (int r = 0; r < c.job.world_size; ++r) {
    g->materialize(r, ops);
    const auto tmpl = tg.classTemplate(l.coord(r, kPp));
    ASSERT_EQ(ops.size(), tmpl.size());
    std::map<std::pair<int, int>, std::uint32_t> sends, recvs;
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      const Op& t = tmpl[i];
      EXPECT_EQ(op.kind, t.kind);
      EXPECT_EQ(op.bytes, t.bytes);
      EXPECT_EQ(op.duration_us, t.duration_us);
      if (t.comm < 0) {
        EXPECT_EQ(op, t);
        continue;
      }
      const std::string& fam = tg.families()[static_cast<std::size_t>(t.comm)];
      const CommInfo info = g->comms().info(op.comm);
      ASSERT_EQ(info.family, fam);
      std::vector<int> members;
      for (int m = 0; m < info.size; ++m) members.push_back(g->comms().member(op.comm, m));
      ASSERT_EQ(members, bruteMembers(l, dims.at(fam), r)) << "rank " << r << " op " << i;
      if (op.kind == OpKind::Send || op.kind == OpKind::Recv) {
        // Pipeline peers: the same coordinates one stage up or down.
        ASSERT_EQ(fam, "pp");
        EXPECT_EQ(op.peer, r + t.peer * l.stride(kPp));
        auto& counter = op.kind == OpKind::Send ? sends : recvs;
        const std::uint32_t expected = counter[std::make_pair(op.comm, op.peer)]++;
        EXPECT_EQ(op.tag, expected);
      }
    }
  }
}

TEST(Workload, SlicingEquivalenceDense) { expectSlicingEquivalence(smallDense()); }
TEST(Workload, SlicingEquivalenceMoeWithCp) { expectSlicingEquivalence(smallMoe()); }

TEST(Workload, MoeUsesExpertFamilies) {
  auto g = buildGraph(smallMoe());
  EXPECT_EQ(countNamed(*g, 0, "fwd.moe.dispatch"), 3u * 2);
  std::vector<Op> ops;
  g->materialize(0, ops);
  std::set<std::string> fams;
  for (const Op& op : ops)
    if (op.comm >= 0) fams.insert(std::string(g->comms().info(op.comm).family));
  EXPECT_EQ(fams, (std::set<std::string>{"tp", "cp", "ep", "dp-cp", "edp", "pp"}));
}

}  // namespace
}  // namespace crystal::graph
