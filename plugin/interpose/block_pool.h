// CRYSTAL_P2P_POOL (emulation.p2p_peers): after this process's ncclCommInitRank* created a
// communicator, allocate zeroed device memory for the P2P connections NCCL will make to the
// virtual GPUs of its node, and offer it to the emulation host (control/protocol.h BlockPool).
// The host names these blocks, owned by this rank, in the connect entries it answers for those
// GPUs, so NCCL's kernels write into them as into a peer's buffers (docs/host.md "Virtual
// GPUs of a real rank's node", research note §11.7). The virtual side's Simple counters are
// moved by the pacing agent (plugin/p2p_agent.h) or stored free-running.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace crystal::interpose {

inline constexpr const char* kEnvP2pPool = "CRYSTAL_P2P_POOL";  // "RECV,SEND" blocks per comm

struct PoolSize {
  int recv = 0, send = 0;
};
// CRYSTAL_P2P_POOL parsed: "R,S" with 0 <= R, S and R + S <= control::kMaxPoolBlocks; nullopt
// when unset or empty. Throws InputError naming the variable otherwise.
[[nodiscard]] std::optional<PoolSize> poolSizeFromEnv();

// Allocates and offers the pool of (comm_hash, rank) when CRYSTAL_P2P_POOL asks for one, on the
// CUDA context current in the calling thread (the one that created the communicator). Returns
// an NCCL code; errors print one line. An environment that lets LL or LL128 run
// (plugin/p2p_protocol.h) fails it with ncclInvalidUsage before anything is allocated.
[[nodiscard]] int offerBlockPool(std::uint64_t comm_hash, int rank, int nranks,
                                 const char* caller) noexcept;

}  // namespace crystal::interpose
