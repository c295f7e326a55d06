// rank<R>.pyrun.json (graph/import/pyrun.h): reading it, bad files naming file and key, and
// the allocator's peak in the recorded graph; the bytes held before a Kineto window.
#include "graph/import/pyrun.h"

#include <fmt/core.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "crystal/base/error.h"
#include "graph/rank_summary.h"
#include "graph/validate.h"

namespace crystal::graph {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

json goodDoc() {
  return json::parse(R"({"format":"crystal-pyrun-1","rank":4,"world_size":64,"pid":4242,
    "steps":[{"gpu_ms":null,"host_ms":null},{"gpu_ms":12.5,"host_ms":13.25},
             {"gpu_ms":12.0,"host_ms":12.75}],
    "max_memory_allocated":123456789,"max_memory_reserved":200000000,
    "kineto_trace":"rank4.kineto.json","torch":"2.11.0+cu130","nccl":[2,28,9]})");
}

std::string errorOf(const json& doc) {
  try {
    (void)parsePyRun(doc.dump(), "run/rank4.pyrun.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

TEST(PyRun, ReadsEveryField) {
  const PyRun r = parsePyRun(goodDoc().dump(), "rank4.pyrun.json");
  EXPECT_EQ(r.source, "rank4.pyrun.json");
  EXPECT_EQ(r.rank, 4);
  EXPECT_EQ(r.world_size, 64);
  EXPECT_EQ(r.pid, 4242);
  ASSERT_EQ(r.steps.size(), 3U);
  EXPECT_FALSE(r.steps[0].gpu_ms.has_value());
  EXPECT_FALSE(r.steps[0].host_ms.has_value());
  EXPECT_DOUBLE_EQ(*r.steps[1].gpu_ms, 12.5);
  EXPECT_DOUBLE_EQ(*r.steps[2].host_ms, 12.75);
  EXPECT_EQ(r.max_memory_allocated, 123456789U);
  EXPECT_EQ(r.max_memory_reserved, 200000000U);
  EXPECT_EQ(r.kineto_trace, "rank4.kineto.json");
  EXPECT_EQ(r.torch, "2.11.0+cu130");
  EXPECT_EQ(r.nccl, (std::array<int, 3>{2, 28, 9}));
}

TEST(PyRun, NullTraceAndNcclAreAbsent) {
  json d = goodDoc();
  d["kineto_trace"] = nullptr;
  d["nccl"] = nullptr;
  const PyRun r = parsePyRun(d.dump(), "x");
  EXPECT_EQ(r.kineto_trace, "");
  EXPECT_FALSE(r.nccl.has_value());
}

TEST(PyRun, EveryMissingKeyIsNamed) {
  for (const char* key : {"format", "rank", "world_size", "pid", "steps", "max_memory_allocated",
                          "max_memory_reserved", "kineto_trace", "torch", "nccl"}) {
    json d = goodDoc();
    d.erase(key);
    EXPECT_EQ(errorOf(d), fmt::format("run/rank4.pyrun.json: '{}' is missing", key));
  }
  json d = goodDoc();
  d["steps"][1].erase("host_ms");
  EXPECT_EQ(errorOf(d), "run/rank4.pyrun.json: 'steps[1].host_ms' is missing");
}

TEST(PyRun, BadValuesNameFileAndKey) {
  auto with = [](const char* key, json v) {
    json d = goodDoc();
    d[key] = std::move(v);
    return errorOf(d);
  };
  EXPECT_THAT(with("format", "crystal-pyrun-2"), HasSubstr("'format' is \"crystal-pyrun-2\""));
  EXPECT_THAT(with("rank", 64), HasSubstr("'rank' 64 is out of range [0, 63]"));
  EXPECT_THAT(with("rank", -1), HasSubstr("'rank' -1 is out of range"));
  EXPECT_THAT(with("rank", "0"), HasSubstr("'rank' is \"0\", not an integer"));
  EXPECT_THAT(with("world_size", 0), HasSubstr("'world_size' 0 is out of range"));
  EXPECT_THAT(with("max_memory_allocated", -5), HasSubstr("'max_memory_allocated' -5"));
  EXPECT_THAT(with("max_memory_allocated", 18446744073709551615ULL),
              HasSubstr("'max_memory_allocated' 18446744073709551615 is out of range"));
  EXPECT_THAT(with("max_memory_reserved", 1), HasSubstr("is below max_memory_allocated"));
  EXPECT_THAT(with("steps", json::object()), HasSubstr("'steps' is not an array"));
  EXPECT_THAT(with("kineto_trace", "../etc/passwd"), HasSubstr("'kineto_trace' \"../etc/passwd\""));
  EXPECT_THAT(with("kineto_trace", 3), HasSubstr("'kineto_trace' is not a file name"));
  EXPECT_THAT(with("torch", 2.11), HasSubstr("'torch' is not a version string"));
  EXPECT_THAT(with("nccl", json::array({2, 28})), HasSubstr("'nccl' is not [major"));
  EXPECT_THAT(with("nccl", json::array({2, "x", 9})), HasSubstr("'nccl[1]'"));
  json d = goodDoc();
  d["steps"][2]["gpu_ms"] = -1.0;
  EXPECT_THAT(errorOf(d), HasSubstr("'steps[2].gpu_ms' is -1.0, not a time in ms"));
  d = goodDoc();
  d["steps"][0] = 7;
  EXPECT_THAT(errorOf(d), HasSubstr("'steps[0]' is not an object"));
  EXPECT_EQ(errorOf(json::array()), "run/rank4.pyrun.json: the file is not a JSON object");
}

TEST(PyRun, NotJsonAndMissingFile) {
  EXPECT_THROW(
      {
        try {
          (void)parsePyRun("{\"format\":", "a.pyrun.json");
        } catch (const InputError& e) {
          EXPECT_THAT(e.what(), HasSubstr("a.pyrun.json: not JSON"));
          throw;
        }
      },
      InputError);
  EXPECT_THROW((void)readPyRun("/nonexistent/rank0.pyrun.json"), InputError);
  // A number out of double's range (graph_pyrun_fuzz, 2026-12-05: it escaped as
  // nlohmann's out_of_range and terminated the process).
  try {
    (void)parsePyRun("{\"max_memory_allocated\":12391E578}", "a.pyrun.json");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), HasSubstr("a.pyrun.json: not JSON"));
  }
}

Op memOp(OpKind kind, std::uint64_t bytes) {
  Op op;
  op.kind = kind;
  op.bytes = bytes;
  return op;
}

std::uint64_t peakOf(const RecordedRank& r) {
  std::uint64_t mem = 0, peak = 0;
  for (const Op& op : r.ops) {
    if (op.kind == OpKind::Alloc) mem += op.bytes;
    if (op.kind == OpKind::Free) mem -= op.bytes;
    peak = std::max(peak, mem);
  }
  return peak;
}

RecordedRank smallRecording() {
  RecordedRank r;
  r.source = "rank4.kineto.json";
  r.rank = 4;
  Op mark;
  mark.kind = OpKind::IterationMark;
  r.ops = {memOp(OpKind::Alloc, 1000), mark, memOp(OpKind::Alloc, 300), memOp(OpKind::Free, 300)};
  r.where.assign(r.ops.size(), "traceEvents[0]");
  return r;
}

TEST(PyRunMemory, PeakOutsideTheWindowBecomesATransientAllocation) {
  RecordedRank r = smallRecording();
  PyRun run = parsePyRun(goodDoc().dump(), "rank4.pyrun.json");
  run.max_memory_allocated = 5000;
  applyPyRunMemory(r, run);
  ASSERT_EQ(r.ops.size(), 6U);
  ASSERT_EQ(r.where.size(), 6U);
  EXPECT_EQ(r.ops[2].kind, OpKind::Alloc);  // right after the IterationMark, at 1000 held
  EXPECT_EQ(r.ops[2].bytes, 4000U);
  EXPECT_EQ(r.ops[3].kind, OpKind::Free);
  EXPECT_EQ(r.where[2], "rank4.pyrun.json: max_memory_allocated");
  EXPECT_EQ(peakOf(r), 5000U);
  ASSERT_EQ(r.notes.size(), 1U);
  EXPECT_THAT(r.notes[0], HasSubstr("peaked at 5000 bytes"));
}

TEST(PyRunMemory, PeakInsideTheWindowChangesNothing) {
  RecordedRank r = smallRecording();
  PyRun run = parsePyRun(goodDoc().dump(), "rank4.pyrun.json");
  run.max_memory_allocated = 1300;
  applyPyRunMemory(r, run);
  EXPECT_EQ(r.ops.size(), 4U);
  EXPECT_TRUE(r.notes.empty());
}

TEST(PyRunMemory, DisagreementsNameBothFiles) {
  RecordedRank r = smallRecording();
  PyRun run = parsePyRun(goodDoc().dump(), "rank4.pyrun.json");
  run.max_memory_allocated = 1299;
  EXPECT_THAT(
      [&] {
        try {
          applyPyRunMemory(r, run);
        } catch (const InputError& e) {
          return std::string(e.what());
        }
        return std::string("no error");
      }(),
      HasSubstr("rank4.kineto.json: the recording's memory reaches 1300 bytes, above "
                "max_memory_allocated 1299 of rank4.pyrun.json"));
  run.max_memory_allocated = 5000;
  run.rank = 5;
  EXPECT_THROW(applyPyRunMemory(r, run), InputError);
}

// A Kineto window opening with 1 MB already allocated: the recording starts with that
// Alloc and then follows 'Total Allocated'.
TEST(KinetoMemory, BytesHeldBeforeTheWindowAreOneAlloc) {
  json events = json::array();
  events.push_back({{"ph", "X"},
                    {"cat", "user_annotation"},
                    {"name", "ProfilerStep#2"},
                    {"ts", 10.0},
                    {"dur", 100.0},
                    {"pid", 1},
                    {"tid", 1}});
  auto mem = [&](double ts, std::int64_t bytes, std::int64_t total) {
    events.push_back({{"ph", "i"},
                      {"name", "[memory]"},
                      {"ts", ts},
                      {"pid", 1},
                      {"tid", 1},
                      {"args",
                       {{"Device Type", 1},
                        {"Device Id", 0},
                        {"Bytes", bytes},
                        {"Total Allocated", total},
                        {"Total Reserved", total}}}});
  };
  mem(30.0, -512, 1048576 + 2048 - 512);  // file order is not time order
  mem(20.0, 2048, 1048576 + 2048);
  mem(40.0, 4096, 1048576 + 1536 + 4096);
  const json doc = {{"distributedInfo", {{"rank", 0}}}, {"traceEvents", events}};
  const RecordedRank r = parseKinetoTrace(doc.dump(), "t.json");
  ASSERT_FALSE(r.ops.empty());
  EXPECT_EQ(r.ops[0].kind, OpKind::Alloc);
  EXPECT_EQ(r.ops[0].bytes, 1048576U);
  EXPECT_EQ(r.where[0], "traceEvents[2]");
  EXPECT_EQ(peakOf(r), 1048576U + 1536 + 4096);

  json bad = doc;
  bad["traceEvents"][2]["args"]["Total Allocated"] = 100;  // less than its own 2048 bytes
  EXPECT_THAT(
      [&] {
        try {
          (void)parseKinetoTrace(bad.dump(), "t.json");
        } catch (const InputError& e) {
          return std::string(e.what());
        }
        return std::string("no error");
      }(),
      HasSubstr("t.json: traceEvents[2]: 'Total Allocated' 100 is below"));
}

// The shipped dense-8gpu traces plus pyrun files: every rank of the sliced graph peaks at
// its stage's max_memory_allocated.
TEST(PyRunMemory, SlicedGraphPeaksAtTheAllocatorsPeak) {
  const Config cfg = loadConfig(CRYSTAL_SOURCE_DIR "/config/examples/dense-8gpu.yaml");
  std::vector<RecordedRank> recs;
  const std::uint64_t peaks[] = {20'000'000'000ULL, 30'000'000'000ULL};
  for (int stage = 0; stage < 2; ++stage) {
    const int rank = stage * 4;
    recs.push_back(readKinetoTrace(
        fmt::format(CRYSTAL_SOURCE_DIR "/tests/record/data/dense-8gpu.rank{}.kineto.json", rank)));
    json d = goodDoc();
    d["rank"] = rank;
    d["world_size"] = 8;
    d["max_memory_allocated"] = peaks[stage];
    d["max_memory_reserved"] = peaks[stage];
    applyPyRunMemory(recs.back(), parsePyRun(d.dump(), "p.json"));
  }
  const auto g = sliceRecordings(cfg, recs);
  EXPECT_NO_THROW((void)validateGraph(*g));
  for (std::int32_t rank = 0; rank < 8; ++rank)
    EXPECT_EQ(summarizeRank(*g, rank).peak_memory, peaks[rank / 4]) << "rank " << rank;
}

}  // namespace
}  // namespace crystal::graph
