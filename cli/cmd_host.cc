// `crystal host CONFIG [--listen ADDR] [--split RULES] [--plugin PATH]`: runs the emulation
// host (bootstrap stand-in + control server) until SIGINT/SIGTERM. Prints its address and
// the environment real ranks need, as `export` lines a batch script can eval. docs/emulate.md.
// Built only where the bootstrap stand-in (replay/host) is part of the build.
#ifdef CRYSTAL_HAVE_EMULATION_HOST
#include <fmt/core.h>
#include <signal.h>

#include <cstdio>
#include <span>
#include <string>

#include "cli/command.h"
#include "crystal/base/error.h"
#include "crystal/config/config.h"
#include "crystal/control/emulation_host.h"

namespace crystal::cli {
namespace {

constexpr std::string_view kUsage =
    "usage: crystal host CONFIG [--listen HOST:PORT] [--split RULES] [--plugin PATH]\n"
    "  Runs the emulation host until killed (SIGINT/SIGTERM). First line on stdout:\n"
    "  'crystal host: listening on HOST:PORT'; then `export` lines for the real ranks.\n"
    "  --listen   control address (default: emulation.host of CONFIG; port 0 = any)\n"
    "  --split    grouping of virtual ranks in successive ncclCommSplit calls of the world\n"
    "             communicator, e.g. block:8,stride:8 (see docs/emulate.md)\n"
    "  --plugin   libnccl-net-crystal.so for the LD_PRELOAD line (default: found beside crystal)\n";

int runHost(std::span<const std::string> args) {
  std::string config_path, listen, plugin;
  control::EmulationHostOptions opts;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string& {
      if (i + 1 >= args.size()) throw InputError("host: " + a + " needs a value");
      return args[++i];
    };
    if (a == "--help" || a == "-h") {
      fmt::print("{}", kUsage);
      return 0;
    }
    if (a == "--listen") {
      listen = value();
    } else if (a == "--split") {
      opts.split_rules = control::parseSplitRules(value());
    } else if (a == "--plugin") {
      plugin = value();
    } else if (!a.empty() && a[0] == '-') {
      throw InputError("host: unknown option '" + a + "'\n" + std::string(kUsage));
    } else if (config_path.empty()) {
      config_path = a;
    } else {
      throw InputError("host: more than one CONFIG given ('" + a + "')");
    }
  }
  if (config_path.empty()) throw InputError("host: CONFIG is required\n" + std::string(kUsage));
  const Config config = loadConfig(config_path);
  opts.listen = listen;

  // Block the stop signals before any thread starts, so only sigwait() sees them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  control::EmulationHost host(config, opts);
  fmt::print("crystal host: listening on {} (emulation id {:x})\n", host.controlAddress(),
             host.emulationId());
  std::string plugin_path;
  try {
    plugin_path = control::findPlugin(plugin);
  } catch (const InputError& e) {
    fmt::print(stderr, "crystal host: {}; LD_PRELOAD/LD_LIBRARY_PATH not printed\n", e.what());
  }
  for (const auto& [k, v] : control::launchEnvironment(config, config_path, host.controlAddress(),
                                                       plugin_path, host.emulationId())) {
    if (plugin_path.empty() && (k == "LD_PRELOAD" || k == "LD_LIBRARY_PATH")) continue;
    fmt::print("export {}='{}'\n", k, v);
  }
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop, &sig);
  fmt::print(stderr, "crystal host: signal {}, stopping ({} host errors)\n", sig,
             host.errorCount());
  return 0;
}

}  // namespace

CRYSTAL_COMMAND("host", "run the emulation host (bootstrap stand-in for virtual ranks)", runHost);

}  // namespace crystal::cli

#endif  // CRYSTAL_HAVE_EMULATION_HOST
