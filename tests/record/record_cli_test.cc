// `crystal record CONFIG -- CMD`: CMD is two NCCL-like processes (one rank per pipeline
// stage) reporting through the exported ncclProfiler_v5; the graph crystal record writes has
// the YAML graph's communication, op for op, on every rank.
#include <fmt/core.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "crystal/graph/graph.h"

namespace crystal::graph {
namespace {

using ::testing::HasSubstr;

struct Outcome {
  int rc;
  std::string out;
};

Outcome run(const std::string& cmd) {
  Outcome r{-1, ""};
  std::FILE* f = ::popen((cmd + " 2>&1").c_str(), "r");
  if (f == nullptr) return r;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, f) != nullptr) r.out += buf;
  const int status = ::pclose(f);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

bool isComm(const Op& op) {
  return op.kind == OpKind::Collective || op.kind == OpKind::Send || op.kind == OpKind::Recv ||
         op.kind == OpKind::GroupBegin || op.kind == OpKind::GroupEnd;
}

class RecordCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           fmt::format("crystal-record-cli-{}-{}", ::getpid(),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string record(const std::string& ranks_script) {
    return fmt::format("{} record {} --plugin {} --dir {} -o {} -- sh -c '{}'", CRYSTAL_EXE,
                       kConfig, CRYSTAL_PLUGIN_SO, (dir_ / "rec").string(),
                       (dir_ / "g.bin").string(), ranks_script);
  }
  std::string rank(int r) const {
    return fmt::format("CRYSTAL_RANK={} {} {} {}", r, FAKE_RANK_EXE, kConfig, r);
  }

  static constexpr const char* kConfig = CRYSTAL_SOURCE_DIR "/config/examples/dense-8gpu.yaml";
  std::filesystem::path dir_;
};

TEST_F(RecordCli, TwoStagesRecordTheWholeJobsCommunication) {
  const Outcome r = run(record(rank(0) + " && " + rank(4)));
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("graph of"));
  EXPECT_THAT(r.out, HasSubstr("world size 8, 2 classes"));
  const auto recorded = loadGraphFile((dir_ / "g.bin").string());
  const auto yaml = buildGraph(loadConfig(kConfig));
  std::vector<Op> a, b;
  for (std::int32_t rk = 0; rk < 8; ++rk) {
    yaml->materialize(rk, a);
    recorded->materialize(rk, b);
    std::erase_if(a, [](const Op& op) { return !isComm(op); });
    ASSERT_EQ(a.size(), b.size()) << "rank " << rk;
    for (std::size_t i = 0; i < a.size(); ++i) {
      Op x = a[i], y = b[i];
      x.name = y.name = 0;
      x.stream = y.stream = 0;  // record files number streams by first use
      EXPECT_EQ(x, y) << "rank " << rk << " op " << i << ": " << toString(x.kind) << " vs "
                      << toString(y.kind);
    }
  }
}

TEST_F(RecordCli, AMissingStageIsNamed) {
  const Outcome r = run(record(rank(1)));
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("missing stage 1 (e.g. rank 4)"));
}

TEST_F(RecordCli, AProgramThatNeverUsesNcclIsReported) {
  const Outcome r = run(record("true"));
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("no recording in"));
}

}  // namespace
}  // namespace crystal::graph
