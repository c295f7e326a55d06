// The symmetric validator agrees with the naive one, and both catch planted mismatches.
#include <chrono>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "crystal/base/error.h"
#include "graph/template_graph.h"
#include "graph/validate.h"
#include "test_configs.h"

namespace crystal::graph {
namespace {

using ::testing::HasSubstr;

std::string errorOf(const Graph& g, bool naive) {
  try {
    naive ? (void)validateNaive(g) : (void)validateGraph(g);
  } catch (const InputError& e) {
    return e.what();
  }
  return "valid";
}

// A copy of `g`'s templates, edited by `edit`, as a new graph.
template <class F>
std::unique_ptr<TemplateGraph> planted(const Graph& g, F edit) {
  const auto& tg = static_cast<const TemplateGraph&>(g);
  Templates t = tg.templates();
  edit(t);
  return std::make_unique<TemplateGraph>(tg.config(), std::move(t));
}

std::size_t findOp(const Templates& t, int cls, OpKind kind, const std::string& family) {
  const auto& ops = t.classes[static_cast<std::size_t>(cls)];
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (ops[i].kind == kind && ops[i].comm >= 0 &&
        t.families[static_cast<std::size_t>(ops[i].comm)] == family)
      return i;
  ADD_FAILURE() << "no such op";
  return 0;
}

TEST(Validate, SymmetricAndNaiveAgreeOnValidGraphs) {
  for (const Config& c : {testing::smallDense(), testing::smallMoe(),
                          testing::smallDense("", "{tp: 1, dp: 4, pp: 4}")}) {
    auto g = buildGraph(c);
    const auto a = validateGraph(*g);
    const auto b = validateNaive(*g);
    EXPECT_EQ(a.method, "symmetric");
    EXPECT_EQ(b.method, "naive");
    EXPECT_EQ(a.world, b.world);
    EXPECT_EQ(a.comms, b.comms);
    EXPECT_EQ(a.total_ops, b.total_ops);
    EXPECT_EQ(b.ops_examined, b.total_ops);
    EXPECT_LT(a.ops_examined, b.ops_examined);
  }
}

TEST(Validate, CatchesSendBytesMismatch) {
  auto g = buildGraph(testing::smallDense());
  auto bad = planted(*g, [](Templates& t) { t.classes[0][findOp(t, 0, OpKind::Send, "pp")].bytes += 2; });
  for (bool naive : {false, true}) {
    const std::string e = errorOf(*bad, naive);
    EXPECT_THAT(e, HasSubstr("'pp'")) << naive;
    EXPECT_THAT(e, HasSubstr("bytes")) << naive;
    EXPECT_THAT(e, HasSubstr("validate: rank ")) << naive;
  }
}

TEST(Validate, CatchesMissingRecv) {
  auto g = buildGraph(testing::smallDense());
  auto bad = planted(*g, [](Templates& t) {
    auto& ops = t.classes[1];
    ops.erase(ops.begin() + static_cast<std::ptrdiff_t>(findOp(t, 1, OpKind::Recv, "pp")));
  });
  for (bool naive : {false, true}) {
    const std::string e = errorOf(*bad, naive);
    EXPECT_THAT(e, HasSubstr("has no matching recv")) << naive << e;
  }
}

TEST(Validate, CatchesCollectiveOnOneStageOnly) {
  auto g = buildGraph(testing::smallDense());
  auto bad = planted(*g, [](Templates& t) {
    t.families.push_back("world");
    Op op;
    op.kind = OpKind::Collective;
    op.comm = static_cast<std::int32_t>(t.families.size() - 1);
    op.bytes = 8;
    t.classes[1].push_back(op);
  });
  for (bool naive : {false, true}) {
    const std::string e = errorOf(*bad, naive);
    EXPECT_THAT(e, HasSubstr("communicator 0 ('world')")) << naive << e;
    EXPECT_THAT(e, HasSubstr("all_reduce 8 bytes")) << naive << e;
  }
}

TEST(Validate, CatchesCollectiveSizeMismatchAcrossStages) {
  auto g = buildGraph(testing::smallDense());
  auto bad = planted(*g, [](Templates& t) {
    for (auto& ops : t.classes) {
      t.families.push_back("pp");
      Op op;
      op.kind = OpKind::Collective;
      op.coll = CollKind::AllGather;
      op.comm = static_cast<std::int32_t>(std::find(t.families.begin(), t.families.end(), "pp") -
                                          t.families.begin());
      op.bytes = &ops == &t.classes[0] ? 64 : 128;
      ops.push_back(op);
    }
  });
  for (bool naive : {false, true}) {
    const std::string e = errorOf(*bad, naive);
    EXPECT_THAT(e, HasSubstr("('pp') is all_gather")) << naive << e;
  }
}

TEST(Validate, CatchesCrossRankDeadlock) {
  // Both stages first wait for a receive whose send comes only at the very end: sends and
  // receives still pair up (same bytes, same counts), but no rank can make progress.
  auto g = buildGraph(testing::smallDense());
  auto bad = planted(*g, [](Templates& t) {
    for (int c = 0; c < 2; ++c) {
      auto& ops = t.classes[static_cast<std::size_t>(c)];
      const Op send = ops[findOp(t, c, OpKind::Send, "pp")];
      Op recv = send;
      recv.kind = OpKind::Recv;
      recv.peer = -send.peer;
      ops.insert(ops.begin(), recv);
      ops.push_back(send);
    }
  });
  for (bool naive : {false, true}) {
    const std::string e = errorOf(*bad, naive);
    EXPECT_THAT(e, HasSubstr("validate: deadlock: rank ")) << naive << e;
    EXPECT_THAT(e, HasSubstr("('pp')")) << naive << e;
  }
}

TEST(Validate, ProgressCheckRuns) {
  auto g = buildGraph(testing::smallDense());
  EXPECT_TRUE(validateGraph(*g).progress_checked);
  EXPECT_TRUE(validateNaive(*g).progress_checked);
  // Explicit comms used by a template break the symmetry the by-class replay relies on.
  EXPECT_TRUE(validateGraph(*buildGraph(testing::smallMoe())).progress_checked);
}

TEST(Validate, CatchesDependencyCycle) {
  auto g = buildGraph(testing::smallDense());
  auto bad = planted(*g, [](Templates& t) {
    Op rec, wait;
    rec.kind = OpKind::Record, wait.kind = OpKind::Wait;
    rec.tag = wait.tag = 100000;
    rec.stream = wait.stream = 0;
    t.classes[0].push_back(wait);  // waits on an event its own stream records later
    t.classes[0].push_back(rec);
  });
  for (bool naive : {false, true})
    EXPECT_THAT(errorOf(*bad, naive), HasSubstr("dependency cycle")) << naive;
}

TEST(Validate, CatchesMalformedStreams) {
  auto g = buildGraph(testing::smallDense());
  auto withOps = [&](std::vector<Op> extra) {
    return planted(*g, [&](Templates& t) {
      t.classes[0].insert(t.classes[0].end(), extra.begin(), extra.end());
    });
  };
  Op free_op, begin, end, wait, rec;
  free_op.kind = OpKind::Free;
  free_op.bytes = 1ULL << 50;
  begin.kind = OpKind::GroupBegin;
  end.kind = OpKind::GroupEnd;
  wait.kind = OpKind::Wait;
  wait.tag = 777777;
  rec.kind = OpKind::Record;
  rec.tag = 777777;
  rec.stream = 1;
  EXPECT_THAT(errorOf(*withOps({free_op}), false), HasSubstr("frees more memory than is allocated"));
  EXPECT_THAT(errorOf(*withOps({begin, begin}), false), HasSubstr("nested group"));
  EXPECT_THAT(errorOf(*withOps({end}), false), HasSubstr("group end without a group begin"));
  EXPECT_THAT(errorOf(*withOps({begin}), false), HasSubstr("group never ends"));
  EXPECT_THAT(errorOf(*withOps({wait}), false), HasSubstr("event 777777, which is never recorded"));
  EXPECT_THAT(errorOf(*withOps({rec, rec}), false), HasSubstr("event 777777 recorded twice"));
  // One event may be waited for by several streams.
  Op wait2 = wait;
  wait2.stream = 2;
  EXPECT_EQ(errorOf(*withOps({rec, wait, wait2}), false), "valid");
}

// A per-rank graph: the template graph with one rank's stream altered (no symmetry left).
class OneRankChanged final : public Graph {
 public:
  OneRankChanged(std::unique_ptr<Graph> base, int rank) : base_(std::move(base)), rank_(rank) {}
  const Config& config() const override { return base_->config(); }
  std::int32_t worldSize() const override { return base_->worldSize(); }
  const CommTable& comms() const override { return base_->comms(); }
  std::int32_t numClasses() const override { return worldSize(); }
  std::int32_t classOf(std::int32_t r) const override { return r; }
  std::int32_t representative(std::int32_t c) const override { return c; }
  std::int64_t classSize(std::int32_t) const override { return 1; }
  void materialize(std::int32_t r, std::vector<Op>& out) const override {
    base_->materialize(r, out);
    if (r != rank_) return;
    for (Op& op : out)
      if (op.kind == OpKind::Collective && comms().info(op.comm).family == "dp") {
        op.bytes += 2;
        return;
      }
  }
  std::size_t opCount(std::int32_t r) const override { return base_->opCount(r); }
  std::uint64_t totalOps() const override { return base_->totalOps(); }
  std::string_view name(std::uint32_t n) const override { return base_->name(n); }

