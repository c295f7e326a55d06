// Tables and JSON of a replay of the 4-rank all-reduce of replay_test (times known).
#include "crystal/replay/report.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_graphs.h"

namespace crystal::replay {
namespace {

using namespace testing;

struct Fixture {
  TinyGraph g{4};
  ReplayResult r;
  Fixture() {
    g.setClasses({0, 0, 1, 1}, 2);
    const auto c = g.addComm("world", {0, 1, 2, 3});
    for (int k = 0; k < 4; ++k)
      g.ops(k) = {simple(OpKind::Alloc, 0, 0, 3u << 30), compute(10.0 * (k + 1)),
                  coll(CollKind::AllReduce, c, 1000), compute(1)};
    FakeCost cost;
    ReplayOptions o;
    o.mode = ReplayMode::Naive;
    o.trace_ranks = {1, 3};
    r = runReplay(g, cost, o);
  }
};

TEST(Report, ClassSummaryTakesTheSlowestRank) {
  Fixture f;
  const auto s = summarizeClasses(f.g, f.r);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].ranks, 2);
  EXPECT_EQ(s[0].mean.time, 52'000);  // all end at 52 us; rank 0 stands for class 0
  EXPECT_EQ(s[0].rank, 0);
  EXPECT_EQ(s[1].mean.compute, 31'000);  // rank 2: 30 + 1 us
  EXPECT_EQ(s[1].peak_memory, 3ull << 30);
  const std::string table = summaryTable(f.g, f.r);
  EXPECT_NE(table.find("0.052"), std::string::npos) << table;
  EXPECT_NE(table.find("3.00 GiB"), std::string::npos) << table;
}

TEST(Report, CollectiveTableAndJson) {
  Fixture f;
  const std::string t = collectiveTable(f.r, 0);
  EXPECT_NE(t.find("AllReduce"), std::string::npos) << t;
  EXPECT_NE(t.find("Ring"), std::string::npos) << t;
  EXPECT_NE(t.find("1000 B"), std::string::npos) << t;
  const auto j = summaryJson(f.g, f.r);
  EXPECT_EQ(j["world"], 4);
  EXPECT_EQ(j["mode"], "naive");
  ASSERT_EQ(j["classes"].size(), 2u);
  EXPECT_DOUBLE_EQ(j["classes"][0]["iteration_us"].get<double>(), 52.0);
  EXPECT_DOUBLE_EQ(j["classes"][1]["exposed_comm_us"].get<double>(), 11.0);
  ASSERT_EQ(j["collectives"].size(), 1u);
  EXPECT_EQ(j["collectives"][0]["calls"], 4);
  EXPECT_DOUBLE_EQ(j["collectives"][0]["time_us"].get<double>(), 11.0);
}

TEST(Report, ChromeTraceHasComputeSlicesAndCommunicationPairs) {
  Fixture f;
  const auto t = chromeTrace(f.r);
  int x = 0, b = 0, e = 0, meta = 0;
  for (const auto& ev : t["traceEvents"]) {
    const std::string ph = ev["ph"];
    if (ph == "X") {
      ++x;
      if (ev["pid"] == 3 && ev["ts"].get<double>() == 0.0) {
        EXPECT_DOUBLE_EQ(ev["dur"].get<double>(), 40.0);
      }
    } else if (ph == "b") {
      ++b;
      EXPECT_EQ(ev["name"], "AllReduce");
      if (ev["pid"] == 1) {
        EXPECT_DOUBLE_EQ(ev["ts"].get<double>(), 20.0);               // posted
        EXPECT_DOUBLE_EQ(ev["args"]["wait_us"].get<double>(), 20.0);  // until rank 3 at 40
      }
    } else if (ph == "e") {
      ++e;
      EXPECT_DOUBLE_EQ(ev["ts"].get<double>(), 51.0);
    } else if (ph == "M") {
      ++meta;
    }
  }
  EXPECT_EQ(x, 4);  // two compute ops per traced rank
  EXPECT_EQ(b, 2);
  EXPECT_EQ(e, 2);
  EXPECT_EQ(meta, 4);  // process and thread names of two ranks
}

}  // namespace
}  // namespace crystal::replay
