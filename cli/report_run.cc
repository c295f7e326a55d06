// collectInputs and writeReport (cli/emulate_report.h): finds each real rank's files in the
// run and record directories, then writes report.json and timeline.json.
#include <fmt/core.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "cli/emulate_report.h"
#include "crystal/base/error.h"

namespace crystal::cli::report {

namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InputError(fmt::format("{}: cannot read", path.string()));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void writeJsonFile(const fs::path& path, const nlohmann::json& j) {
  std::ofstream f(path);
  f << j.dump() << '\n';
  if (!f) throw InputError(fmt::format("{}: cannot write", path.string()));
}

}  // namespace

std::vector<RankInputs> collectInputs(const RunInfo& run) {
  std::vector<RankInputs> out;
  std::map<int, std::size_t> slot;
  for (const int r : run.real_ranks) {
    slot[r] = out.size();
    RankInputs in;
    in.rank = r;
    out.push_back(std::move(in));
  }
  std::map<std::int64_t, int> rank_of_pid;
  for (const auto& [pid, rank] : run.processes)
    if (rank >= 0) rank_of_pid[pid] = rank;

  for (RankInputs& in : out) {
    const fs::path pyrun = fs::path(run.pyrun_dir.empty() ? run.run_dir : run.pyrun_dir) /
                           fmt::format("rank{}.pyrun.json", in.rank);
    std::error_code ec;
    if (!fs::exists(pyrun, ec)) {
      in.notes.push_back(
          fmt::format("{}: missing (not a Python program, or it did not exit "
                      "normally)",
                      pyrun.string()));
      continue;
    }
    try {
      in.pyrun = graph::parsePyRun(slurp(pyrun), pyrun.string());
      if (in.pyrun->rank != in.rank)
        throw InputError(
            fmt::format("{}: says rank {}, expected {}", pyrun.string(), in.pyrun->rank, in.rank));
    } catch (const std::exception& e) {
      in.pyrun.reset();
      in.notes.push_back(e.what());
      continue;
    }
    if (!in.pyrun->kineto_trace.empty()) {
      try {
        // The trace is named relative to the pyrun file's directory.
        const fs::path trace = pyrun.parent_path() / in.pyrun->kineto_trace;
        in.kineto = parseKinetoKernels(slurp(trace), trace.string());
      } catch (const std::exception& e) {
        in.notes.push_back(e.what());
      }
    }
  }

  if (run.record_dir.empty()) return out;
  std::error_code ec;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(run.record_dir, ec))
    if (e.path().filename().string().starts_with("crystal-record.") &&
        e.path().extension() == ".jsonl")
      files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    NcclRecordTimes rec;
    try {
      rec = parseNcclRecordTimes(slurp(f), f.string());
    } catch (const std::exception& e) {
      // Whose file it is shows only inside it: tell every rank.
      for (RankInputs& in : out) in.notes.push_back(e.what());
      continue;
    }
    // The process crystal started for the rank, else the rank the file says (a launcher's
    // children); files of other processes (no NCCL rank of ours) are not ours.
    int rank = rec.rank;
    if (const auto p = rank_of_pid.find(rec.pid); p != rank_of_pid.end()) rank = p->second;
    const auto s = slot.find(rank);
    if (s == slot.end()) continue;
    RankInputs& in = out[s->second];
    if (in.nccl) {
      in.notes.push_back(fmt::format("{} and {} both record rank {}; using the first",
                                     in.nccl->source, f.string(), rank));
      continue;
    }
    in.nccl = std::move(rec);
  }
  for (RankInputs& in : out)
    if (!in.nccl)
      in.notes.push_back(
          fmt::format("no NCCL record file of rank {} in {}", in.rank, run.record_dir));
  return out;
}

std::string writeReport(const Config& config, const RunInfo& run) {
  try {
    const std::vector<RankInputs> inputs = collectInputs(run);
    std::vector<RankReport> ranks;
    std::size_t max_steps = 0;
    for (const RankInputs& in : inputs) {
      ranks.push_back(analyzeRank(in, run.plan));
      max_steps = std::max(max_steps, ranks.back().steps);
    }
    // The timeline's replay covers the measured steps (a bounded number of them).
    const int iterations = static_cast<int>(std::min<std::size_t>(max_steps, 16));
    const Prediction prediction = predict(config, run.real_ranks, iterations, run.virtual_peers);
    const fs::path dir(run.run_dir);
    writeJsonFile(dir / "report.json",
                  reportJson(run.config_path, ranks, prediction, run.plan, run.exit_code,
                             run.host_notes));
    writeJsonFile(dir / "timeline.json", timelineJson(inputs, ranks, prediction, run.plan));
    std::string faithfulness;
    for (const std::string& n : run.host_notes)
      faithfulness += fmt::format("crystal emulate: NOT FAITHFUL: {}\n", n);
    return reportTable(ranks, prediction, run.plan) + faithfulness +
           fmt::format("crystal emulate: wrote {} and {} (open in ui.perfetto.dev)\n",
                       (dir / "report.json").string(), (dir / "timeline.json").string());
  } catch (const std::exception& e) {
    return fmt::format("crystal emulate: no report: {}\n", e.what());
  }
}

}  // namespace crystal::cli::report
