// `crystal host CONFIG [--listen ADDR] [--split RULES] [--plugin PATH]`: runs the emulation
// host (bootstrap stand-in + control server) and the TCPStore of the virtual ranks
// (docs/store.md) until SIGINT/SIGTERM. Prints its address and the environment real ranks
// need, as `export` lines a batch script can eval. docs/emulate.md.
// Built only where the bootstrap stand-in (replay/host) is part of the build.
#ifdef CRYSTAL_HAVE_EMULATION_HOST
#include <fmt/core.h>
#include <signal.h>

#include <cstdio>
#include <span>
#include <string>

#include "cli/command.h"
#include "cli/options.h"
#include "cli/session_options.h"
#include "crystal/base/error.h"
#include "crystal/config/config.h"
#include "crystal/control/emulation_session.h"

namespace crystal::cli {
namespace {

constexpr std::string_view kUsage =
    "usage: crystal host CONFIG [--listen HOST:PORT] [--split RULES] [--plugin PATH]\n"
    "  Runs the emulation host until killed (SIGINT/SIGTERM). First line on stdout:\n"
    "  'crystal host: listening on HOST:PORT'; then `export` lines for the real ranks.\n"
    "  --listen   control address (default: emulation.host of CONFIG; port 0 = any)\n"
    "  --split    grouping of virtual ranks in successive ncclCommSplit calls of the world\n"
    "             communicator, e.g. block:8,stride:8 (see docs/emulate.md)\n"
    "  --plugin   libnccl-net-crystal.so for the LD_PRELOAD line (default: found beside crystal)\n"
    "  --store-listen   PyTorch TCPStore address, exported as MASTER_ADDR/MASTER_PORT\n"
    "                   (default: the control address's IP, any port)\n"
    "  --store-timeout  seconds a real rank may wait for a store key nobody writes\n";

int runHost(std::span<const std::string> args) {
  control::EmulationSessionOptions opts;
  std::string plugin;
  OptionParser parser("host", std::string(kUsage));
  const ParsedOptions parsed =
      addSessionOptions(parser, "host", opts, plugin)
          .maxPositional(1)
          .parse(args);
  if (parsed.help) {
    fmt::print("{}", kUsage);
    return 0;
  }
  if (parsed.positional.empty())
    throw InputError("host: CONFIG is required\n" + std::string(kUsage));
  const std::string& config_path = parsed.positional.front();
  const Config config = loadConfig(config_path);
  try {
    opts.plugin_path = control::findPlugin(plugin);
  } catch (const InputError& e) {
    fmt::print(stderr, "crystal host: {}; LD_PRELOAD/LD_LIBRARY_PATH not printed\n", e.what());
  }

  // Block the stop signals before any thread starts, so only sigwait() sees them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  control::EmulationSession session(config, config_path, opts);
  fmt::print("crystal host: listening on {} (emulation id {:x})\n", session.host().controlAddress(),
             session.host().emulationId());
  for (const auto& [k, v] : session.environment()) fmt::print("export {}='{}'\n", k, v);
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop, &sig);
  fmt::print(stderr, "crystal host: signal {}, stopping ({} host errors, {} store errors)\n", sig,
             session.host().errorCount(), session.store().errorCount());
  for (const std::string& n : session.host().notes())
    fmt::print(stderr, "crystal host: not faithful: {}\n", n);
  return 0;
}

}  // namespace

CRYSTAL_COMMAND("host", "run the emulation host (bootstrap stand-in for virtual ranks)", runHost);

}  // namespace crystal::cli

#endif  // CRYSTAL_HAVE_EMULATION_HOST
