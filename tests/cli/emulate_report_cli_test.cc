// `crystal emulate` end to end on CPU with a fake rank (fake_pyrun_rank.cc) that leaves the
// files a PyTorch rank and the NCCL profiler would: report.json holds the exact steady-state
// numbers beside the prediction, the run exits with the program's status, and a corrupt
// input is a note naming the file.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace {

namespace fs = std::filesystem;

struct EmulateRun {
  int status = -1;
  std::string err;  // crystal's stderr (the report table)
  nlohmann::json report;
};

// `crystal emulate` of the fake rank; then, if `report_opts` is given, `crystal report` on
// the same run directory with those options (its report.json is the one returned), after
// `between(run_dir)` if given.
EmulateRun emulate(const std::string& env, const std::string& report_opts = "",
                   const std::function<void(const fs::path&)>& between = {}) {
  std::string t = (fs::temp_directory_path() / "crystal-emulate-report-XXXXXX").string();
  const fs::path dir = ::mkdtemp(t.data());
  const fs::path run_dir = dir / "run";
  const std::string cmd = env + " " + CRYSTAL_EXE + " emulate " + TEST_DIR +
                          "/emulate64.yaml --plugin " + INTERPOSER_LIB + " --run-dir " +
                          run_dir.string() + " -- " + FAKE_PYRUN_EXE + " 2>&1 >/dev/null";
  EmulateRun r;
  FILE* p = ::popen(cmd.c_str(), "r");
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), buf.size(), p) != nullptr) r.err += buf.data();
  const int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  if (!report_opts.empty()) {
    if (between) between(run_dir);
    const std::string again = std::string(CRYSTAL_EXE) + " report " + TEST_DIR +
                              "/emulate64.yaml " + run_dir.string() + " " + report_opts + " 2>&1";
    FILE* q = ::popen(again.c_str(), "r");
    while (std::fgets(buf.data(), buf.size(), q) != nullptr) r.err += buf.data();
    const int rst = ::pclose(q);
    r.status = WIFEXITED(rst) ? WEXITSTATUS(rst) : -1;
  }
  std::ifstream f(run_dir / "report.json");
  if (f) r.report = nlohmann::json::parse(f, nullptr, false);
  fs::remove_all(dir);
  return r;
}

