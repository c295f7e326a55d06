// `crystal host CONFIG [--listen ADDR] [--split RULES] [--plugin PATH]`: runs the emulation
// host (bootstrap stand-in + control server) and the TCPStore of the virtual ranks
// (docs/store.md) until SIGINT/SIGTERM. Prints its address and the environment real ranks
// need, as `export` lines a batch script can eval. docs/emulate.md.
// Built only where the bootstrap stand-in (replay/host) is part of the build.
#ifdef CRYSTAL_HAVE_EMULATION_HOST
#include <fmt/core.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>

#include "cli/command.h"
#include "crystal/base/error.h"
#include "crystal/config/config.h"
#include "crystal/control/emulation_host.h"
#include "crystal/store/launch.h"
#include "crystal/store/server.h"

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
  std::string config_path, listen, plugin, store_listen;
  double store_timeout_s = -1;
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
    } else if (a == "--store-listen") {
      store_listen = value();
    } else if (a == "--store-timeout") {
      const std::string& v = value();
      char* end = nullptr;
      store_timeout_s = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0' || !(store_timeout_s > 0))
        throw InputError("host: --store-timeout '" + v + "' is not a positive number");
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
  store::LaunchInputs launch;
  launch.world_size = config.job.world_size;
  launch.real_ranks = config.emulation.real_ranks;
  launch.getenv = [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    return v != nullptr ? std::optional<std::string>(v) : std::nullopt;
  };
  store::StoreServerOptions so;
  const std::string control_addr = host.controlAddress();
  so.listen =
      store_listen.empty() ? control_addr.substr(0, control_addr.rfind(':')) + ":0" : store_listen;
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
  for (const auto& [k, v] : store::storeEnvironment(launch)) fmt::print("export {}='{}'\n", k, v);
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop, &sig);
  fmt::print(stderr, "crystal host: signal {}, stopping ({} host errors, {} store errors)\n", sig,
             host.errorCount(), store.errorCount());
  return 0;
}

}  // namespace

CRYSTAL_COMMAND("host", "run the emulation host (bootstrap stand-in for virtual ranks)", runHost);

}  // namespace crystal::cli

#endif  // CRYSTAL_HAVE_EMULATION_HOST
