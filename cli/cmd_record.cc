// `crystal record CONFIG [-o GRAPH [--json]] [--dir DIR] [--plugin LIB] -- CMD...`: runs CMD
// (the unmodified program, e.g. torchrun ..., or `crystal emulate CONFIG -- ...` so that the
// real ranks' peers are virtual) with NCCL's profiler pointed at libnccl-net-crystal.so, then
// builds the target's graph from what each process recorded (docs/record.md).
#include <fmt/core.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/python_site.h"
#include "crystal/base/error.h"
#include "crystal/graph/import.h"
#include "graph/import/pyrun.h"
#include "graph/validate.h"
#ifdef CRYSTAL_HAVE_EMULATION_HOST
#include "crystal/control/emulation_host.h"
#endif

namespace crystal::cli {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kUsage =
    "usage: crystal record CONFIG [-o GRAPH [--json]] [--dir DIR] [--plugin LIB] -- CMD...\n"
    "Runs CMD with NCCL_PROFILER_PLUGIN=LIB and CRYSTAL_RECORD=DIR: every process that uses\n"
    "NCCL writes DIR/crystal-record.<pid>.jsonl (its rank from RANK or CRYSTAL_RANK). Then\n"
    "the recordings (one rank of each pipeline stage at least) become the graph of CONFIG's\n"
    "target, validated and written to GRAPH. Record files hold communication only; a PyTorch\n"
    "program also gets python/crystal_site (PYTHONPATH): it traces iterations\n"
    "[CRYSTAL_PROFILE_WARMUP, +CRYSTAL_PROFILE_STEPS) (default [2, 3)) with torch.profiler and\n"
    "writes DIR/rank<R>.pyrun.json, so that rank's graph gets the traced kernels' compute\n"
    "times, its streams and its allocator's peak memory.\n"
    "  --dir      where recordings go (default: a new directory under $TMPDIR or /tmp)\n"
    "  --plugin   libnccl-net-crystal.so (default: $CRYSTAL_PLUGIN, else beside crystal)\n";

std::string pluginPath(const std::string& explicit_path) {
#ifdef CRYSTAL_HAVE_EMULATION_HOST
  return control::findPlugin(explicit_path);
#else
  if (!explicit_path.empty()) return explicit_path;
  if (const char* env = std::getenv("CRYSTAL_PLUGIN"); env != nullptr && *env != '\0') return env;
  throw InputError("record: pass --plugin PATH or set CRYSTAL_PLUGIN");
#endif
}

int runChild(const std::vector<std::string>& cmd,
             const std::vector<std::pair<std::string, std::string>>& env) {
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> argv;
    for (const auto& c : cmd) argv.push_back(const_cast<char*>(c.c_str()));
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "crystal record: cannot run '%s': %s\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  // Ctrl-C reaches the child (same process group); the parent waits for it to finish.
  std::signal(SIGINT, SIG_IGN);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::signal(SIGINT, SIG_DFL);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

// A rank's rank<R>.pyrun.json: with a Kineto trace, the trace replaces that rank's record
// file as its recording (it has the compute, streams and memory; the record file only the
// communication); without one, the record file gets the allocator's peak.
void addPyRun(const graph::PyRun& run, const std::string& dir,
              std::vector<graph::RecordedRank>& recs) {
  auto same = std::find_if(recs.begin(), recs.end(),
                           [&](const graph::RecordedRank& r) { return r.rank == run.rank; });
  fmt::print("{}: rank {}, {} iterations, max_memory_allocated {} bytes\n", run.source, run.rank,
             run.steps.size(), run.max_memory_allocated);
  if (!run.kineto_trace.empty()) {
    graph::RecordedRank rec = graph::readKinetoTrace((fs::path(dir) / run.kineto_trace).string());
    graph::applyPyRunMemory(rec, run);
    fmt::print("{}: rank {}, {} ops, {} communicators (replaces the rank's record file)\n",
               rec.source, rec.rank, rec.ops.size(), rec.comms.size());
    if (same != recs.end())
      *same = std::move(rec);
    else
      recs.push_back(std::move(rec));
  } else if (same != recs.end()) {
    graph::applyPyRunMemory(*same, run);
  } else {
    fmt::print(stderr, "crystal record: warning: {}: rank {} has no NCCL recording; ignored\n",
               run.source, run.rank);
  }
}

int runRecord(std::span<const std::string> args) {
  std::string config_path, out, dir, plugin;
  bool json = false;
  std::vector<std::string> cmd;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string& {
      if (i + 1 >= args.size()) throw InputError("record: " + a + " needs a value");
      return args[++i];
    };
    if (a == "--") {
      cmd.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
      break;
    }
    if (a == "--help" || a == "-h") {
      fmt::print("{}", kUsage);
      return 0;
    }
    if (a == "-o")
      out = value();
    else if (a == "--json")
      json = true;
    else if (a == "--dir")
      dir = value();
    else if (a == "--plugin")
      plugin = value();
    else if (!a.empty() && a[0] == '-')
      throw InputError(fmt::format("record: unknown option '{}'\n{}", a, kUsage));
    else if (config_path.empty())
      config_path = a;
    else
      throw InputError(fmt::format("record: unexpected argument '{}'\n{}", a, kUsage));
  }
  if (config_path.empty() || cmd.empty())
    throw InputError(fmt::format("record: needs CONFIG and -- CMD\n{}", kUsage));
  const Config config = loadConfig(config_path);  // bad configs fail before the run
  const std::string lib = fs::absolute(pluginPath(plugin)).string();
  if (dir.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/crystal-record-XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr)
      throw std::runtime_error(
          fmt::format("record: cannot create {}: {}", templ, std::strerror(errno)));
    dir = templ;
  } else {
    fs::create_directories(dir);
  }
  dir = fs::absolute(dir).string();
  fmt::print("crystal record: recording into {}\n", dir);
  std::fflush(stdout);
  std::vector<std::pair<std::string, std::string>> env{
      {"NCCL_PROFILER_PLUGIN", lib},
      {"CRYSTAL_RECORD", dir},
      {"CRYSTAL_CONFIG", fs::absolute(config_path).string()}};
  try {
    for (auto& kv : cli::pythonSiteEnvironment(cli::pythonSiteDir(), dir, /*profile=*/true))
      env.push_back(std::move(kv));
  } catch (const InputError& e) {  // a program without Python still records its NCCL calls
    fmt::print(stderr, "crystal record: warning: {}: PyTorch compute and memory not recorded\n",
               e.what());
  }
  const int rc = runChild(cmd, env);
  if (rc != 0) fmt::print(stderr, "crystal record: the program exited with status {}\n", rc);
  std::vector<graph::RecordedRank> recs;
  std::vector<std::string> pyruns;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string p = entry.path().string();
    if (p.ends_with(".pyrun.json")) pyruns.push_back(p);
    if (!p.ends_with(".jsonl")) continue;
    recs.push_back(graph::readNcclRecording(p));
    const auto& r = recs.back();
    fmt::print("{}: rank {}, {} ops, {} communicators\n", p, r.rank, r.ops.size(), r.comms.size());
  }
  std::sort(pyruns.begin(), pyruns.end());
  for (const auto& p : pyruns) addPyRun(graph::readPyRun(p), dir, recs);
  if (recs.empty())
    throw InputError(
        fmt::format("record: no recording in {}: did the program use NCCL (and load "
                    "{} as NCCL_PROFILER_PLUGIN)?",
                    dir, lib));
  for (const auto& r : recs)
    for (const auto& n : r.notes) fmt::print("  note: {}\n", n);
  const auto g = graph::sliceRecordings(config, recs);
  const auto rep = graph::validateGraph(*g);
  fmt::print("graph of {}: world size {}, {} classes, {} ops in total, valid ({} check)\n",
             config_path, g->worldSize(), g->numClasses(), g->totalOps(), rep.method);
  if (!out.empty()) {
    if (json)
      graph::saveGraphJson(*g, out);
    else
      graph::saveGraphBinary(*g, out);
    fmt::print("wrote {}\n", out);
  }
  return rc == 0 ? 0 : 1;
}

}  // namespace

CRYSTAL_COMMAND("record", "run CMD with NCCL recording on; build the target graph from it",
                runRecord);

}  // namespace crystal::cli
