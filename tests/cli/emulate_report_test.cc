// cli/emulate_report.h: the end-of-run report from hand-written pyrun, record and Kineto
// files: exact steady-state numbers, exposed communication of a hand-built timeline,
// iterations found in an NCCL call sequence, and bad or missing files named in notes.
#include "cli/emulate_report.h"

#include <fmt/core.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include "crystal/base/error.h"
#include "crystal/config/config.h"

namespace crystal::cli::report {
namespace {

namespace fs = std::filesystem;

// Steps of 10, 20 ms then 4, 6, 5, 7, 3 ms: steady mean after 2 warm-up steps is 5.
constexpr const char* kPyRun = R"({"format":"crystal-pyrun-1","rank":0,"world_size":64,"pid":77,
  "steps":[{"gpu_ms":9,"host_ms":10},{"gpu_ms":19,"host_ms":20},{"gpu_ms":3.5,"host_ms":4},
           {"gpu_ms":5.5,"host_ms":6},{"gpu_ms":4.5,"host_ms":5},{"gpu_ms":6.5,"host_ms":7},
           {"gpu_ms":2.5,"host_ms":3}],
  "max_memory_allocated":1073741824,"max_memory_reserved":2147483648,
  "kineto_trace":null,"torch":"2.11.0","nccl":[2,28,9]})";

std::string errorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

// Three iterations of {AllReduce tp, AllReduce dp} after an init broadcast, as the plugin's
// profiler writes them (lines at each event's stop; a task line per call).
std::string recordFile() {
  std::string s =
      R"({"crystal_record":1,"rank":"0","pid":4242})"
      "\n"
      R"({"comm":"aa","name":"tp","nnodes":8,"nranks":8,"rank":0,"t":1})"
      "\n"
      R"({"ev":"coll_api","func":"Broadcast","count":4,"dtype":"ncclFloat32","root":0,"stream":"0x1","graph":false,"comm":"aa","id":1,"parent":-1,"t0":1000,"t1":1100})"
      "\n";
  long t = 10'000'000;  // 10 ms
  int id = 2;
  for (int it = 0; it < 4; ++it) {
    for (const char* comm : {"aa", "aa"}) {
      s += fmt::format(
          R"({{"ev":"coll_api","func":"AllReduce","count":{},"dtype":"ncclFloat32","root":-1,"stream":"0x1","graph":false,"comm":"{}","id":{},"parent":-1,"t0":{},"t1":{}}})"
          "\n",
          id % 2 == 0 ? 1024 : 2048, comm, id, t, t + 500);
      s += fmt::format(
          R"({{"ev":"coll","seq":{},"func":"AllReduce","count":1024,"dtype":"ncclFloat32","root":-1,"algo":"RING","proto":"SIMPLE","channels":2,"comm":"aa","id":{},"parent":{},"t0":{},"t1":{}}})"
          "\n",
          id, id + 100, id, t + 100, t + 400);
      ++id;
      t += 1'000'000;
    }
    t += 3'000'000 + it * 1'000'000;  // iterations of 5, 6, 7, 8 ms
  }
  return s;
}

TEST(ReportParse, NcclRecordTimes) {
  const NcclRecordTimes r = parseNcclRecordTimes(recordFile(), "crystal-record.4242.jsonl");
  EXPECT_EQ(r.rank, 0);
  EXPECT_EQ(r.pid, 4242);
  ASSERT_EQ(r.calls.size(), 9u);  // API calls only; tasks are the same calls
  EXPECT_EQ(r.calls[0].func, "Broadcast");
  EXPECT_EQ(r.calls[1].t0_ns, 10'000'000);
  EXPECT_EQ(r.calls[1].t1_ns, 10'000'500);
  EXPECT_EQ(r.calls[1].count, 1024u);
  EXPECT_EQ(r.calls[2].count, 2048u);
}

