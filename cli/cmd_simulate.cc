// `crystal simulate CONFIG`: replay the whole target with every rank virtual and print one
// iteration's time per rank class, the per-collective breakdown, and optionally a JSON
// summary and a Chrome-trace timeline. See docs/simulate.md.
#include <fmt/core.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/sweep_commands.h"
#include "crystal/base/error.h"
#include "crystal/config/config.h"
#include "crystal/graph/graph.h"
#include "crystal/replay/cost_model.h"
#include "crystal/replay/replay.h"
#include "crystal/replay/report.h"

namespace crystal::cli {
namespace {

constexpr std::string_view kUsage =
    "usage: crystal simulate CONFIG [--iterations N] [--trace OUT.json [--ranks R,R,...]]\n"
    "                               [--json SUMMARY.json] [--naive] [--top N]\n"
    "  Replays the target of CONFIG (YAML) with every rank virtual and prints the iteration\n"
    "  time per rank class and the collectives by total time.\n"
    "  --iterations N   iterations to replay (overrides job.iterations)\n"
    "  --trace FILE     Chrome-trace/Perfetto JSON of the ranks in --ranks (default 0)\n"
    "  --json FILE      machine-readable summary\n"
    "  --naive          simulate every rank instead of one per class (small worlds)\n"
    "  --top N          rows of the collective table (default 15, 0 = all)\n"
    "  --sweep ...      NCCL-tests' tables of the target instead (crystal simulate --sweep -h)\n";

int parseInt(std::string_view flag, const std::string& v, int lo) {
  std::size_t used = 0;
  int n = 0;
  try {
    n = std::stoi(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || n < lo)
    throw InputError(fmt::format("simulate: {} wants an integer >= {}, got '{}'", flag, lo, v));
  return n;
}

std::vector<std::int32_t> parseRanks(const std::string& v) {
  std::vector<std::int32_t> out;
  std::size_t pos = 0;
  while (pos <= v.size()) {
    const std::size_t comma = v.find(',', pos);
    const std::string item =
        v.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    out.push_back(parseInt("--ranks", item, 0));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

void writeJson(const std::string& path, const nlohmann::json& j) {
  std::ofstream f(path);
  if (!f) throw InputError(fmt::format("simulate: cannot write '{}'", path));
  f << j.dump() << '\n';
  if (!f) throw InputError(fmt::format("simulate: failed writing '{}'", path));
}

int simulate(std::span<const std::string> args) {
  for (const std::string& a : args)
    if (a == "--sweep") return simulateSweep(args);
  std::string config_path, trace_path, json_path;
  std::vector<std::int32_t> ranks;
  int iterations = 0;
  std::size_t top = 15;
  replay::ReplayMode mode = replay::ReplayMode::Symmetric;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string& {
      if (i + 1 >= args.size()) throw InputError(fmt::format("simulate: {} needs a value", a));
      return args[++i];
    };
    if (a == "--help" || a == "-h") {
      fmt::print("{}", kUsage);
      return 0;
    } else if (a == "--iterations") {
      iterations = parseInt(a, value(), 1);
    } else if (a == "--trace") {
      trace_path = value();
    } else if (a == "--ranks") {
      ranks = parseRanks(value());
    } else if (a == "--json") {
      json_path = value();
    } else if (a == "--naive") {
      mode = replay::ReplayMode::Naive;
    } else if (a == "--top") {
      top = static_cast<std::size_t>(parseInt(a, value(), 0));
    } else if (!a.empty() && a[0] == '-') {
      throw InputError(fmt::format("simulate: unknown option '{}'\n{}", a, kUsage));
    } else if (config_path.empty()) {
      config_path = a;
    } else {
      throw InputError(
          fmt::format("simulate: one CONFIG expected, got '{}' and '{}'", config_path, a));
    }
  }
  if (config_path.empty()) throw InputError(fmt::format("simulate: CONFIG missing\n{}", kUsage));
  if (!ranks.empty() && trace_path.empty())
    throw InputError("simulate: --ranks selects the ranks of --trace; give --trace FILE too");
  if (!trace_path.empty() && ranks.empty()) ranks = {0};

  const auto t0 = std::chrono::steady_clock::now();
  Config config = loadConfig(config_path);
  // The generator writes job.iterations iterations (IterationMark between them) into the
  // stream, so --iterations goes there; the engine replays that stream once.
  if (iterations > 0) config.job.iterations = iterations;
  const auto g = graph::buildGraph(config);
  const replay::NcclCostModel cost(config.cluster, config.model);

  replay::ReplayOptions opts;
  opts.mode = mode;
  opts.iterations = 1;
  opts.trace_ranks = ranks;
  // A progress line once the run has taken a few seconds (stderr keeps stdout clean).
  bool progress_shown = false;
  double last_shown = 0;
  opts.progress = [&](std::uint64_t done, std::uint64_t total) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s < 3.0 || s - last_shown < 1.0) return;
    progress_shown = true;
    last_shown = s;
    fmt::print(stderr, "\rcrystal: simulate: {:.0f} s, {:.1f}% of {} ops", s,
               total == 0 ? 100.0 : 100.0 * static_cast<double>(done) / static_cast<double>(total),
               total);
  };
  const replay::ReplayResult r = replay::runReplay(*g, cost, opts);
  if (progress_shown) fmt::print(stderr, "\n");

  const double total_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int its = r.units.empty() ? 0 : static_cast<int>(r.units.front().iterations.size());
  fmt::print("crystal simulate: {} ({} ranks, {} rank classes, {} iteration{}, {} mode)\n",
             config_path, g->worldSize(), g->numClasses(), its, its == 1 ? "" : "s",
             mode == replay::ReplayMode::Naive ? "naive" : "symmetric");
  fmt::print("\n{}", replay::summaryTable(*g, r));
  fmt::print("\n{}", replay::collectiveTable(r, top));
  fmt::print("\nreplay: {} events, {} model calls, {:.3f} s replay, {:.3f} s total\n", r.events,
             r.model_calls, r.wall_seconds, total_s);
  if (r.uncoupled_ops > 0)
    fmt::print("warning: {} communication ops had no matching op in their peer's class\n",
               r.uncoupled_ops);
  if (!json_path.empty()) writeJson(json_path, replay::summaryJson(*g, r));
  if (!trace_path.empty()) writeJson(trace_path, replay::chromeTrace(r));
  return 0;
}

}  // namespace

CRYSTAL_COMMAND("simulate", "replay the target with every rank virtual; time per rank class",
                simulate);

}  // namespace crystal::cli
