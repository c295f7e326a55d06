#include "crystal/control/emulation_host.h"

#include <fmt/core.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <random>
#include <system_error>

#include "crystal/base/error.h"
#include "crystal/base/log.h"
#include "crystal/control/bootstrap_handler.h"
#include "crystal/control/graph_file.h"
#include "crystal/control/server.h"
#include "crystal/control/socket_io.h"
#include "crystal/host/bootstrap_host.h"

namespace crystal::control {

namespace {
std::uint64_t freshEmulationId() {
  std::random_device rd;
  const std::uint64_t raw =
      (static_cast<std::uint64_t>(rd()) << 32) ^ rd() ^ static_cast<std::uint64_t>(::getpid());
  // 63 bits: the plugin reads CRYSTAL_EMULATION_ID as a signed 64-bit integer.
  const std::uint64_t id63 = raw & 0x7fffffffffffffffull;
  return id63 == 0 ? 1 : id63;
}

host::HostOptions hostOptions(const Config& config, const std::string& listen,
                              std::uint64_t emulation_id) {
  host::HostOptions o;
  // Minted ids point the real ranks at the host's own address.
  const sockaddr_in sa = parseHostPort(listen, "emulation.host");
  std::string ip = formatAddress(sa);
  ip = ip.substr(0, ip.rfind(':'));
  o.root_address = ip == "0.0.0.0" ? "127.0.0.1" : ip;
  o.emulation_id = emulation_id;
  o.stall_timeout =
      std::chrono::milliseconds(static_cast<std::int64_t>(config.emulation.timeout_s * 1000.0));
  o.gpus_per_node = config.cluster.gpus_per_node;
  o.p2p_peers = config.emulation.p2p_peers;
  return o;
}
}  // namespace

// The emulation's NCCL_GRAPH_FILE directory (graph_file.h), made with the host under
// emulation.p2p_peers and removed with it.
struct GraphDir {
  std::string path;
  GraphDir(const Config& config, std::uint64_t id) {
    if (!config.emulation.p2p_peers) return;
    path = graphDir(id);
    std::error_code ec;
    std::filesystem::create_directories(path, ec);
    if (ec)
      throw InputError(fmt::format("emulation.p2p_peers: cannot make {} for the real processes' "
                                   "NCCL_GRAPH_FILE: {}",
                                   path, ec.message()));
  }
  ~GraphDir() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove_all(path, ec);
  }
  GraphDir(const GraphDir&) = delete;
  GraphDir& operator=(const GraphDir&) = delete;
};

struct EmulationHost::Impl {
  std::uint64_t emulation_id;
  GraphDir graph_dir;
  std::atomic<std::size_t> errors{0};
  host::BootstrapHost host;
  BootstrapHandler handler;
  ControlServer server;

  Impl(const Config& config, const EmulationHostOptions& opts, const std::string& listen,
       std::uint64_t id)
      : emulation_id(id),
        graph_dir(config, id),
        host(hostOptions(config, listen, id)),
        handler(host, config, opts.split_rules, id),
        server(handler, ControlServerOptions{.listen = listen}) {
    host.onError([this](const host::HostError& e) {
      errors.fetch_add(1);
      CRYSTAL_ERROR("host: {}", e.message);
    });
    host.start();
  }
};

EmulationHost::EmulationHost(const Config& config, EmulationHostOptions options) {
  const std::string listen = options.listen.empty() ? config.emulation.host : options.listen;
  impl_ = std::make_unique<Impl>(config, options, listen, freshEmulationId());
}

EmulationHost::~EmulationHost() {
  if (impl_) impl_->host.stop();
}

std::string EmulationHost::controlAddress() const { return impl_->server.address(); }
std::uint64_t EmulationHost::emulationId() const { return impl_->emulation_id; }
std::size_t EmulationHost::errorCount() const { return impl_->errors.load(); }
std::vector<std::string> EmulationHost::notes() const { return impl_->handler.notes(); }
std::string EmulationHost::mintUniqueId() {
  const host::UniqueId id = impl_->host.mintUniqueId();
  return std::string(reinterpret_cast<const char*>(id.bytes.data()), id.bytes.size());
}

}  // namespace crystal::control