TEST(EmulateReport, MeasuredBesideThePredictionAndTheProgramsExitStatus) {
  const EmulateRun r = emulate("FAKE_EXIT=3");
  EXPECT_EQ(r.status, 3) << r.err;
  ASSERT_TRUE(r.report.is_object()) << r.err;
  EXPECT_EQ(r.report["exit_code"], 3);
  const auto& rank = r.report["ranks"][0];
  EXPECT_EQ(rank["rank"], 0);
  EXPECT_EQ(rank["iterations_from"], "pyrun");
  EXPECT_EQ(rank["steps"], 7);
  // Warm-up 2 (default), step 2 profiled: steps 3..6 = 6, 5, 7, 3 ms.
  EXPECT_EQ(rank["steady_steps"], nlohmann::json({3, 4, 5, 6}));
  EXPECT_DOUBLE_EQ(rank["iteration_ms"]["mean"].get<double>(), 5.25);
  EXPECT_DOUBLE_EQ(rank["iteration_ms"]["p50"].get<double>(), 5.5);
  EXPECT_DOUBLE_EQ(rank["iteration_ms"]["min"].get<double>(), 3);
  EXPECT_DOUBLE_EQ(rank["iteration_ms"]["max"].get<double>(), 7);
  EXPECT_DOUBLE_EQ(rank["exposed_comm_ms"].get<double>(), 4);
  EXPECT_DOUBLE_EQ(rank["nccl_kernel_ms"].get<double>(), 10);
  EXPECT_EQ(rank["peak_memory_allocated"], 1073741824u);
  EXPECT_EQ(rank["peak_memory_reserved"], 2147483648u);
  EXPECT_EQ(rank["nccl_calls"], 8);
  ASSERT_TRUE(rank["predicted"].is_object()) << r.report.dump(1);
  EXPECT_GT(rank["predicted"]["iteration_ms"].get<double>(), 0);
  EXPECT_GT(rank["predicted"]["peak_memory"].get<double>(), 0);
  EXPECT_NE(r.err.find("crystal emulate: report"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("timeline.json"), std::string::npos) << r.err;
}

TEST(EmulateReport, ACorruptPyRunIsANoteAndTheStatusStaysThePrograms) {
  const EmulateRun r = emulate("FAKE_PYRUN=corrupt");
  EXPECT_EQ(r.status, 0) << r.err;
  ASSERT_TRUE(r.report.is_object()) << r.err;
  const auto& rank = r.report["ranks"][0];
  // Iterations then come from the NCCL calls: 4 units of 2 calls, 4 ms apart; 3 whole
  // iterations, the first 2 warm-up.
  EXPECT_EQ(rank["iterations_from"], "nccl-period");
  EXPECT_EQ(rank["steps"], 3);
  EXPECT_DOUBLE_EQ(rank["iteration_ms"]["mean"].get<double>(), 4);
  bool named = false;
  for (const auto& n : rank["notes"])
    named = named || n.get<std::string>().find("run/rank0.pyrun.json") != std::string::npos;
  EXPECT_TRUE(named) << rank["notes"].dump();
  EXPECT_EQ(rank["nccl_calls"], 8);
}

TEST(EmulateReport, CrystalReportRedoesItWithAnotherWarmup) {
  // Warm-up 4 (the profiled step 2, from the run's report.json, falls inside it): steps
  // 4..6 = 5, 7, 3 ms.
  EmulateRun r = emulate("FAKE_EXIT=3", "--warmup 4");
  EXPECT_EQ(r.status, 0) << r.err;
  ASSERT_TRUE(r.report.is_object()) << r.err;
  EXPECT_EQ(r.report["exit_code"], 3);  // the run's, kept from its report
  EXPECT_EQ(r.report["profiled_steps"], nlohmann::json({2}));
  EXPECT_DOUBLE_EQ(r.report["ranks"][0]["iteration_ms"]["mean"].get<double>(), 5);
}

// What the real ranks told the host made them unfaithful lives only in the run's report.json:
// `crystal report` keeps it there and under its table. A faithful run has none.
TEST(EmulateReport, CrystalReportKeepsWhatMadeTheRunUnfaithful) {
  const std::string note = "pid 7: P2P pacing of comm 0x2a rank 0 stopped after 3 operations";
  bool faithful_first = false;
  EmulateRun r = emulate("FAKE_EXIT=0", "--warmup 2", [&](const fs::path& run_dir) {
    std::ifstream in(run_dir / "report.json");
    auto j = nlohmann::json::parse(in, nullptr, false);
    faithful_first = j.is_object() && j["not_faithful"] == nlohmann::json::array();
    j["not_faithful"] = nlohmann::json::array({note});
    std::ofstream(run_dir / "report.json") << j.dump();
  });
  EXPECT_TRUE(faithful_first);
  EXPECT_EQ(r.status, 0) << r.err;
  ASSERT_TRUE(r.report.is_object()) << r.err;
  EXPECT_EQ(r.report["not_faithful"], nlohmann::json::array({note}));
  EXPECT_NE(r.err.find("crystal emulate: NOT FAITHFUL: " + note), std::string::npos) << r.err;
}

TEST(EmulateReport, CrystalReportCanCountTheProfiledStep) {
  // --profiled none: step 2 (4 ms) counts again; warm-up 2: 4, 6, 5, 7, 3.
  const EmulateRun r = emulate("", "--profiled none");
  ASSERT_TRUE(r.report.is_object()) << r.err;
  EXPECT_DOUBLE_EQ(r.report["ranks"][0]["iteration_ms"]["mean"].get<double>(), 5);
  EXPECT_EQ(r.report["ranks"][0]["steady_steps"].size(), 5u);
}

}  // namespace