 private:
  std::unique_ptr<Graph> base_;
  int rank_;
};

TEST(Validate, NaiveCatchesSingleRankDifference) {
  OneRankChanged g(buildGraph(testing::smallDense()), 5);
  const std::string e = errorOf(g, true);
  EXPECT_EQ(errorOf(g, false), e);  // no templates: validateGraph falls back to naive
  EXPECT_THAT(e, HasSubstr("rank 5"));
  EXPECT_THAT(e, HasSubstr("('dp')"));
}

TEST(Validate, ExamplesAreValid) {
  for (const char* f : {"dense-8gpu.yaml", "moe-mixtral-1024.yaml", "moe-deepseek-cp-2048.yaml"}) {
    auto g = buildGraph(loadConfig(std::string(CRYSTAL_SOURCE_DIR) + "/config/examples/" + f));
    EXPECT_NO_THROW((void)validateGraph(*g)) << f;
  }
}

TEST(Validate, Llama8192Example) {
  // The "must show": world 8192, every communicator, total op count, fast.
  const auto t0 = std::chrono::steady_clock::now();
  auto g = buildGraph(loadConfig(std::string(CRYSTAL_SOURCE_DIR) + "/config/examples/llama3-70b-8192.yaml"));
  const auto rep = validateGraph(*g);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(rep.world, 8192);
  EXPECT_EQ(rep.comms, 1 + 1024 + 64 + 1024);  // world, tp groups, dp groups, pp groups
  EXPECT_EQ(rep.classes, 8);
  std::uint64_t expected = 0;
  for (int c = 0; c < 8; ++c) expected += 1024 * g->opCount(g->representative(c));
  EXPECT_EQ(rep.total_ops, expected);
  EXPECT_EQ(rep.total_ops, 13746176u);
  EXPECT_LT(s, 5.0);  // issue target 20 s; measured ~0.02 s
}

}  // namespace
}  // namespace crystal::graph
