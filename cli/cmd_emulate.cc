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

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/sweep_commands.h"
#include "crystal/base/error.h"
#include "crystal/config/config.h"
#include "crystal/control/emulation_host.h"
#include "crystal/store/launch.h"
#include "crystal/store/server.h"

namespace crystal::cli {
namespace {

constexpr std::string_view kUsage =
    "usage: crystal emulate CONFIG [--listen HOST:PORT] [--split RULES] [--plugin PATH]\n"
    "                       [--store-listen HOST:PORT] [--store-timeout S] [--gpus N] -- CMD...\n"
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
    "                   (default: CUDA_VISIBLE_DEVICES, else the driver's count, else 1)\n";

// Children (one per real rank), for signal forwarding: plain array, async-signal-safe.
constexpr int kMaxChildren = 1024;
volatile sig_atomic_t g_children[kMaxChildren] = {};
volatile sig_atomic_t g_child_count = 0;
void forwardSignal(int sig) {
  for (int i = 0; i < g_child_count; ++i)
    if (g_children[i] > 0) ::kill(g_children[i], sig);
}

std::optional<std::string> envLookup(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

// "HOST:PORT" of the control address with the port replaced by 0 (any free port).
std::string sameHostAnyPort(const std::string& address) {
  return address.substr(0, address.rfind(':')) + ":0";
}

pid_t startRank(const std::vector<std::string>& argv, const control::EnvList& env) {
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
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
  std::string config_path, plugin, store_listen;
  double store_timeout_s = -1;
  int gpus = 0;
  control::EmulationHostOptions opts;
  std::vector<std::string> cmd;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string& {
      if (i + 1 >= args.size()) throw InputError("emulate: " + a + " needs a value");
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
    if (a == "--listen") {
      opts.listen = value();
    } else if (a == "--split") {
      opts.split_rules = control::parseSplitRules(value());
    } else if (a == "--plugin") {
      plugin = value();
    } else if (a == "--store-listen") {
      store_listen = value();
    } else if (a == "--store-timeout") {
      const std::string& v = value();
      char* end = nullptr;
      store_timeout_s = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0' || !(store_timeout_s > 0))
        throw InputError("emulate: --store-timeout '" + v + "' is not a positive number");
    } else if (a == "--gpus") {
      const std::string& v = value();
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (end == v.c_str() || *end != '\0' || n < 1 || n > 1024)
        throw InputError("emulate: --gpus '" + v + "' is not a GPU count in [1, 1024]");
      gpus = static_cast<int>(n);
    } else if (!a.empty() && a[0] == '-') {
      throw InputError("emulate: unknown option '" + a + "'\n" + std::string(kUsage));
    } else if (config_path.empty()) {
      config_path = a;
    } else {
      throw InputError("emulate: unexpected '" + a + "' (put the command after --)");
    }
  }
  if (config_path.empty() || cmd.empty())
    throw InputError("emulate: CONFIG and -- CMD... are required\n" + std::string(kUsage));
  const Config config = loadConfig(config_path);
  const std::string plugin_path = control::findPlugin(plugin);

  control::EmulationHost host(config, opts);
  const auto env = control::launchEnvironment(config, config_path, host.controlAddress(),
                                              plugin_path, host.emulationId());

  store::LaunchInputs launch;
  launch.world_size = config.job.world_size;
  launch.real_ranks = config.emulation.real_ranks;
  launch.gpus_per_node = config.cluster.gpus_per_node;
  launch.local_gpus = gpus > 0 ? gpus : store::localGpuCount(envLookup);
  launch.getenv = envLookup;
  store::StoreServerOptions so;
  so.listen = store_listen.empty() ? sameHostAnyPort(host.controlAddress()) : store_listen;
  so.world_size = launch.world_size;
  so.real_ranks = launch.real_ranks;
  so.ranks_per_root = store::ranksPerRoot(launch);
  so.wait_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(
      1000.0 * (store_timeout_s > 0 ? store_timeout_s : config.emulation.timeout_s)));
  so.mint_unique_id = [&host] { return host.mintUniqueId(); };
  store::StoreServer store(so);
  launch.master_addr = store.host();
  launch.master_port = store.port();
  launch.ranks_per_root = so.ranks_per_root;
  const store::LaunchPlan plan = store::planLaunch(cmd, launch);
  for (const auto& note : plan.notes) fmt::print(stderr, "crystal emulate: {}\n", note);
  if (plan.processes.size() > kMaxChildren)
    throw InputError(fmt::format("emulate: {} real ranks; at most {} processes are started",
                                 plan.processes.size(), kMaxChildren));
  fmt::print(stderr, "crystal emulate: host on {}, store on {}:{}, running {} ({} process{})\n",
             host.controlAddress(), store.host(), store.port(), cmd[0], plan.processes.size(),
             plan.processes.size() == 1 ? "" : "es");
  std::fflush(stderr);

  struct sigaction sa {};
  sa.sa_handler = forwardSignal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  std::map<pid_t, int> rank_of;  // running children
  for (const auto& p : plan.processes) {
    control::EnvList full = env;
    full.insert(full.end(), p.env.begin(), p.env.end());
    const pid_t pid = startRank(p.argv, full);
    rank_of[pid] = p.rank;
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
  return code;
}

}  // namespace

CRYSTAL_COMMAND("emulate", "run real ranks (CMD) inside an emulated job", runEmulate);

}  // namespace crystal::cli

#endif  // CRYSTAL_HAVE_EMULATION_HOST
