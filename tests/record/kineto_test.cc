// Kineto (PyTorch profiler) traces -> recordings -> graph; bad traces name file and event.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "crystal/base/error.h"
#include "crystal/graph/import.h"
#include "graph/validate.h"
#include "tests/graph/test_configs.h"
#include "tests/record/graph_compare.h"
#include "tests/record/kineto_writer.h"

namespace crystal::graph {
namespace {

using nlohmann::json;
using testing::Compare;
using testing::firstDifference;
using ::testing::HasSubstr;
using testing::KinetoWriteOptions;
using testing::writeKinetoTrace;

std::vector<RecordedRank> viaKineto(const Graph& g, KinetoWriteOptions opt = {}) {
  std::vector<RecordedRank> out;
  for (std::int32_t c = 0; c < g.numClasses(); ++c) {
    const std::int32_t rank = g.representative(c);
    const std::string trace = writeKinetoTrace(recordingOf(g, rank), opt);
    out.push_back(parseKinetoTrace(trace, fmt::format("rank{}.json", rank)));
  }
  return out;
}

TEST(Kineto, DenseExampleTracesBuildTheYamlGraph) {
  const Config cfg = loadConfig(CRYSTAL_SOURCE_DIR "/config/examples/dense-8gpu.yaml");
  const auto yaml = buildGraph(cfg);
  const auto imported = sliceRecordings(cfg, viaKineto(*yaml));
  EXPECT_EQ(firstDifference(*yaml, *imported, Compare::TraceVisible), "");
  EXPECT_NO_THROW((void)validateGraph(*imported));
}

TEST(Kineto, MembersAloneIdentifyCommunicators) {
  const Config cfg = graph::testing::smallMoe();
  const auto yaml = buildGraph(cfg);
  const auto imported =
      sliceRecordings(cfg, viaKineto(*yaml, {.members = true, .descriptions = false}));
  EXPECT_EQ(firstDifference(*yaml, *imported, Compare::TraceVisible), "");
}

TEST(Kineto, ShippedTraceOfTwoRanksValidates) {
  // tests/record/data/ holds traces written by this writer (scripts in docs/record.md);
  // reading them checks the importer against files, not only strings.
  const Config cfg = loadConfig(CRYSTAL_SOURCE_DIR "/config/examples/dense-8gpu.yaml");
  std::vector<RecordedRank> recs;
  for (const char* f : {"dense-8gpu.rank0.kineto.json", "dense-8gpu.rank4.kineto.json"})
    recs.push_back(readKinetoTrace(std::string(CRYSTAL_SOURCE_DIR "/tests/record/data/") + f));
  const auto imported = sliceRecordings(cfg, recs);
  EXPECT_NO_THROW((void)validateGraph(*imported));
  EXPECT_EQ(firstDifference(*buildGraph(cfg), *imported, Compare::TraceVisible), "");
}

TEST(Kineto, MissingStageIsNamed) {
  const Config cfg = loadConfig(CRYSTAL_SOURCE_DIR "/config/examples/dense-8gpu.yaml");
  auto recs = viaKineto(*buildGraph(cfg));
  recs.pop_back();
  try {
    (void)sliceRecordings(cfg, recs);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("missing stage 1 (e.g. rank 4)"));
  }
}

TEST(Kineto, ImportsGroupsWaitsMemoryAndIterations) {
  const Config cfg = loadConfig(CRYSTAL_SOURCE_DIR "/config/examples/dense-8gpu.yaml");
  const auto yaml = buildGraph(cfg);
  const RecordedRank r = parseKinetoTrace(writeKinetoTrace(recordingOf(*yaml, 4)), "r4.json");
  EXPECT_EQ(r.rank, 4);
  std::array<int, 11> kinds{};
  for (const Op& op : r.ops) ++kinds[static_cast<std::size_t>(op.kind)];
  EXPECT_GT(kinds[static_cast<int>(OpKind::GroupBegin)], 0);
  EXPECT_EQ(kinds[static_cast<int>(OpKind::GroupBegin)], kinds[static_cast<int>(OpKind::GroupEnd)]);
  EXPECT_GT(kinds[static_cast<int>(OpKind::Wait)], 0);
  EXPECT_GT(kinds[static_cast<int>(OpKind::Alloc)], 0);
  EXPECT_EQ(kinds[static_cast<int>(OpKind::IterationMark)], 1);
  EXPECT_EQ(r.where.size(), r.ops.size());
}

// A minimal valid trace that the bad-input cases below damage one field at a time.
json minimalTrace() {
  return json::parse(R"({"distributedInfo": {"rank": 1}, "traceEvents": [
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 1, "dur": 1, "args": {"correlation": 5}},
    {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 10, "dur": 3.5, "args": {"stream": 7, "correlation": 5}},
    {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce", "ts": 20, "dur": 2,
     "args": {"stream": 7, "Collective name": "allreduce", "dtype": "BFloat16", "In msg nelems": 8,
              "Out msg nelems": 8, "Group size": 2, "Process Group Name": "0",
              "Process Group Ranks": "[0, 1]"}}]})");
}

