// `crystal emulate CONFIG [options] -- CMD...`: starts the emulation host and the PyTorch
// TCPStore that plays the virtual ranks (docs/store.md) in this process, runs CMD with the
// real ranks' environment (LD_PRELOAD interposer, NCCL switches, CRYSTAL_HOST, MASTER_ADDR,
// RANK, ...) -- once per real rank for `python ...` and `torchrun ...` -- waits for it and
// reports its exit status. docs/emulate.md.
// Built only where the bootstrap stand-in (replay/host) is part of the build.
#ifdef CRYSTAL_HAVE_EMULATION_HOST
#include <fmt/core.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/emulate_report.h"
#include "cli/options.h"
#include "cli/session_options.h"
#include "cli/python_site.h"
#include "cli/sweep_commands.h"
#include "crystal/base/error.h"
#include "crystal/config/config.h"
#include "crystal/control/emulation_session.h"
#include "crystal/store/launch.h"
#include "crystal/store/server.h"

namespace crystal::cli {
namespace {

constexpr std::string_view kUsage =
    "usage: crystal emulate CONFIG [--listen HOST:PORT] [--split RULES] [--plugin PATH]\n"
    "                       [--store-listen HOST:PORT] [--store-timeout S] [--gpus N]\n"
    "                       [--run-dir DIR] [--warmup N] [--no-profile] [--no-record] -- CMD...\n"
    "  Starts the emulation host and the TCPStore of the virtual ranks, runs the real ranks\n"
    "  with the environment they need, waits, and exits with the first failing rank's status\n"
    "  (128+N if it was killed by signal N), else 0. CMD = `python[3] SCRIPT ...` or\n"
    "  `torchrun [opts] SCRIPT ...`: one process per emulation.real_ranks entry (torchrun\n"
    "  itself is bypassed); any other CMD runs once (a launcher of its own).\n"
    "  --listen         control address (default: emulation.host of CONFIG)\n"
    "  --split          grouping of virtual ranks in ncclCommSplit calls, e.g. block:8\n"
    "  --plugin         libnccl-net-crystal.so (default: $CRYSTAL_PLUGIN, else beside crystal)\n"
    "  --store-listen   TCPStore address = MASTER_ADDR:MASTER_PORT (default: control IP, any "
    "port)\n"
    "  --store-timeout  seconds a real rank may wait for a store key nobody writes\n"
    "                   (default: emulation.timeout_s)\n"
    "  --gpus           GPUs of this machine; LOCAL_RANK = index in real_ranks % N\n"
    "                   (default: CUDA_VISIBLE_DEVICES, else the driver's count, else 1)\n"
    "  --run-dir        where the run's files and the report go (default: a new\n"
    "                   crystal-run-<UTC time> in the working directory)\n"
    "  --warmup         steps left out of the steady state (default 2)\n"
    "  --no-profile     no torch.profiler step (then no exposed communication)\n"
    "  --no-record      no NCCL profiler record files (CRYSTAL_RECORD not set)\n"
    "  At the end: a report on stderr (per real rank: steady-state iteration time, exposed\n"
    "  communication, peak memory, beside `crystal simulate`), RUN_DIR/report.json and\n"
    "  RUN_DIR/timeline.json (Perfetto). docs/emulate.md.\n";

// Children (one per real rank), for signal forwarding: plain array, async-signal-safe.
constexpr int kMaxChildren = 1024;
volatile sig_atomic_t g_children[kMaxChildren] = {};
volatile sig_atomic_t g_child_count = 0;
void forwardSignal(int sig) {
  for (int i = 0; i < g_child_count; ++i)
    if (g_children[i] > 0) ::kill(g_children[i], sig);
}

// The run directory: `dir`, else crystal-run-<UTC time> in the working directory (with a
// suffix if that exists). Created; returned absolute.
std::string makeRunDir(std::string dir) {
  namespace fs = std::filesystem;
  if (dir.empty()) {
    const std::time_t now = std::time(nullptr);
    std::tm utc{};
    ::gmtime_r(&now, &utc);
    char stamp[32];
    std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &utc);
    dir = std::string("crystal-run-") + stamp;
    for (int i = 2; fs::exists(dir); ++i) dir = fmt::format("crystal-run-{}-{}", stamp, i);
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw InputError(fmt::format("emulate: cannot create --run-dir '{}': {}", dir, ec.message()));
  return fs::absolute(dir).lexically_normal().string();
}

// Python ranks load crystal_site (step times, allocator peaks, one profiled step) and write
// rank<R>.pyrun.json into the run directory. The profiled step is the first one after the
// warm-up unless the caller set CRYSTAL_PROFILE_WARMUP/STEPS; `plan` says which it is.
control::EnvList pythonEnvironment(const std::string& run_dir, bool profile, report::StepPlan& plan,
                                   std::string& pyrun_dir) {
  control::EnvList env;
  pyrun_dir = run_dir;
  std::string site;
  try {
    site = pythonSiteDir();
  } catch (const InputError& e) {
    fmt::print(stderr, "crystal emulate: {}; Python ranks report no step times\n", e.what());
    return env;
  }
  for (const auto& [k, v] : pythonSiteEnvironment(site, run_dir, profile)) {
    if (k == "CRYSTAL_RUN_DIR") pyrun_dir = v;
    env.emplace_back(k, v);
  }
  plan.profiled_count = 0;
  if (!profile) return env;
  auto setting = [&](const char* name, int fallback) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') {
      env.emplace_back(name, std::to_string(fallback));
      return fallback;
    }
    return intInRange("emulate", name, v, 1, 1000000);
  };
  // crystal_site profiles from iteration 1 at the earliest (CRYSTAL_PROFILE_WARMUP >= 1).
  plan.profiled_first = setting("CRYSTAL_PROFILE_WARMUP", std::max(plan.warmup, 1));
  plan.profiled_count = setting("CRYSTAL_PROFILE_STEPS", 1);
  return env;
}

