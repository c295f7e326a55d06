// The end-of-run report of `crystal emulate` (docs/emulate.md "Report"): per real rank,
// what was measured (iteration times in steady state, exposed communication, peak memory)
// beside what `crystal simulate` predicts for the same config, as a table (stderr),
// RUN_DIR/report.json and RUN_DIR/timeline.json (Chrome trace JSON for ui.perfetto.dev).
//
// Inputs, all optional, all per real rank:
//   rank<R>.pyrun.json          step times and allocator peaks (python/crystal_site,
//                               read by graph/import/pyrun.h)
//   crystal-record.<pid>.jsonl  every NCCL call, host enqueue times (plugin/profiler/)
//   the pyrun's Kineto trace    GPU kernels of the profiled step(s): exposed communication
// A missing or unreadable input is a note naming the file, never a failure of the run.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "crystal/config/config.h"
#include "graph/import/pyrun.h"

namespace crystal::cli::report {

// ---- inputs -------------------------------------------------------------------------

// One NCCL API call of a record file: host times, CLOCK_MONOTONIC ns.
struct NcclCall {
  std::string comm;  // communicator hash
  std::string func;  // AllReduce, Send, ...
  std::uint64_t count = 0;
  std::string dtype;
  bool p2p = false;
  std::int64_t t0_ns = 0;  // API call entered (enqueue starts)
  std::int64_t t1_ns = 0;  // API call returned
};

// A crystal-record.<pid>.jsonl file reduced to what the report needs.
struct NcclRecordTimes {
  std::string source;
  int rank = -1;  // header's rank, -1 if it has none
  std::int64_t pid = 0;
  std::vector<NcclCall> calls;  // in order of t0
};

struct KernelSpan {
  double start_us = 0;
  double end_us = 0;
  bool nccl = false;  // an NCCL kernel (name contains "nccl")
};

// GPU kernels of a PyTorch profiler (Kineto) trace.
struct KinetoKernels {
  std::string source;
  std::vector<KernelSpan> kernels;
  int profiler_steps = 0;  // ProfilerStep#N ranges in the trace
};

// Parsers: throw InputError naming `source` and the line / event. (rank<R>.pyrun.json is
// read by graph/import/pyrun.h.)
[[nodiscard]] NcclRecordTimes parseNcclRecordTimes(std::string_view text,
                                                   const std::string& source);
[[nodiscard]] KinetoKernels parseKinetoKernels(std::string_view json, const std::string& source);

// ---- statistics ---------------------------------------------------------------------

struct Summary {
  std::size_t n = 0;
  double mean = 0, p50 = 0, min = 0, max = 0;
};
// Mean, median (mean of the two middle values for an even count), min, max; nullopt if empty.
[[nodiscard]] std::optional<Summary> summarize(std::span<const double> values);

struct Interval {
  double begin = 0, end = 0;
};
// Time covered by `comm` and by no interval of `compute` (both may overlap themselves).
[[nodiscard]] double exposedTime(std::vector<Interval> comm, std::vector<Interval> compute);
// Time covered by the union of `spans`.
[[nodiscard]] double coveredTime(std::vector<Interval> spans);

// The repeating unit of a call sequence: the smallest period p (at most 4096 calls) such
// that a contiguous run of calls repeats with period p at least 3 times and covers at least
// half the calls (a prologue and an epilogue may differ). nullopt when there is none: then
// there are no iteration marks to report.
struct Period {
  std::size_t offset = 0;   // first call of the first repetition
  std::size_t length = 0;   // calls per repetition
  std::size_t repeats = 0;  // whole repetitions from offset
};
[[nodiscard]] std::optional<Period> findPeriod(std::span<const std::string> keys);

// ---- per rank -----------------------------------------------------------------------

struct RankInputs {
  int rank = -1;
  std::optional<graph::PyRun> pyrun;
  std::optional<NcclRecordTimes> nccl;
  std::optional<KinetoKernels> kineto;
  std::vector<std::string> notes;  // missing/corrupt inputs, each naming its file
};

struct StepPlan {
  int warmup = 2;          // first steps dropped
  int profiled_first = 2;  // steps [profiled_first, profiled_first + profiled_count) were
  int profiled_count = 0;  // under torch.profiler: slower, left out of the steady state
};

struct RankReport {
  int rank = -1;
  std::string iterations_from;            // "pyrun", "nccl-period" or "" (no iteration marks)
  std::size_t steps = 0;                  // all steps (or NCCL repetitions) seen
  std::vector<std::size_t> steady_steps;  // indices of the steps in `iteration_ms`
  std::optional<Summary> iteration_ms;    // steady state: wall time per step
  std::optional<Summary> gpu_ms;          // steady state: GPU time per step (pyrun)
  std::optional<double> exposed_comm_ms;  // per profiled step: NCCL kernels, no other kernel
  std::optional<double> nccl_kernel_ms;   // per profiled step: NCCL kernels in total
  std::optional<std::uint64_t> peak_allocated, peak_reserved;  // bytes, the real allocator
  std::size_t nccl_calls = 0;
  std::vector<std::string> notes;
};

[[nodiscard]] RankReport analyzeRank(const RankInputs& in, const StepPlan& plan);

// ---- prediction and outputs ----------------------------------------------------------

struct RankPrediction {
  int rank = -1;
  int rank_class = -1;
  double iteration_ms = 0;  // mean over the replayed iterations, as `crystal simulate`
  std::uint64_t peak_memory = 0;
};

struct Prediction {
  std::string error;  // why there is none ("" if ok)
  std::vector<RankPrediction> ranks;
  std::vector<int> virtual_peers;  // ranks whose predicted timeline is in timeline.json
  nlohmann::json trace;            // replay::chromeTrace of real ranks + virtual peers
};

// Replays `config` as `crystal simulate` does (numbers) and once more with `iterations`
// iterations (0: the config's) for the timeline of the real ranks and up to `peers` virtual
// ranks that share a communicator with them. Never throws: errors go to Prediction::error.
[[nodiscard]] Prediction predict(const Config& config, std::span<const int> real_ranks,
                                 int iterations, std::size_t peers);

[[nodiscard]] nlohmann::json reportJson(const std::string& config_path,
                                        std::span<const RankReport> ranks,
                                        const Prediction& prediction, const StepPlan& plan,
                                        int exit_code,
                                        std::span<const std::string> not_faithful = {});
[[nodiscard]] std::string reportTable(std::span<const RankReport> ranks,
                                      const Prediction& prediction, const StepPlan& plan);
// Measured processes: steps (durations end to end from 0), NCCL calls (host times from the
// first call), GPU kernels of the profiled step (placed at that step's start); then the
// replay's predicted processes (real ranks and virtual peers), from 0.
[[nodiscard]] nlohmann::json timelineJson(std::span<const RankInputs> inputs,
                                          std::span<const RankReport> ranks,
                                          const Prediction& prediction, const StepPlan& plan);

// ---- the whole report ----------------------------------------------------------------

struct RunInfo {
  std::string config_path;
  std::string run_dir;     // report.json and timeline.json go here
  std::string pyrun_dir;   // rank<R>.pyrun.json are read here ("" = run_dir)
  std::string record_dir;  // crystal-record.*.jsonl ("" = not recorded)
  std::vector<int> real_ranks;
  std::vector<std::pair<std::int64_t, int>> processes;  // pid, rank (-1: a launcher)
  StepPlan plan;
  std::size_t virtual_peers = 3;
  int exit_code = 0;
  // What the real processes told the host made their emulation unfaithful (control NOTE,
  // "pid P: text"): report.json's "not_faithful" and a line each under the table.
  std::vector<std::string> host_notes;
};

// Reads every input of the real ranks (missing/corrupt files become notes).
[[nodiscard]] std::vector<RankInputs> collectInputs(const RunInfo& run);

// Reads, analyses, predicts and writes report.json + timeline.json; returns the table.
// Never throws: a failure is a line of the returned text naming what failed.
[[nodiscard]] std::string writeReport(const Config& config, const RunInfo& run);

}  // namespace crystal::cli::report