std::string errorOf(const json& doc) {
  try {
    (void)parseKinetoTrace(doc.dump(), "t.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(Kineto, MinimalTraceReads) {
  const RecordedRank r = parseKinetoTrace(minimalTrace().dump(), "t.json");
  ASSERT_EQ(r.ops.size(), 2u);
  EXPECT_EQ(r.ops[0].kind, OpKind::Compute);
  EXPECT_DOUBLE_EQ(r.ops[0].duration_us, 3.5);
  EXPECT_EQ(r.strings[r.ops[0].name], "gemm");
  EXPECT_EQ(r.ops[1].coll, CollKind::AllReduce);
  EXPECT_EQ(r.ops[1].bytes, 16u);
  ASSERT_EQ(r.comms.size(), 1u);
  EXPECT_EQ(r.comms[0].rank, 1);
  EXPECT_EQ(r.comms[0].ranks, (std::vector<std::int32_t>{0, 1}));
}

TEST(Kineto, BadTracesNameFileAndEvent) {
  EXPECT_THAT(errorOf(json::array()), HasSubstr("t.json: not a Kineto trace"));
  try {
    (void)parseKinetoTrace("{\"traceEvents\": [", "t.json");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("t.json: not JSON"));
  }
  try {
    (void)parseKinetoTrace("{\"traceEvents\": [{\"ts\": 1e999}]}", "t.json");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("t.json: not JSON")) << "a number out of range";
  }
  json d = minimalTrace();
  d.erase("distributedInfo");
  EXPECT_THAT(errorOf(d), HasSubstr("t.json: no 'distributedInfo.rank'"));
  d = minimalTrace();
  d["traceEvents"][1]["args"].erase("stream");
  EXPECT_THAT(errorOf(d), HasSubstr("t.json: traceEvents[1]: 'args.stream' missing"));
  d = minimalTrace();
  d["traceEvents"][2]["args"]["dtype"] = "ComplexFloat";
  EXPECT_THAT(errorOf(d), HasSubstr("traceEvents[2]: 'dtype' 'ComplexFloat'"));
  d = minimalTrace();
  d["traceEvents"][2]["args"]["Collective name"] = "gather";
  EXPECT_THAT(errorOf(d), HasSubstr("traceEvents[2]: 'Collective name' 'gather'"));
  d = minimalTrace();
  d["traceEvents"][2]["args"]["Process Group Ranks"] = "[0, 2]";
  EXPECT_THAT(errorOf(d), HasSubstr("traceEvents[2]: 'Process Group Ranks' does not hold"));
  d = minimalTrace();
  d["traceEvents"][2]["args"]["Process Group Ranks"] = "[0, x]";
  EXPECT_THAT(errorOf(d), HasSubstr("holds a non-rank"));
  d = minimalTrace();
  d["traceEvents"][2]["args"]["Group size"] = 3;
  EXPECT_THAT(errorOf(d), HasSubstr("lists 2 ranks, 'Group size' is 3"));
  d = minimalTrace();
  d["traceEvents"][1]["dur"] = "long";
  EXPECT_THAT(errorOf(d), HasSubstr("traceEvents[1]: 'dur' missing or not a number"));
  d = minimalTrace();
  d["traceEvents"].push_back(
      json::parse(R"({"ph": "X", "cat": "cuda_sync", "name": "Stream Wait Event",
      "ts": 30, "dur": 0, "args": {"stream": 7, "wait_on_stream": 9, "wait_on_cuda_event_record_corr_id": 77}})"));
  EXPECT_THAT(
      errorOf(d),
      HasSubstr("traceEvents[3]: Stream Wait Event on the cudaEventRecord with correlation 77"));
}

TEST(Kineto, WaitOnAnEventKinetoCouldNotAttributeIsANoteNotADependency) {
  // PyTorch 2.11 on the H200: every Stream Wait Event of ProcessGroupNCCL came with
  // wait_on_cuda_event_record_corr_id -1 and wait_on_stream -1.
  json d = minimalTrace();
  for (int k = 0; k < 2; ++k)
    d["traceEvents"].push_back(json::parse(R"({"ph": "X", "cat": "cuda_sync",
      "name": "Stream Wait Event", "ts": 30, "dur": 0, "args": {"stream": 7,
      "wait_on_stream": -1, "wait_on_cuda_event_record_corr_id": -1, "wait_on_cuda_event_id": 13}})"));
  const RecordedRank r = parseKinetoTrace(d.dump(), "t.json");
  const RecordedRank plain = parseKinetoTrace(minimalTrace().dump(), "t.json");
  EXPECT_EQ(r.ops.size(), plain.ops.size());  // no record/wait pair added
  ASSERT_FALSE(r.notes.empty());
  EXPECT_THAT(r.notes.back(), HasSubstr("2 Stream Wait Event(s) on an event Kineto could not "
                                        "attribute"));
  EXPECT_THAT(r.notes.back(), HasSubstr("first at traceEvents[3]"));
}

TEST(Kineto, ShortenedMemberListFallsBackToSize) {
  json d = minimalTrace();
  d["traceEvents"][2]["args"]["Process Group Ranks"] = "[0, ..., 1]";
  const RecordedRank r = parseKinetoTrace(d.dump(), "t.json");
  ASSERT_EQ(r.comms.size(), 1u);
  EXPECT_TRUE(r.comms[0].ranks.empty());
  EXPECT_EQ(r.comms[0].size, 2);
}

TEST(Kineto, BroadcastRootIsANote) {
  json d = minimalTrace();
  d["traceEvents"][2]["args"]["Collective name"] = "broadcast";
  const RecordedRank r = parseKinetoTrace(d.dump(), "t.json");
  ASSERT_EQ(r.notes.size(), 1u);
  EXPECT_THAT(r.notes[0], HasSubstr("does not record the root"));
}

}  // namespace
}  // namespace crystal::graph