pid_t startRank(const std::vector<std::string>& argv, const control::EnvList& env) {
  // A child inherits forwardSignal until it execs: a SIGTERM from "stopping rank N" that
  // came before (a rank failing at once, on a loaded machine) ran the handler in the child
  // and was lost, and the rank then ran until its own timeout. So SIGINT/SIGTERM stay
  // blocked across fork; the child takes the default actions back before it unblocks them
  // (a pending one then ends it), the parent unblocks as it was.
  sigset_t stop, was;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  ::sigprocmask(SIG_BLOCK, &stop, &was);
  const pid_t pid = ::fork();
  if (pid != 0) ::sigprocmask(SIG_SETMASK, &was, nullptr);
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::sigprocmask(SIG_SETMASK, &was, nullptr);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> args;
    for (const auto& c : argv) args.push_back(const_cast<char*>(c.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    std::fprintf(stderr, "crystal emulate: cannot run '%s': %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  return pid;
}

int runEmulate(std::span<const std::string> args) {
  // An NCCL-tests binary gets its table restated for the target too (docs/nccl-tests.md).
  if (const int rc = emulateNcclTests(args); rc >= 0) return rc;
  control::EmulationSessionOptions opts;
  std::string plugin, run_dir;
  bool profile = true, record = true;
  int warmup = 2;
  OptionParser parser("emulate", std::string(kUsage));
  const ParsedOptions parsed =
      addSessionOptions(parser, "emulate", opts, plugin)
          .value("--gpus",
                 [&](const std::string& v) {
                   opts.local_gpus = intInRange("emulate", "--gpus", v, 1, 1024);
                 })
          .value("--run-dir", [&](const std::string& v) { run_dir = v; })
          .value("--warmup",
                 [&](const std::string& v) {
                   warmup = intInRange("emulate", "--warmup", v, 0, 1000000);
                 })
          .flag("--no-profile", [&] { profile = false; })
          .flag("--no-record", [&] { record = false; })
          .commandAfterDashes()
          .maxPositional(1)
          .parse(args);
  if (parsed.help) {
    fmt::print("{}", kUsage);
    return 0;
  }
  const std::vector<std::string>& cmd = parsed.command;
  if (parsed.positional.empty() || cmd.empty())
    throw InputError("emulate: CONFIG and -- CMD... are required\n" + std::string(kUsage));
  const std::string& config_path = parsed.positional.front();
  const Config config = loadConfig(config_path);
  opts.plugin_path = control::findPlugin(plugin);
  run_dir = makeRunDir(run_dir);
  if (record) opts.record_dir = run_dir;

  control::EmulationSession session(config, config_path, opts);
  control::EmulationHost& host = session.host();
  store::StoreServer& store = session.store();
  control::EnvList env = session.environment();
  report::StepPlan plan{.warmup = warmup, .profiled_first = warmup, .profiled_count = 0};
  std::string pyrun_dir;
  const auto py = pythonEnvironment(run_dir, profile, plan, pyrun_dir);
  env.insert(env.end(), py.begin(), py.end());
  const store::LaunchPlan launch = store::planLaunch(cmd, session.launchInputs());
  for (const auto& note : launch.notes) fmt::print(stderr, "crystal emulate: {}\n", note);
  if (launch.processes.size() > kMaxChildren)
    throw InputError(fmt::format("emulate: {} real ranks; at most {} processes are started",
                                 launch.processes.size(), kMaxChildren));
  fmt::print(stderr, "crystal emulate: run directory {}\n", run_dir);
  fmt::print(stderr, "crystal emulate: host on {}, store on {}:{}, running {} ({} process{})\n",
             host.controlAddress(), store.host(), store.port(), cmd[0], launch.processes.size(),
             launch.processes.size() == 1 ? "" : "es");
  std::fflush(stderr);

  struct sigaction sa {};
  sa.sa_handler = forwardSignal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  std::map<pid_t, int> rank_of;  // running children
  report::RunInfo run;
  run.config_path = config_path;
  run.run_dir = run_dir;
  run.pyrun_dir = pyrun_dir;
  run.record_dir = session.recordDir();
  run.real_ranks = config.emulation.real_ranks;
  run.plan = plan;
  for (const auto& p : launch.processes) {
    control::EnvList full = env;
    full.insert(full.end(), p.env.begin(), p.env.end());
    const pid_t pid = startRank(p.argv, full);
    rank_of[pid] = p.rank;
    run.processes.emplace_back(pid, p.rank);
    if (p.rank >= 0) store.nameProcess(static_cast<std::uint32_t>(pid), p.rank);
    g_children[g_child_count] = pid;
    g_child_count = g_child_count + 1;
  }
  auto what = [&](int rank) {
    return rank >= 0 ? fmt::format("rank {}", rank) : std::string(cmd[0]);
  };
  int code = 0;
  bool failed = false;
  while (!rank_of.empty()) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    const auto it = rank_of.find(pid);
    if (it == rank_of.end()) continue;
    const int rank = it->second;
    rank_of.erase(it);
    for (int i = 0; i < g_child_count; ++i)
      if (g_children[i] == pid) g_children[i] = 0;
    int rc = 1;
    if (WIFEXITED(status)) {
      rc = WEXITSTATUS(status);
      fmt::print(stderr, "crystal emulate: {} exited with status {}\n", what(rank), rc);
    } else if (WIFSIGNALED(status)) {
      rc = 128 + WTERMSIG(status);
      fmt::print(stderr, "crystal emulate: {} killed by signal {}\n", what(rank), WTERMSIG(status));
    }
    if (rc != 0 && !failed) {
      // The other real ranks would wait for this one inside NCCL: stop them.
      failed = true;
      code = rc;
      for (const auto& [other, r] : rank_of) {
        fmt::print(stderr, "crystal emulate: stopping {} after {} failed\n", what(r), what(rank));
        ::kill(other, SIGTERM);
      }
    }
  }
  g_child_count = 0;
  fmt::print(stderr, "crystal emulate: done ({} host errors, {} store errors)\n", host.errorCount(),
             store.errorCount());
  // The report never changes the exit status: the program's is what the caller gets.
  run.exit_code = code;
  run.host_notes = host.notes();
  fmt::print(stderr, "{}", report::writeReport(config, run));
  return code;
}

}  // namespace

CRYSTAL_COMMAND("emulate", "run real ranks (CMD) inside an emulated job", runEmulate);

}  // namespace crystal::cli

#endif  // CRYSTAL_HAVE_EMULATION_HOST