TEST(ReportParse, BadRecordFilesNameTheLine) {
  EXPECT_EQ(errorOf([] { (void)parseNcclRecordTimes("", "f.jsonl"); }),
            "f.jsonl: empty record file");
  EXPECT_EQ(errorOf([] { (void)parseNcclRecordTimes("{\"x\":1}\n", "f.jsonl"); }),
            "f.jsonl:1: not a crystal record file (no \"crystal_record\":1)");
  EXPECT_EQ(errorOf([] {
              (void)parseNcclRecordTimes(
                  "{\"crystal_record\":1,\"rank\":null}\n"
                  "{\"ev\":\"coll_api\",\"comm\":\"a\",\"func\":\"AllReduce\",\"dtype\":\"f\","
                  "\"count\":1,\"t0\":5,\"t1\":4}\n",
                  "f.jsonl");
            }),
            "f.jsonl:2: t1 before t0");
  EXPECT_EQ(errorOf([] {
              (void)parseNcclRecordTimes(
                  "{\"crystal_record\":1}\n"
                  "{\"ev\":\"coll_api\",\"comm\":\"a\",\"func\":\"AllReduce\",\"dtype\":\"f\","
                  "\"count\":1,\"t0\":-5,\"t1\":4}\n",
                  "f.jsonl");
            }),
            "f.jsonl:2: negative t0");
  EXPECT_EQ(errorOf([] {
              (void)parseNcclRecordTimes("{\"crystal_record\":1}\n{\"ev\":\"p2p_api\"}\n", "g");
            }),
            "g:2: 'comm' missing or not a string");
}

TEST(ReportParse, KinetoKernels) {
  const auto k = parseKinetoKernels(
      R"({"traceEvents":[
        {"ph":"X","cat":"user_annotation","name":"ProfilerStep#2","ts":0,"dur":100},
        {"ph":"X","cat":"kernel","name":"ampere_sgemm","ts":10,"dur":30},
        {"ph":"X","cat":"kernel","name":"ncclDevKernel_AllReduce_Sum_f32_RING_LL","ts":30,"dur":40},
        {"ph":"X","cat":"cpu_op","name":"aten::mm","ts":5,"dur":1}]})",
      "t.json");
  EXPECT_EQ(k.profiler_steps, 1);
  ASSERT_EQ(k.kernels.size(), 2u);
  EXPECT_FALSE(k.kernels[0].nccl);
  EXPECT_TRUE(k.kernels[1].nccl);
  EXPECT_DOUBLE_EQ(k.kernels[1].end_us, 70);
  EXPECT_EQ(errorOf([] { (void)parseKinetoKernels("[]", "t.json"); }),
            "t.json: no 'traceEvents' list (not a Chrome trace)");
  EXPECT_EQ(errorOf([] {
              (void)parseKinetoKernels(R"({"traceEvents":[{"cat":"kernel","name":"k"}]})", "t");
            }),
            "t: traceEvents[0]: 'ts' missing or not a non-negative number");
}

TEST(ReportStats, SummaryOfKnownValues) {
  const std::vector<double> v{4, 6, 5, 7, 3};
  const auto s = summarize(v);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->n, 5u);
  EXPECT_DOUBLE_EQ(s->mean, 5);
  EXPECT_DOUBLE_EQ(s->p50, 5);
  EXPECT_DOUBLE_EQ(s->min, 3);
  EXPECT_DOUBLE_EQ(s->max, 7);
  const std::vector<double> even{1, 4, 2, 3};
  EXPECT_DOUBLE_EQ(summarize(even)->p50, 2.5);
  EXPECT_FALSE(summarize({}));
}

TEST(ReportStats, ExposedTimeOfAHandBuiltTimeline) {
  // comm [0,10) [5,15) [20,30); compute [2,4) [8,22) [25,26): covered 2 + 7 + 2 + 1 = 12 of
  // the 25 comm units, so 13 are exposed.
  EXPECT_DOUBLE_EQ(exposedTime({{0, 10}, {5, 15}, {20, 30}}, {{2, 4}, {8, 22}, {25, 26}}), 13);
  EXPECT_DOUBLE_EQ(exposedTime({{0, 10}}, {}), 10);
  EXPECT_DOUBLE_EQ(exposedTime({{0, 10}}, {{-5, 50}}), 0);
  EXPECT_DOUBLE_EQ(coveredTime({{0, 10}, {5, 15}, {20, 30}}), 25);
}

TEST(ReportStats, PeriodOfACallSequence) {
  const std::vector<std::string> loop{"init", "a", "b", "c", "a", "b", "c", "a", "b", "c", "end"};
  const auto p = findPeriod(loop);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->length, 3u);
  EXPECT_EQ(p->repeats, 3u);
  EXPECT_EQ(p->offset, 1u);
  // Two repetitions are not a loop; neither is a sequence that never repeats.
  EXPECT_FALSE(findPeriod(std::vector<std::string>{"a", "b", "a", "b", "x"}));
  EXPECT_FALSE(findPeriod(std::vector<std::string>{"a", "b", "c", "d", "e", "f"}));
  // A loop over less than half of the calls is not the program's iteration.
  EXPECT_FALSE(
      findPeriod(std::vector<std::string>{"p", "q", "r", "s", "t", "u", "v", "x", "x", "x"}));
}

