// NCCL 2.28.9's connection buffers at their defaults (NCCL_BUFFSIZE etc. unset): the data
// bytes of one of a connection's NCCL_STEPS = 8 slots per protocol. init.cc
// DEFAULT_LL_BUFFSIZE = 8 lines/thread x 512 threads x 8 steps x 16 B (half of a line is
// flags), DEFAULT_LL128_BUFFSIZE = 120 elems x 640 threads x 8 steps x 8 B (15 of 16 words
// carry data), DEFAULT_BUFFSIZE 4 MiB. Read by the live timing (tree chunks) and the
// tuner's ring folding, which must not depend on replay/model (it may be left out).
#pragma once

#include <cstdint>

namespace crystal::live {

// The P2P transport's blocks (transport/p2p.cc, write mode, buffers at their defaults): the
// receiver's ncclRecvMem (4096) + LL 524,288 + LL128 4,915,200 + SIMPLE 4,194,304 and the
// sender's ncclSendMem (4096), each rounded up to CUDA_IPC_MIN (2 MiB). The emulation host
// names blocks of these sizes for virtual node members (docs/host.md).
inline constexpr std::uint64_t kP2pRecvBlockBytes = 10485760;
inline constexpr std::uint64_t kP2pSendBlockBytes = 2097152;

inline constexpr double kSlotDataBytes[3] = {  // model::Proto order: LL, LL128, Simple
    8.0 * 512 * 8 * 16 / 8 / 2, 120.0 * 640 * 8 * 8 / 8 / 16 * 15, 4.0 * 1024 * 1024 / 8};

}  // namespace crystal::live
