// The real ranks' environment (launchEnvironment) and where the plugin is (findPlugin).
#include <fmt/core.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "crystal/base/error.h"
#include "crystal/control/emulation_host.h"
#include "crystal/control/graph_file.h"
#include "crystal/live/target_model.h"
#include "crystal/model/nccl_model.h"

namespace crystal::control {

EnvList launchEnvironment(const Config& config, const std::string& config_path,
                          const std::string& control_address, const std::string& plugin_path,
                          std::uint64_t emulation_id) {
  namespace fs = std::filesystem;
  const std::string plugin_dir = fs::path(plugin_path).parent_path().string();
  auto prepend = [](const char* var, const std::string& value) {
    const char* old = std::getenv(var);
    return (old != nullptr && *old != '\0') ? value + ":" + old : value;
  };
  EnvList env{
      // The interposer is the plugin library itself, preloaded; NCCL's dlopen of
      // "libnccl-net-crystal.so" then finds the same object by its SONAME.
      {"LD_PRELOAD", prepend("LD_PRELOAD", plugin_path)},
      {"LD_LIBRARY_PATH", prepend("LD_LIBRARY_PATH", plugin_dir)},
      {"NCCL_NET_PLUGIN", "crystal"},
      {"NCCL_NET", "crystal"},  // a plugin that fails to load is an error, not a fallback
      {"NCCL_IB_DISABLE", "1"},
      // Each real process is its own NCCL host (so virtual peers are reached over NET): the
      // interposer sets NCCL_HOSTID=<prefix>-<pid> in every process before NCCL reads it.
      {"CRYSTAL_HOSTID_PREFIX", fmt::format("crystal-{:x}", emulation_id)},
      {"NCCL_RAS_ENABLE", "0"},
      {"NCCL_MNNVL_ENABLE", "0"},
      {"NCCL_NVLS_ENABLE", "0"},
      {"NCCL_PXN_DISABLE", "1"},
      {"NCCL_LOCAL_REGISTER", "0"},
      {"NCCL_GRAPH_REGISTER", "0"},
      // No NCCL_PROTO: LL and LL128 lines from virtual senders are written by the plugin
      // (docs/plugin.md "Data policy and protocols"); a NCCL_PROTO in the caller's
      // environment (e.g. Simple, the former default) passes through unchanged. Under
      // emulation.p2p_peers Simple is the default (below).
      {"NCCL_SOCKET_IFNAME", "lo"},
      {"NCCL_UID_STAGGER_THRESHOLD", "100000"},
      {"CRYSTAL_CONFIG", fs::absolute(config_path).string()},
      {"CRYSTAL_HOST", control_address},
      {"CRYSTAL_EMULATION_ID", std::to_string(emulation_id)},
      {"CRYSTAL_TIMEOUT", fmt::format("{}", config.emulation.timeout_s)},
  };
  // GDR (emulation.gdr; docs/plugin.md "GPU memory (GDR)"). The plugin's NICs have no PCI
  // path, so NCCL 2.28.9 attaches them to the first CPU (graph/xml.cc ncclTopoFillNet) and
  // the GPU->NIC path is PHB or SYS; ncclTopoCheckGdr (graph/paths.cc) enables GDR only up
  // to NCCL_NET_GDR_LEVEL (default PXB), so SYS is needed for NCCL to keep NET buffers in
  // GPU memory. NCCL_NET_GDR_READ=1 does the same for send buffers (its default already
  // reads from GPU memory on compute capability >= 8.0). Defaults only: a value in the
  // caller's environment is kept.
  // Set unless GDR is off by config: whether the plugin turns it on also depends on the data
  // policy in effect (CRYSTAL_DATA may override), and without NCCL_PTR_CUDA from the plugin
  // these variables change nothing.
  // A default only: a value in the caller's environment is kept.
  auto byDefault = [&](const char* var, const std::string& value) {
    const char* mine = std::getenv(var);
    env.emplace_back(var, (mine != nullptr && *mine != '\0') ? std::string(mine) : value);
  };
  if (!config.emulation.p2p_peers) {
    // Every channel connects at init, where the host is ready for it (not at the first
    // collective, inside the measured loop).
    env.emplace_back("NCCL_RUNTIME_CONNECT", "0");
  } else {
    // emulation.p2p_peers (docs/research/nccl-2.28.9-p2p-virtual-peers.md §6, §9.5):
    // connections wait for the first collective (runtime connect, NCCL's default), where a
    // P2P channel to a virtual node member is refused until connecting them is built; NET
    // never replaces P2P inside the node; P2P is allowed whatever the PCI distance to the
    // virtual GPUs (cloned under the real GPU's CPU: PHB on a machine without NVLink), and
    // NVML's pair table is not asked about GPUs it does not have; no symmetric windows.
    env.emplace_back("NCCL_NET_DISABLE_INTRA", "1");
    byDefault("NCCL_P2P_LEVEL", "SYS");
    byDefault("NCCL_IGNORE_DISABLED_P2P", "2");
    byDefault("NCCL_WIN_ENABLE", "0");
    // Simple only: LL/LL128 receivers from those GPUs would wait on flags no one writes (a
    // hang, seen on the H200 2026-12-04: a 1 KiB all-gather in LL, a 1 KiB send/recv in
    // LL). A caller's own values are kept; the interposer refuses the comm if they let LL
    // or LL128 run (plugin/p2p_protocol.h).
    byDefault("NCCL_PROTO", "Simple");
    byDefault("NCCL_P2P_LL_THRESHOLD", "0");
    // Memory for those connections, from the real rank's process (plugin/interpose/
    // block_pool.h): 64 recv blocks of 10 MiB and 64 send blocks of 2 MiB per communicator
    // (768 MiB of GPU memory), enough for a ring and a tree on 28 channels of one node; a
    // used-up pool fails the connection with a line that says to raise it.
    byDefault("CRYSTAL_P2P_POOL", "64,64");
    // The node's ring and tree graphs (host/node_graph.h): the interposer points
    // NCCL_GRAPH_FILE at its process's file in this directory, which the host writes.
    env.emplace_back(kEnvGraphDir, graphDir(emulation_id));
  }
  if (config.emulation.gdr.value_or(true)) {
    byDefault("NCCL_NET_GDR_LEVEL", "SYS");
    byDefault("NCCL_NET_GDR_READ", "1");
  }
  // Channels. A real rank alone on its emulated host gets as many channels as NCCL's own
  // graph search finds over crystal's NICs (4 on the H200), the target's ranks the model's
  // commChannels (16 for 8 x 8 H200 GPUs). A channel is one CTA, and one CTA moves ~25 GB/s
  // (measured on the H200: 4 channels carried a 1 GiB all-gather at 95 GB/s), so with its
  // own count the real GPU cannot keep the target's pace however fast the virtual peers
  // are. NCCL_MIN_NCHANNELS makes NCCL 2.28.9 duplicate its channels up to that count
  // (graph/connect.cc ncclTopoPostset, copyChannels); the tuner then gives each collective
  // the target's choice. A value in the caller's environment is kept. Only with
  // emulation.target_channels (the default; config.h). emulation.real_channels asks for more
  // than the target's, for large broadcasts and reduces (the tuner runs them on up to that
  // many, plugin/ring_fold.h); p2p then keeps the target's count, as NCCL would spread
  // send/recv over every channel up to NCCL_MAX_P2P_NCHANNELS.
  if (config.emulation.target_channels) {
    const model::NcclModel m(config.cluster, config.model);
    const int target = m.commChannels(live::blockShape(config.cluster, config.job.world_size));
    // Under p2p_peers a comm of one target node (a split into whole nodes, a one-node world)
    // runs its rings over P2P at the real rank, and its target has more channels than a
    // multi-node comm's (28 against 16 on 8 x 8 H200): with fewer the real GPU cannot keep
    // the node's pace at large sizes (a 1 GiB all-reduce of such a split +33.8 % on 16,
    // +0.2 % on 28; tests/gpu/hybrid/README.md, fifteenth session). NCCL_MIN_NCHANNELS is one
    // number for every comm of the process, so it covers both; the tuner gives each
    // collective its own comm's count (plugin/tuner.h).
    const int gpn = config.cluster.gpus_per_node;
    const int node = config.emulation.p2p_peers && gpn >= 2
                         ? m.commChannels(live::blockShape(
                               config.cluster, std::min(gpn, config.job.world_size)))
                         : 0;
    const int channels = std::max({target, node, config.emulation.real_channels});
    byDefault("NCCL_MIN_NCHANNELS", std::to_string(channels));
    if (channels > target) byDefault("NCCL_MAX_P2P_NCHANNELS", std::to_string(target));
  }
  // emulation.map_comms: the program's k-rank communicators become the target's (the
  // interposer's plugin/interpose/rank_map.h reads "N:r0,r1,...").
  if (config.emulation.map_comms)
    env.emplace_back("CRYSTAL_RANK_MAP", fmt::format("{}:{}", config.job.world_size,
                                                     fmt::join(config.emulation.real_ranks, ",")));
  return env;
}

std::string findPlugin(const std::string& explicit_path) {
  namespace fs = std::filesystem;
  constexpr const char* kName = "libnccl-net-crystal.so";
  std::vector<fs::path> tried;
  auto ok = [&](const fs::path& p) {
    tried.push_back(p);
    std::error_code ec;
    return fs::is_regular_file(p, ec);
  };
  if (!explicit_path.empty()) {
    if (ok(explicit_path)) return fs::absolute(explicit_path).string();
    throw InputError("--plugin " + explicit_path + ": no such file");
  }
  if (const char* env = std::getenv("CRYSTAL_PLUGIN"); env != nullptr && *env != '\0') {
    if (ok(env)) return fs::absolute(env).string();
    throw InputError(std::string("CRYSTAL_PLUGIN=") + env + ": no such file");
  }
  std::error_code ec;
  const fs::path exe_dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
  for (const fs::path& p :
       {exe_dir / ".." / "plugin" / kName, exe_dir / kName, exe_dir / ".." / "lib" / kName})
    if (ok(p)) return fs::canonical(p).string();
  std::string where;
  for (const auto& p : tried) where += " " + p.string();
  throw InputError(std::string("cannot find ") + kName + " (looked at" + where +
                   "); pass --plugin PATH or set CRYSTAL_PLUGIN");
}

}  // namespace crystal::control
