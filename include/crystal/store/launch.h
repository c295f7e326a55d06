// How `crystal emulate CONFIG -- CMD...` starts the real ranks of a PyTorch job: which
// processes, with which argv and environment (docs/store.md §Launch).
//
//   -- python[3] train.py ...   one `python train.py ...` per real rank
//   -- torchrun [opts] train.py ...
//                               torchrun is bypassed: one `python -u train.py ...` per real
//                               rank with the environment torchrun's agent would give that
//                               worker (its rendezvous needs every node's agent alive; the
//                               virtual nodes have none)
//   -- anything else            started once (a launcher of its own), store variables set
//
// Every real rank is a TCPStore client of the emulation's store: MASTER_ADDR/MASTER_PORT
// point at it and TORCHELASTIC_USE_AGENT_STORE=True keeps rank 0 from starting a server.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace crystal::store {

using Env = std::vector<std::pair<std::string, std::string>>;

enum class LaunchKind { Python, Torchrun, Other };

struct RankProcess {
  int rank = -1;  // global rank; -1 for an Other command (it starts its ranks itself)
  std::vector<std::string> argv;
  Env env;  // set on top of the inherited environment
};

struct LaunchPlan {
  LaunchKind kind = LaunchKind::Other;
  std::vector<RankProcess> processes;
  std::vector<std::string> notes;  // what was decided, for the user (one line each)
};

struct LaunchInputs {
  int world_size = 0;           // job.world_size of CONFIG (= WORLD_SIZE)
  std::vector<int> real_ranks;  // emulation.real_ranks of CONFIG
  int gpus_per_node = 8;        // target node size (LOCAL_WORLD_SIZE under torchrun)
  int local_gpus = 1;           // GPUs of this machine: LOCAL_RANK = index % local_gpus
  std::string master_addr;      // the store
  std::uint16_t master_port = 0;
  int ranks_per_root = 0;  // TORCH_NCCL_RANKS_PER_ROOT given to the ranks
  // Reads the launcher's environment (getenv by default); tests pass their own.
  std::function<std::optional<std::string>(const std::string&)> getenv;
};

// Throws InputError for a torchrun option it does not know or a missing script.
[[nodiscard]] LaunchPlan planLaunch(const std::vector<std::string>& cmd, const LaunchInputs& in);

// The PyTorch-side variables every real rank gets (the NCCL side comes from
// control::launchEnvironment): MASTER_ADDR/PORT = the store, WORLD_SIZE,
// TORCHELASTIC_USE_AGENT_STORE=True, TORCH_NCCL_RANKS_PER_ROOT, and PyTorch defaults that
// would reach virtual ranks switched off unless the launcher's environment sets them.
// No RANK/LOCAL_RANK: those differ per process.
[[nodiscard]] Env storeEnvironment(const LaunchInputs& in);

// TORCH_NCCL_RANKS_PER_ROOT for the ranks: the user's value if set (validated), else the
// world size, so every communicator has one id root (the emulation host).
[[nodiscard]] int ranksPerRoot(const LaunchInputs& in);

// GPUs visible here: CUDA_VISIBLE_DEVICES entries if set, else the driver's GPU count
// (/proc/driver/nvidia/gpus), else 1.
[[nodiscard]] int localGpuCount(
    const std::function<std::optional<std::string>(const std::string&)>& getenv);

}  // namespace crystal::store
