// `crystal emulate CONFIG [options] -- CMD...`: starts the emulation host in this process,
// runs CMD with the real ranks' environment (LD_PRELOAD interposer, NCCL switches,
// CRYSTAL_HOST), waits for it and reports its exit status. docs/emulate.md.
// Built only where the bootstrap stand-in (replay/host) is part of the build.
#ifdef CRYSTAL_HAVE_EMULATION_HOST
#include <fmt/core.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "cli/command.h"
#include "crystal/base/error.h"
#include "crystal/config/config.h"
#include "crystal/control/emulation_host.h"

namespace crystal::cli {
namespace {

constexpr std::string_view kUsage =
    "usage: crystal emulate CONFIG [--listen HOST:PORT] [--split RULES] [--plugin PATH] -- CMD...\n"
    "  Starts the emulation host, runs CMD (the real ranks: one process or a launcher of\n"
    "  several) with the environment they need, waits, and exits with CMD's status\n"
    "  (128+N if it was killed by signal N).\n"
    "  --listen   control address (default: emulation.host of CONFIG)\n"
    "  --split    grouping of virtual ranks in ncclCommSplit calls, e.g. block:8\n"
    "  --plugin   libnccl-net-crystal.so (default: $CRYSTAL_PLUGIN, else beside crystal)\n";

volatile sig_atomic_t g_child = 0;
void forwardSignal(int sig) {
  if (g_child > 0) ::kill(g_child, sig);
}

int runEmulate(std::span<const std::string> args) {
  std::string config_path, plugin;
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
  fmt::print(stderr, "crystal emulate: host on {}, running {}\n", host.controlAddress(), cmd[0]);
  std::fflush(stderr);

  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> argv;
    for (const auto& c : cmd) argv.push_back(const_cast<char*>(c.c_str()));
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    std::fprintf(stderr, "crystal emulate: cannot run '%s': %s\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  g_child = pid;
  struct sigaction sa {};
  sa.sa_handler = forwardSignal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  g_child = 0;
  int code = 1;
  if (WIFEXITED(status)) {
    code = WEXITSTATUS(status);
    fmt::print(stderr, "crystal emulate: {} exited with status {}", cmd[0], code);
  } else if (WIFSIGNALED(status)) {
    code = 128 + WTERMSIG(status);
    fmt::print(stderr, "crystal emulate: {} killed by signal {}", cmd[0], WTERMSIG(status));
  }
  fmt::print(stderr, " ({} host errors)\n", host.errorCount());
  return code;
}

}  // namespace

CRYSTAL_COMMAND("emulate", "run real ranks (CMD) inside an emulated job", runEmulate);

}  // namespace crystal::cli

#endif  // CRYSTAL_HAVE_EMULATION_HOST
