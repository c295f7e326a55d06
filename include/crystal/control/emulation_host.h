// Everything `crystal host` and `crystal emulate` run in-process: the bootstrap stand-in,
// its control-channel adapter and the control server, started from one config. Plus the
// environment that real ranks need (launch_env), so a batch script can set it by hand.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "crystal/config/config.h"
#include "crystal/control/split_rules.h"

namespace crystal::control {

struct EmulationHostOptions {
  std::string listen;                  // control address; "" = config's emulation.host
  std::vector<SplitRule> split_rules;  // --split
};

class EmulationHost {
 public:
  // Starts everything; throws InputError on a bad address or config.
  EmulationHost(const Config& config, EmulationHostOptions options);
  ~EmulationHost();
  EmulationHost(const EmulationHost&) = delete;
  EmulationHost& operator=(const EmulationHost&) = delete;

  [[nodiscard]] std::string controlAddress() const;  // CRYSTAL_HOST
  [[nodiscard]] std::uint64_t emulationId() const;
  [[nodiscard]] std::size_t errorCount() const;  // host errors so far
  // What real processes said made their emulation unfaithful ("pid P: text"; control NOTE).
  [[nodiscard]] std::vector<std::string> notes() const;
  // A fresh ncclUniqueId (128 bytes) whose bootstrap root is this host: what the TCPStore
  // (crystal/store/server.h) writes when a virtual rank is a process group's id root.
  [[nodiscard]] std::string mintUniqueId();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

using EnvList = std::vector<std::pair<std::string, std::string>>;

// The variables `crystal emulate` sets for the real ranks (research note §7.1):
// LD_PRELOAD / LD_LIBRARY_PATH for the interposer and the net plugin, NCCL's switches that
// keep every virtual peer on the NET transport, Simple protocol, CRYSTAL_*.
[[nodiscard]] EnvList launchEnvironment(const Config& config, const std::string& config_path,
                                        const std::string& control_address,
                                        const std::string& plugin_path, std::uint64_t emulation_id);

// libnccl-net-crystal.so: `explicit_path` if given, else $CRYSTAL_PLUGIN, else beside the
// running executable (../plugin/, ./, ../lib/). Throws InputError listing where it looked.
[[nodiscard]] std::string findPlugin(const std::string& explicit_path);

}  // namespace crystal::control