TEST(ReportAnalyze, SteadyStateFromPyRunLeavesOutWarmupAndProfiledSteps) {
  RankInputs in;
  in.rank = 0;
  in.pyrun = graph::parsePyRun(kPyRun, "rank0.pyrun.json");
  // 2 warm-up steps, no profiling: steps 2..6 = 4, 6, 5, 7, 3 ms.
  RankReport r = analyzeRank(in, StepPlan{2, 2, 0});
  ASSERT_TRUE(r.iteration_ms);
  EXPECT_EQ(r.iterations_from, "pyrun");
  EXPECT_EQ(r.steps, 7u);
  EXPECT_EQ(r.steady_steps, (std::vector<std::size_t>{2, 3, 4, 5, 6}));
  EXPECT_DOUBLE_EQ(r.iteration_ms->mean, 5);
  EXPECT_DOUBLE_EQ(r.gpu_ms->mean, 4.5);
  EXPECT_EQ(*r.peak_allocated, 1073741824u);
  EXPECT_EQ(*r.peak_reserved, 2147483648u);
  // Step 2 profiled: 6, 5, 7, 3 remain.
  r = analyzeRank(in, StepPlan{2, 2, 1});
  EXPECT_DOUBLE_EQ(r.iteration_ms->mean, 5.25);
  EXPECT_DOUBLE_EQ(r.iteration_ms->p50, 5.5);
  // All warm-up: no steady state, and a note that says why.
  r = analyzeRank(in, StepPlan{7, 7, 0});
  EXPECT_FALSE(r.iteration_ms);
  EXPECT_NE(r.notes.front().find("rank0.pyrun.json: 7 steps, none in steady state"),
            std::string::npos);
}

TEST(ReportAnalyze, ExposedCommFromTheProfiledStepsKernels) {
  RankInputs in;
  in.rank = 0;
  in.pyrun = graph::parsePyRun(kPyRun, "rank0.pyrun.json");
  KinetoKernels k;
  // Two profiled steps; NCCL [0,10ms) [20,30ms); compute [5,25ms): 5 + 5 ms exposed.
  k.profiler_steps = 2;
  k.kernels = {{0, 10'000, true}, {20'000, 30'000, true}, {5'000, 25'000, false}};
  in.kineto = k;
  const RankReport r = analyzeRank(in, StepPlan{2, 2, 2});
  ASSERT_TRUE(r.exposed_comm_ms);
  EXPECT_DOUBLE_EQ(*r.exposed_comm_ms, 5);  // per step
  EXPECT_DOUBLE_EQ(*r.nccl_kernel_ms, 10);  // per step
}

TEST(ReportAnalyze, ZeroLengthKernelsMeasureNothingAndSaySo) {
  // Seen on the H200: a Kineto window whose every GPU event had ts 0, dur 0 (the program
  // ran its own torch.profiler too). Not "0 ms exposed": not measured, with a note.
  RankInputs in;
  in.rank = 0;
  in.pyrun = graph::parsePyRun(kPyRun, "rank0.pyrun.json");
  KinetoKernels k;
  k.source = "rank0.kineto.json";
  k.kernels = {{0, 0, true}, {0, 0, false}, {0, 0, false}};
  in.kineto = k;
  const RankReport r = analyzeRank(in, StepPlan{2, 2, 2});
  EXPECT_FALSE(r.exposed_comm_ms);
  EXPECT_FALSE(r.nccl_kernel_ms);
  ASSERT_FALSE(r.notes.empty());
  EXPECT_NE(r.notes.back().find("all 3 GPU kernels of rank0.kineto.json have zero duration"),
            std::string::npos);
}

TEST(ReportAnalyze, IterationsFromTheNcclCallsOfAProgramWithoutMarks) {
  RankInputs in;
  in.rank = 0;
  in.nccl = parseNcclRecordTimes(recordFile(), "rec.jsonl");
  const RankReport r = analyzeRank(in, StepPlan{1, 1, 0});
  EXPECT_EQ(r.iterations_from, "nccl-period");
  // 4 repetitions of 2 calls: 3 whole iterations of 5, 6, 7 ms; the first is warm-up.
  EXPECT_EQ(r.steps, 3u);
  ASSERT_TRUE(r.iteration_ms);
  EXPECT_DOUBLE_EQ(r.iteration_ms->mean, 6.5);
  EXPECT_FALSE(r.exposed_comm_ms);  // host enqueue times say nothing about kernels
}

struct TempDir {
  fs::path path;
  TempDir() {
    std::string t = (fs::temp_directory_path() / "crystal-report-XXXXXX").string();
    path = ::mkdtemp(t.data());
  }
  ~TempDir() { fs::remove_all(path); }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name) << text;
  }
};

