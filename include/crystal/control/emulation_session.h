// One emulation as `crystal emulate` and `crystal host` both run it: the emulation host
// (bootstrap stand-in + control server), the TCPStore that plays PyTorch's virtual ranks,
// and the environment every real rank needs (NCCL side: launchEnvironment; PyTorch side:
// store::storeEnvironment; record side: the NCCL profiler pointed at the plugin). The two
// commands differ only in what they do with it: run the ranks, or print `export` lines.
#pragma once

#include <memory>
#include <string>

#include "crystal/config/config.h"
#include "crystal/control/emulation_host.h"
#include "crystal/store/launch.h"
#include "crystal/store/server.h"

namespace crystal::control {

struct EmulationSessionOptions {
  EmulationHostOptions host;  // --listen, --split
  // libnccl-net-crystal.so; "" leaves LD_PRELOAD/LD_LIBRARY_PATH and the profiler out (a
  // `crystal host` that could not find it still serves).
  std::string plugin_path;
  std::string store_listen;    // "" = the control address's IP, any port
  double store_timeout_s = 0;  // <= 0: emulation.timeout_s of the config
  int local_gpus = 0;          // <= 0: CUDA_VISIBLE_DEVICES, else the driver's count, else 1
  // Directory for the NCCL profiler's record files (NCCL_PROFILER_PLUGIN = the plugin,
  // CRYSTAL_RECORD = this dir); "" = no recording. A CRYSTAL_RECORD already in the caller's
  // environment wins (`crystal record -- crystal emulate ...`): see recordDir().
  std::string record_dir;
};

class EmulationSession {
 public:
  // Starts the host and the store; throws InputError on a bad address, config or option.
  EmulationSession(const Config& config, const std::string& config_path,
                   EmulationSessionOptions options);
  ~EmulationSession();
  EmulationSession(const EmulationSession&) = delete;
  EmulationSession& operator=(const EmulationSession&) = delete;

  [[nodiscard]] EmulationHost& host();
  [[nodiscard]] store::StoreServer& store();
  // What store::planLaunch needs (world, real ranks, GPUs, the store's address).
  [[nodiscard]] const store::LaunchInputs& launchInputs() const;
  // Every real rank's variables but the per-process ones (RANK, LOCAL_RANK, ...):
  // launchEnvironment, the profiler's, then storeEnvironment.
  [[nodiscard]] EnvList environment() const;
  // Where record files go ("" = not recording): CRYSTAL_RECORD of the caller if set.
  [[nodiscard]] const std::string& recordDir() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace crystal::control
