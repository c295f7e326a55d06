// `crystal report CONFIG RUN_DIR [--warmup N] [--profiled FIRST:COUNT]`: the end-of-run
// report of `crystal emulate` again, from what the real ranks left in RUN_DIR (pyrun files,
// Kineto traces, NCCL record files): after a run whose ranks were started by hand (SLURM), or
// with another warm-up. Rewrites RUN_DIR/report.json and timeline.json. docs/emulate.md.
#include <fmt/core.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>

#include "cli/command.h"
#include "cli/emulate_report.h"
#include "cli/options.h"
#include "crystal/base/error.h"
#include "crystal/config/config.h"

namespace crystal::cli {
namespace {

constexpr std::string_view kUsage =
    "usage: crystal report CONFIG RUN_DIR [--warmup N] [--profiled FIRST:COUNT]\n"
    "  The report of `crystal emulate` from the files the real ranks (emulation.real_ranks of\n"
    "  CONFIG) left in RUN_DIR; prints the table, rewrites RUN_DIR/report.json and\n"
    "  RUN_DIR/timeline.json.\n"
    "  --warmup N              steps left out of the steady state (default 2)\n"
    "  --profiled FIRST:COUNT  steps under torch.profiler, also left out (default: what\n"
    "                          RUN_DIR/report.json of the run says, else none; or none)\n";

// What an earlier report of the same run recorded: the program's exit status, what the real
// ranks said made them unfaithful (only the host heard it) and, unless --profiled says
// otherwise, the profiled steps.
void fromEarlierReport(const std::filesystem::path& file, bool profiled_given,
                       report::StepPlan& plan, report::RunInfo& run) {
  std::ifstream f(file);
  if (!f) return;
  const auto j = nlohmann::json::parse(f, nullptr, false);
  if (!j.is_object()) return;
  if (j.contains("exit_code") && j["exit_code"].is_number_integer())
    run.exit_code = j["exit_code"].get<int>();
  if (j.contains("not_faithful") && j["not_faithful"].is_array())
    for (const auto& n : j["not_faithful"])
      if (n.is_string()) run.host_notes.push_back(n.get<std::string>());
  if (profiled_given || !j.contains("profiled_steps") || !j["profiled_steps"].is_array()) return;
  const auto& steps = j["profiled_steps"];
  if (steps.empty() || !steps.front().is_number_integer()) return;
  plan.profiled_first = steps.front().get<int>();
  plan.profiled_count = static_cast<int>(steps.size());
}

int runReport(std::span<const std::string> args) {
  report::StepPlan plan{2, 2, 0};
  std::string profiled;
  const ParsedOptions parsed = OptionParser("report", std::string(kUsage))
                                   .value("--warmup",
                                          [&](const std::string& v) {
                                            plan.warmup =
                                                intInRange("report", "--warmup", v, 0, 1000000);
                                          })
                                   .value("--profiled", [&](const std::string& v) { profiled = v; })
                                   .maxPositional(2)
                                   .parse(args);
  if (parsed.help) {
    fmt::print("{}", kUsage);
    return 0;
  }
  if (parsed.positional.size() != 2)
    throw InputError("report: CONFIG and RUN_DIR are required\n" + std::string(kUsage));
  const std::string& config_path = parsed.positional[0];
  const std::filesystem::path run_dir = parsed.positional[1];
  std::error_code ec;
  if (!std::filesystem::is_directory(run_dir, ec))
    throw InputError(fmt::format("report: RUN_DIR '{}' is not a directory", run_dir.string()));
  const Config config = loadConfig(config_path);
  report::RunInfo run;
  fromEarlierReport(run_dir / "report.json", !profiled.empty(), plan, run);
  if (!profiled.empty() && profiled != "none") {
    const auto colon = profiled.find(':');
    if (colon == std::string::npos)
      throw InputError(fmt::format("report: --profiled '{}' is not FIRST:COUNT", profiled));
    plan.profiled_first =
        intInRange("report", "--profiled FIRST", profiled.substr(0, colon), 0, 1000000);
    plan.profiled_count =
        intInRange("report", "--profiled COUNT", profiled.substr(colon + 1), 0, 1000000);
  }
  run.config_path = config_path;
  run.run_dir = run_dir.string();
  run.record_dir = run_dir.string();  // record files are matched to ranks by their header
  run.real_ranks = config.emulation.real_ranks;
  run.plan = plan;
  fmt::print("{}", report::writeReport(config, run));
  return 0;
}

}  // namespace

CRYSTAL_COMMAND("report", "the end-of-run report of an emulation again, from its run directory",
                runReport);

}  // namespace crystal::cli
