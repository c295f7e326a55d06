// `crystal graph {expand,inspect,validate}`: build, look at and check execution graphs.
#include <chrono>
#include <string>

#include <fmt/core.h>

#include "cli/command.h"
#include "cli/graph_import.h"
#include "crystal/base/error.h"
#include "crystal/graph/graph.h"
#include "graph/rank_summary.h"
#include "graph/validate.h"

namespace crystal::cli {
namespace {

constexpr std::string_view kUsage =
    "usage: crystal graph expand CONFIG -o FILE [--json]\n"
    "       crystal graph inspect CONFIG|FILE [--rank R]\n"
    "       crystal graph validate CONFIG|FILE [--naive]\n"
    "       crystal graph import {kineto,chakra,nccl} TRACE... --config CONFIG [-o FILE [--json]]\n"
    "       crystal graph export chakra CONFIG|FILE -o PREFIX [--ranks all|R,R,...]\n"
    "CONFIG is YAML (.yaml/.yml); FILE is a graph written by expand (binary, or JSON with "
    "--json).\n";

bool isYaml(std::string_view p) {
  return p.ends_with(".yaml") || p.ends_with(".yml");
}

std::unique_ptr<graph::Graph> open(const std::string& path) {
  if (isYaml(path)) return graph::buildGraph(loadConfig(path));
  return graph::loadGraphFile(path);
}

int parseRank(const std::string& s) {
  try {
    std::size_t used = 0;
    const int r = std::stoi(s, &used);
    if (used == s.size()) return r;
  } catch (const std::exception&) {
  }
  throw InputError(fmt::format("--rank: '{}' is not a rank number", s));
}

double seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int expand(std::span<const std::string> a) {
  std::string in, out;
  bool json = false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] == "-o" && i + 1 < a.size()) out = a[++i];
    else if (a[i] == "--json") json = true;
    else if (in.empty()) in = a[i];
    else throw InputError(fmt::format("graph expand: unexpected argument '{}'", a[i]));
  }
  if (in.empty() || out.empty()) throw InputError("graph expand: needs CONFIG and -o FILE");
  const auto t0 = std::chrono::steady_clock::now();
  auto g = open(in);
  if (json) graph::saveGraphJson(*g, out);
  else graph::saveGraphBinary(*g, out);
  fmt::print("wrote {} ({}): world size {}, {} classes, {} ops in total, {:.2f} s\n", out,
             json ? "json" : "binary", g->worldSize(), g->numClasses(), g->totalOps(), seconds(t0));
  return 0;
}

int inspect(std::span<const std::string> a) {
  std::string in;
  int rank = -1;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] == "--rank" && i + 1 < a.size()) rank = parseRank(a[++i]);
    else if (in.empty()) in = a[i];
    else throw InputError(fmt::format("graph inspect: unexpected argument '{}'", a[i]));
  }
  if (in.empty()) throw InputError("graph inspect: needs CONFIG or FILE");
  auto g = open(in);
  const auto& l = g->config().job.layout;
  fmt::print("graph {}: world size {}, layout tp{} cp{} ep{} dp{} pp{} ({}), {} classes, {} "
             "communicators, {} ops in total\n",
             in, g->worldSize(), l.tp, l.cp, l.ep, l.dp, l.pp, l.order, g->numClasses(),
             g->comms().count(), g->totalOps());
  for (std::int32_t c = 0; c < g->numClasses(); ++c)
    fmt::print("  class {}: {} ranks (representative {}), {} ops each\n", c, g->classSize(c),
               g->representative(c), g->opCount(g->representative(c)));
  if (rank < 0) return 0;
  if (rank >= g->worldSize())
    throw InputError(fmt::format("--rank {}: outside 0..{}", rank, g->worldSize() - 1));
  const graph::RankSummary s = graph::summarizeRank(*g, rank);
  fmt::print("rank {} (class {}): {} ops\n", rank, s.cls, s.ops);
  for (std::size_t k = 0; k < s.ops_by_kind.size(); ++k)
    if (s.ops_by_kind[k] != 0)
      fmt::print("  {:<12} {}\n", graph::toString(static_cast<graph::OpKind>(k)), s.ops_by_kind[k]);
  fmt::print("compute time {:.3f} ms; peak memory {:.2f} GiB (static {:.2f} GiB)\n",
             s.compute_us / 1e3, static_cast<double>(s.peak_memory) / (1 << 30),
             static_cast<double>(s.static_memory) / (1 << 30));
  fmt::print("bytes per communicator:\n  {:>6} {:<8} {:>6} {:>6} {:>14}\n", "comm", "family",
             "size", "ops", "bytes");
  for (const auto& [comm, t] : s.by_comm) {
    const graph::CommInfo info = g->comms().info(comm);
    fmt::print("  {:>6} {:<8} {:>6} {:>6} {:>14}\n", comm, info.family, info.size, t.ops, t.bytes);
  }
  return 0;
}

int validate(std::span<const std::string> a) {
  std::string in;
  bool naive = false;
  for (const auto& s : a) {
    if (s == "--naive") naive = true;
    else if (in.empty()) in = s;
    else throw InputError(fmt::format("graph validate: unexpected argument '{}'", s));
  }
  if (in.empty()) throw InputError("graph validate: needs CONFIG or FILE");
  const auto t0 = std::chrono::steady_clock::now();
  auto g = open(in);
  const double build_s = seconds(t0);
  const auto rep = naive ? graph::validateNaive(*g) : graph::validateGraph(*g);
  fmt::print("valid: {}\n  world size {}\n  communicators {}\n  classes {}\n  total ops {}\n"
             "  ops examined {} ({} check)\n  cross-rank deadlock check: {}\n"
             "  time: build {:.3f} s, validate {:.3f} s\n",
             in, rep.world, rep.comms, rep.classes, rep.total_ops, rep.ops_examined, rep.method,
             rep.progress_checked ? "passed" : "skipped (explicit comms or too many ops)",
             build_s, seconds(t0) - build_s);
  return 0;
}

int graphCommand(std::span<const std::string> args) {
  if (args.size() < 2 || args[1] == "--help" || args[1] == "-h") {
    fmt::print(args.size() < 2 ? stderr : stdout, "{}", kUsage);
    return args.size() < 2 ? kExitBadInput : 0;
  }
  const auto rest = args.subspan(2);
  if (args[1] == "expand") return expand(rest);
  if (args[1] == "inspect") return inspect(rest);
  if (args[1] == "validate") return validate(rest);
  if (args[1] == "import") return graphImport(rest);
  if (args[1] == "export") return graphExport(rest);
  throw InputError(fmt::format("graph: unknown subcommand '{}'\n{}", args[1], kUsage));
}

}  // namespace

CRYSTAL_COMMAND("graph", "expand, inspect or validate an execution graph", graphCommand);

}  // namespace crystal::cli
