// `crystal simulate CONFIG --sweep`: what NCCL-tests' *_perf binaries would print on the
// target, every rank virtual, from the NCCL model the emulation uses. docs/nccl-tests.md.
#include <fmt/core.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/sweep_commands.h"
#include "crystal/base/error.h"
#include "crystal/config/config.h"
#include "crystal/model/nccl_model.h"
#include "crystal/sweep/sweep.h"
#include "crystal/sweep/sweep_report.h"

namespace crystal::cli {
namespace {

constexpr std::string_view kUsage =
    "usage: crystal simulate CONFIG --sweep [--op OPS] [-b MIN] [-e MAX] [-f FACTOR | -i INC]\n"
    "                               [-d TYPE] [--ranks N] [--proto P] [--rank R] [-n ITERS]\n"
    "                               [--json FILE]\n"
    "  Prints NCCL-tests' table (size, count, type, redop, root, time, algbw, busbw) for each\n"
    "  op as the target would run it, with the algorithm/protocol/channels NCCL would pick.\n"
    "  --op OPS    comma list of allreduce,allgather,reducescatter,alltoall,sendrecv,broadcast,\n"
    "              reduce (default: all)\n"
    "  -b, -e      smallest / largest size, NCCL-tests syntax (8, 64K, 1M, 8G; default 8, 1G)\n"
    "  -f FACTOR   multiply the size by FACTOR each step (default 2); -i INC adds INC instead\n"
    "  -d TYPE     NCCL-tests data type (default float)\n"
    "  --ranks N   communicator size (default job.world_size); the first N GPUs of the cluster\n"
    "  --proto P   only protocol P (Simple, LL, LL128), as NCCL_PROTO=P; `crystal emulate`\n"
    "              runs with NCCL_PROTO=Simple, so compare emulated runs with --proto Simple\n"
    "  --rank R    broadcast, reduce (root 0) and ring all-gather / reduce-scatter / all-reduce "
    "as\n"
    "              rank R sees them: its own completion, not the last rank's (compare an\n"
    "              emulation whose real rank is R); other ops unchanged\n"
    "  -n ITERS    operations back to back per size, as NCCL-tests' -n (default 20): times\n"
    "              are per operation of that loop; a broadcast streams from one into the\n"
    "              next (its chain fills once). -n 1: one operation alone\n"
    "  --json FILE the rows as JSON (NCCL-tests' -J keys where they exist)\n";

int parsePositive(std::string_view flag, const std::string& v) {
  std::size_t used = 0;
  int n = 0;
  try {
    n = std::stoi(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || n < 1)
    throw InputError(
        fmt::format("simulate --sweep: {} wants a positive integer, got '{}'", flag, v));
  return n;
}

double parseFactor(const std::string& v) {
  std::size_t used = 0;
  double f = 0;
  try {
    f = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size())
    throw InputError(fmt::format("simulate --sweep: -f wants a number, got '{}'", v));
  return f;
}

}  // namespace

int simulateSweep(std::span<const std::string> args) {
  std::string config_path, json_path;
  std::uint64_t min_bytes = 8, max_bytes = 1ULL << 30, increment = 0;
  double factor = 2;
  sweep::SweepOptions opts;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string& {
      if (i + 1 >= args.size())
        throw InputError(fmt::format("simulate --sweep: {} needs a value", a));
      return args[++i];
    };
    if (a == "--sweep") continue;
    if (a == "--help" || a == "-h") {
      fmt::print("{}", kUsage);
      return 0;
    } else if (a == "--op") {
      opts.ops = sweep::parseTestOpList(value());
    } else if (a == "-b") {
      min_bytes = sweep::parseSizeArg("-b", value());
    } else if (a == "-e") {
      max_bytes = sweep::parseSizeArg("-e", value());
    } else if (a == "-f") {
      factor = parseFactor(value());
      increment = 0;
    } else if (a == "-i") {
      increment = sweep::parseSizeArg("-i", value());
      factor = 0;
    } else if (a == "-d") {
      opts.type = sweep::parseDataType(value());
    } else if (a == "--proto") {
      opts.proto = sweep::parseProto(value());
    } else if (a == "--ranks") {
      opts.nranks = parsePositive(a, value());
    } else if (a == "--rank") {
      const std::string v = value();
      opts.rank = v == "0" ? 0 : parsePositive(a, v);
    } else if (a == "-n" || a == "--iters") {
      opts.iters = parsePositive(a, value());
    } else if (a == "--json") {
      json_path = value();
    } else if (!a.empty() && a[0] == '-') {
      throw InputError(fmt::format("simulate --sweep: unknown option '{}'\n{}", a, kUsage));
    } else if (config_path.empty()) {
      config_path = a;
    } else {
      throw InputError(
          fmt::format("simulate: one CONFIG expected, got '{}' and '{}'", config_path, a));
    }
  }
  if (config_path.empty())
    throw InputError(fmt::format("simulate --sweep: CONFIG missing\n{}", kUsage));
  opts.steps = sweep::stepSizes(min_bytes, max_bytes, factor, increment);

  const Config config = loadConfig(config_path);
  const int world = config.cluster.world();
  if (opts.nranks == 0) opts.nranks = config.job.world_size > 0 ? config.job.world_size : world;
  if (opts.rank && *opts.rank >= opts.nranks)
    throw InputError(fmt::format("simulate --sweep: --rank {} is not a rank of {} ranks",
                                 *opts.rank, opts.nranks));
  if (opts.nranks > world)
    throw InputError(
        fmt::format("simulate --sweep: --ranks {} is more than the {} GPUs of {} (cluster.nodes x "
                    "cluster.gpus_per_node)",
                    opts.nranks, world, config_path));

  const auto t0 = std::chrono::steady_clock::now();
  const model::NcclModel model(config.cluster, config.model);
  const std::vector<sweep::SweepRow> rows = sweep::runSweep(model, opts);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  const model::CommShape shape = sweep::sweepShape(config.cluster, opts.nranks);
  fmt::print("# crystal simulate --sweep: {} ({} ranks on {} node{} x {} GPUs)\n", config_path,
             opts.nranks, shape.nnodes, shape.nnodes == 1 ? "" : "s", shape.ranks_per_node);
  fmt::print("# time: per operation of {} back to back (-n){}\n", opts.iters,
             opts.rank ? fmt::format(", as rank {} sees it (--rank)", *opts.rank) : "");
  fmt::print("{}", sweep::formatSweepTable(rows, opts.nranks, sweep::RowSource::Model));
  fmt::print("# {} rows in {:.2f} ms\n", rows.size(), ms);
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    if (!f) throw InputError(fmt::format("simulate --sweep: cannot write '{}'", json_path));
    nlohmann::json j = sweep::sweepJson(rows, opts.nranks, sweep::RowSource::Model);
    j["iters"] = opts.iters;  // nccl-tests' -n: the rows are per operation of that loop
    if (opts.rank) j["rank"] = *opts.rank;
    f << j.dump(1) << '\n';
    if (!f) throw InputError(fmt::format("simulate --sweep: failed writing '{}'", json_path));
  }
  return 0;
}

}  // namespace crystal::cli