TEST(ReportRun, MissingAndCorruptFilesAreNotesNamingTheFile) {
  TempDir d;
  d.write("rank0.pyrun.json", "{not json");
  d.write("crystal-record.99.jsonl", "garbage\n");
  RunInfo run;
  run.run_dir = d.path.string();
  run.record_dir = d.path.string();
  run.real_ranks = {0, 32};
  const auto inputs = collectInputs(run);
  ASSERT_EQ(inputs.size(), 2u);
  auto has = [](const RankInputs& in, const std::string& text) {
    for (const auto& n : in.notes)
      if (n.find(text) != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(has(inputs[0], (d.path / "rank0.pyrun.json").string() + ": not JSON"));
  EXPECT_TRUE(has(inputs[1], (d.path / "rank32.pyrun.json").string() + ": missing"));
  EXPECT_TRUE(has(inputs[0], (d.path / "crystal-record.99.jsonl").string() + ":1: not JSON"));
  EXPECT_FALSE(inputs[0].pyrun);
}

TEST(ReportRun, WritesReportAndTimelineBesideThePrediction) {
  TempDir d;
  d.write("rank0.pyrun.json", kPyRun);
  d.write("crystal-record.4242.jsonl", recordFile());
  Config config = parseConfig(R"(
cluster: {nodes: 8, gpus_per_node: 8}
job: {world_size: 64, layout: {tp: 8, dp: 8}}
workload: {kind: dense, layers: 2, hidden: 1024, heads: 16, vocab: 8192, seq_len: 512,
           micro_batch: 4, dtype: fp32}
emulation: {real_ranks: [0]}
)",
                              "test.yaml");
  RunInfo run;
  run.config_path = "test.yaml";
  run.run_dir = d.path.string();
  run.record_dir = d.path.string();
  run.real_ranks = {0};
  run.processes = {{4242, 0}};
  run.plan = StepPlan{2, 2, 0};
  run.exit_code = 3;
  run.host_notes = {"pid 4242: P2P pacing of comm 0x2a rank 0 stopped after 7 operations"};
  const std::string table = writeReport(config, run);
  EXPECT_NE(table.find("wrote"), std::string::npos) << table;
  // What the real rank told the host made it unfaithful: under the table and in the JSON.
  EXPECT_NE(table.find("crystal emulate: NOT FAITHFUL: pid 4242: P2P pacing of comm 0x2a rank 0 "
                       "stopped after 7 operations\n"),
            std::string::npos)
      << table;
  std::ifstream f(d.path / "report.json");
  const auto j = nlohmann::json::parse(f);
  EXPECT_EQ(j["exit_code"], 3);
  EXPECT_EQ(j["not_faithful"],
            nlohmann::json::array(
                {"pid 4242: P2P pacing of comm 0x2a rank 0 stopped after 7 operations"}));
  const auto& r = j["ranks"][0];
  EXPECT_EQ(r["rank"], 0);
  EXPECT_DOUBLE_EQ(r["iteration_ms"]["mean"].get<double>(), 5);
  EXPECT_EQ(r["nccl_calls"], 9);
  EXPECT_EQ(r["peak_memory_allocated"], 1073741824u);
  ASSERT_TRUE(r["predicted"].is_object()) << j.dump(1);
  const double predicted = r["predicted"]["iteration_ms"].get<double>();
  EXPECT_GT(predicted, 0);
  EXPECT_NEAR(r["predicted"]["iteration_diff_pct"].get<double>(), 100 * (5 - predicted) / predicted,
              1e-9);
  std::ifstream t(d.path / "timeline.json");
  const auto tl = nlohmann::json::parse(t);
  std::set<std::string> processes;
  for (const auto& e : tl["traceEvents"])
    if (e["name"] == "process_name") processes.insert(e["args"]["name"].get<std::string>());
  EXPECT_TRUE(processes.contains("rank 0 (real, measured)"));
  EXPECT_TRUE(processes.contains("rank 0 (real, predicted)"));
  // Its tp and dp neighbours, virtual.
  EXPECT_TRUE(processes.contains("rank 1 (virtual, predicted)")) << tl.dump().substr(0, 400);
  EXPECT_TRUE(processes.contains("rank 8 (virtual, predicted)"));
}

}  // namespace
}  // namespace crystal::cli::report
