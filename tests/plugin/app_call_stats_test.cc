// The application thread's host-time record (plugin/app_call_stats.h): spans add to their
// field only when on, nest (the tuner inside NCCL's call inside the interposed call), and
// the line says per operation what was NCCL's own and what was ours.
#include "app_call_stats.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "state.h"
#include "tuner.h"

namespace crystal::plugin {
namespace {

void spin(std::chrono::microseconds d) {
  const auto end = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < end) {
  }
}

TEST(AppCallStats, OffSpansCountNothing) {
  setAppCallStatsForTesting(false);
  {
    const AppSpan s(&AppCallStats::call_ns, &AppCallStats::calls);
    spin(std::chrono::microseconds(50));
  }
  EXPECT_EQ(appCallStats().calls, 0);
  EXPECT_EQ(appCallStats().call_ns, 0);
}

// One interposed collective whose NCCL call asks the tuner: the tuner's own span lands in
// its field, inside NCCL's, inside the call's.
TEST(AppCallStats, SpansNestAsTheCallsDo) {
  Config cfg;
  cfg.source = "test";
  cfg.cluster.nodes = 8;
  PluginState::get().configure(cfg);
  void* ctx = nullptr;
  ASSERT_EQ(tuner::init(&ctx, 9, 64, 64, nullptr, nullptr, nullptr), nccl::ncclSuccess);
  setAppCallStatsForTesting(true);
  for (int i = 0; i < 3; ++i) {
    const AppSpan whole(&AppCallStats::call_ns, &AppCallStats::calls);
    ++appCallStats().ungrouped;
    spin(std::chrono::microseconds(100));  // the interposer's lookups
    const AppSpan nccl(&AppCallStats::call_nccl_ns);
    float table[7][3] = {};
    int ch = 0;
    ASSERT_EQ(tuner::getCollInfo(ctx, nccl::ncclFuncAllReduce, 1 << 20, 1,
                                 reinterpret_cast<float**>(table), 7, 3, 0, &ch),
              nccl::ncclSuccess);
    spin(std::chrono::microseconds(200));  // NCCL's own
  }
  const AppCallStats s = appCallStats();
  setAppCallStatsForTesting(false);
  EXPECT_EQ(s.calls, 3);
  EXPECT_EQ(s.ungrouped, 3);
  EXPECT_EQ(s.tuner_calls, 3);
  EXPECT_EQ(s.group_ends, 0);
  EXPECT_GE(s.call_nccl_ns, 3 * 200'000);
  EXPECT_GE(s.call_ns - s.call_nccl_ns, 3 * 100'000);
  EXPECT_GT(s.tuner_ns, 0);
  EXPECT_LT(s.tuner_ns, s.call_nccl_ns);
  EXPECT_LT(s.call_nccl_ns, s.call_ns);
  EXPECT_EQ(tuner::finalize(ctx), nccl::ncclSuccess);
}

TEST(AppCallStats, TheLineIsPerOperation) {
  AppCallStats s;
  EXPECT_EQ(describeAppCallStats(s), "");
  // An all-to-all of 4 grouped calls and one ungrouped all-reduce: 2 operations.
  s.calls = 5;
  s.ungrouped = 1;
  s.call_ns = 12'000;
  s.call_nccl_ns = 6'000;
  s.group_ends = 1;
  s.group_end_ns = 30'000;
  s.group_end_nccl_ns = 26'000;
  s.pacing_ns = 5'000;
  s.tuner_calls = 1;
  s.tuner_ns = 100;
  s.profiler_calls = 4;
  s.profiler_ns = 900;
  EXPECT_EQ(describeAppCallStats(s),
            "2 operations (5 calls, 4 of them grouped; 1 group ends): 21.00 us each on the "
            "host, of which NCCL 16.00 us (its own 15.50, the tuner 0.05 in 1 calls, the "
            "profiler 0.45 in 4 events), P2P pacing 2.50 us, the interposer's other work "
            "2.50 us");
}

// NCCL connects a comm's peers at their first use, inside that operation's call: one such
// call (tens of ms for an all-to-all) would outweigh thousands of operations, so an
// operation over 1 ms is counted apart, with nothing of it in the per-operation figures.
TEST(AppCallStats, SetUpOperationsAreLeftOut) {
  setAppCallStatsForTesting(true);
  auto operation = [](std::chrono::microseconds d, int grouped) {
    for (int i = 0; i < grouped; ++i) {  // grouped calls: no operation of their own
      const AppOperation op(false);
      const AppSpan s(&AppCallStats::call_ns, &AppCallStats::calls);
    }
    const AppOperation op(true);  // the outermost group end
    const AppSpan whole(&AppCallStats::group_end_ns, &AppCallStats::group_ends);
    const AppSpan nccl(&AppCallStats::group_end_nccl_ns);
    spin(d);
  };
  operation(std::chrono::microseconds(20), 4);
  operation(std::chrono::microseconds(1500), 4);  // connects its peers
  operation(std::chrono::microseconds(20), 4);
  const AppCallStats s = appCallStats();
  // A 20 us operation preempted past 1 ms (a loaded machine running ctest -j) is left out
  // too, whole: 2 counted and 1 left out as a rule, 1 and 2 at worst.
  EXPECT_GE(s.set_up_ops, 1);
  EXPECT_EQ(s.group_ends + s.set_up_ops, 3);
  EXPECT_EQ(s.calls, 4 * s.group_ends);
  EXPECT_GE(s.set_up_ns, 1'500'000);
  EXPECT_LT(s.group_end_ns, 1'500'000) << "the set-up's time is not in the figures";
  const std::string line = describeAppCallStats(s);
  const std::string counted = std::to_string(s.group_ends) + " operations (" +
                              std::to_string(s.calls) + " calls, " + std::to_string(s.calls) +
                              " of them grouped; " + std::to_string(s.group_ends) + " group ends)";
  EXPECT_NE(line.find(counted), std::string::npos) << line;
  EXPECT_NE(line.find("; " + std::to_string(s.set_up_ops) + " operations over 1 ms left out ("),
            std::string::npos)
      << line;
  setAppCallStatsForTesting(false);
}

// The line also names the three slowest operations with their split, so one outlier (the
// first call after the program waited for its stream) shows whose code it spent its time in.
// The record's fields are set by hand inside each operation: exact, whatever the machine's load.
TEST(AppCallStats, TheSlowestOperationsKeepTheirSplit) {
  setAppCallStatsForTesting(true);
  auto operation = [](std::int64_t us, std::int64_t nccl_us, std::int64_t pacing_us) {
    const AppOperation op(true);
    AppCallStats& s = appCallStats();
    ++s.calls;
    ++s.ungrouped;
    s.call_ns += us * 1000;
    s.call_nccl_ns += nccl_us * 1000;
    s.pacing_ns += pacing_us * 1000;
    s.tuner_ns += 100;
    ++s.tuner_calls;
  };
  operation(20, 15, 2);
  operation(300, 200, 90);   // #1
  operation(20, 15, 2);
  operation(2000, 2000, 0);  // connection set-up: left out, not counted
  operation(150, 140, 5);    // #3
  operation(20, 15, 2);
  operation(80, 70, 2);      // #5
  operation(60, 50, 2);
  const AppCallStats s = appCallStats();
  setAppCallStatsForTesting(false);
  EXPECT_EQ(s.ungrouped, 7);
  EXPECT_EQ(s.set_up_ops, 1);
  ASSERT_EQ(s.slowest[0].index, 1);
  EXPECT_EQ(s.slowest[0].ns, 300'000);
  EXPECT_EQ(s.slowest[0].pacing_ns, 90'000);
  EXPECT_EQ(s.slowest[1].index, 3);
  EXPECT_EQ(s.slowest[2].index, 5);
  EXPECT_EQ(s.slowest[2].nccl_ns, 70'000);
  const std::string line = describeAppCallStats(s);
  EXPECT_NE(line.find("; the slowest: #1 300.00 us (NCCL's own 199.90, the tuner 0.10, the "
                      "profiler 0.00, P2P pacing 90.00, the interposer's other work 10.00), "
                      "#3 150.00 us (NCCL's own 139.90, the tuner 0.10, the profiler 0.00, P2P "
                      "pacing 5.00, the interposer's other work 5.00), #5 80.00 us"),
            std::string::npos)
      << line;
}

TEST(AppCallStats, TheLogPrintsOnStderrAndStartsOver) {
  setAppCallStatsForTesting(true);
  {
    const AppSpan s(&AppCallStats::call_ns, &AppCallStats::calls);
    ++appCallStats().ungrouped;
  }
  testing::internal::CaptureStderr();
  logAppCallStats();
  const std::string out = testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find("crystal: host time on thread "), std::string::npos) << out;
  EXPECT_NE(out.find(": 1 operations (1 calls, 0 of them grouped; 0 group ends)"),
            std::string::npos)
      << out;
  EXPECT_EQ(appCallStats().calls, 0);
  testing::internal::CaptureStderr();
  logAppCallStats();  // nothing since: no line
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  // Another thread's calls are its own.
  std::thread([] { const AppSpan s(&AppCallStats::call_ns, &AppCallStats::calls); }).join();
  EXPECT_EQ(appCallStats().calls, 0);
  setAppCallStatsForTesting(false);
}

}  // namespace
}  // namespace crystal::plugin
