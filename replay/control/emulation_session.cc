// EmulationSession: the host, the store and the real ranks' environment from one config
// (include/crystal/control/emulation_session.h).
#include "crystal/control/emulation_session.h"

#include <chrono>
#include <cstdlib>
#include <optional>

namespace crystal::control {

namespace {

std::optional<std::string> envLookup(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

// "HOST:PORT" with the port replaced by 0 (any free port).
std::string sameHostAnyPort(const std::string& address) {
  return address.substr(0, address.rfind(':')) + ":0";
}

}  // namespace

struct EmulationSession::Impl {
  Impl(const Config& config, const std::string& config_path, EmulationSessionOptions o)
      : opts(std::move(o)), host(config, opts.host) {
    launch.world_size = config.job.world_size;
    launch.real_ranks = config.emulation.real_ranks;
    launch.gpus_per_node = config.cluster.gpus_per_node;
    launch.getenv = envLookup;
    launch.local_gpus = opts.local_gpus > 0 ? opts.local_gpus : store::localGpuCount(envLookup);
    store::StoreServerOptions so;
    so.listen =
        opts.store_listen.empty() ? sameHostAnyPort(host.controlAddress()) : opts.store_listen;
    so.world_size = launch.world_size;
    so.real_ranks = launch.real_ranks;
    so.ranks_per_root = store::ranksPerRoot(launch);
    const double timeout_s =
        opts.store_timeout_s > 0 ? opts.store_timeout_s : config.emulation.timeout_s;
    so.wait_timeout = std::chrono::milliseconds(static_cast<std::int64_t>(1000.0 * timeout_s));
    so.mint_unique_id = [this] { return host.mintUniqueId(); };
    store = std::make_unique<store::StoreServer>(so);
    launch.master_addr = store->host();
    launch.master_port = store->port();
    launch.ranks_per_root = so.ranks_per_root;

    env = launchEnvironment(config, config_path, host.controlAddress(), opts.plugin_path,
                            host.emulationId());
    if (opts.plugin_path.empty()) {
      std::erase_if(env, [](const auto& kv) {
        return kv.first == "LD_PRELOAD" || kv.first == "LD_LIBRARY_PATH";
      });
    } else {
      const auto outer = envLookup("CRYSTAL_RECORD");
      record_dir = outer && !outer->empty() ? *outer : opts.record_dir;
      // The plugin library is also NCCL's profiler (plugin/profiler/): it records with
      // CRYSTAL_RECORD (docs/record.md) and, under data policy mirror, tells the net plugin
      // where each operation's transfers start (docs/plugin.md "Mirror pairing").
      const auto outer_plugin = envLookup("NCCL_PROFILER_PLUGIN");
      env.emplace_back("NCCL_PROFILER_PLUGIN",
                       outer_plugin && !outer_plugin->empty() ? *outer_plugin : opts.plugin_path);
      if (!record_dir.empty()) env.emplace_back("CRYSTAL_RECORD", record_dir);
      // Its own recording feeds the report, which reads the program's calls only: the task
      // and group events would cost the real rank host time per task (2 x N an all-to-all)
      // that a target rank does not spend. A recording the caller asked for keeps them all.
      const auto outer_events = envLookup("CRYSTAL_RECORD_EVENTS");
      if (!record_dir.empty() && !(outer && !outer->empty()) &&
          !(outer_events && !outer_events->empty()))
        env.emplace_back("CRYSTAL_RECORD_EVENTS", "api");
    }
    const auto store_env = store::storeEnvironment(launch);
    env.insert(env.end(), store_env.begin(), store_env.end());
  }

  EmulationSessionOptions opts;
  EmulationHost host;
  store::LaunchInputs launch;
  std::unique_ptr<store::StoreServer> store;
  EnvList env;
  std::string record_dir;
};

EmulationSession::EmulationSession(const Config& config, const std::string& config_path,
                                   EmulationSessionOptions options)
    : impl_(std::make_unique<Impl>(config, config_path, std::move(options))) {}

EmulationSession::~EmulationSession() = default;

EmulationHost& EmulationSession::host() { return impl_->host; }
store::StoreServer& EmulationSession::store() { return *impl_->store; }
const store::LaunchInputs& EmulationSession::launchInputs() const { return impl_->launch; }
EnvList EmulationSession::environment() const { return impl_->env; }
const std::string& EmulationSession::recordDir() const { return impl_->record_dir; }

}  // namespace crystal::control
