// The table between the P2P pacer (CPU, p2p_agent.cc) and its agent kernel (GPU,
// p2p_agent_kernel.cu). It lies in pinned, device-mapped host memory.
//
// Per connection the kernel copies `watch` (a counter in a pool block that the real rank's
// NCCL kernel moves: V's recv tail, V's send head) to `seen`, and stores `release` at
// `target` (the real rank's own send head or recv tail) whenever the CPU changes it. The
// CPU fills a connection's `watch` and `target` before it raises `n` past it.
//
// Lifetime (the flag writer's protocol, flag_ring.h): the kernel runs while `want` is 1.
// Seeing 0 it sets state = kExiting, fences, and looks again; still 0 -> it returns. The CPU
// sets want = 1, fences, then reads state: not kRunning -> it sets kRunning and launches a
// kernel (stream-ordered after one that is still leaving).
//
// Trace (CRYSTAL_P2P_TRACE, p2p_trace.h): with `trace` 1 when a kernel starts, it also stamps
// what it does with the GPU's global timer: when it saw each `seen` value (seen_at), the
// value it last stored at `target` and when (stored, stored_at), and, every pass, the timer
// itself (gpu_now) so the CPU can map GPU times onto its clock.
#pragma once

#include <cstdint>

namespace crystal::plugin::p2p_agent {

inline constexpr std::uint32_t kMaxConns = 256;  // 64 channels x 2 sides x 2 graphs
inline constexpr std::uint32_t kThreads = 256;   // one per connection
inline constexpr std::uint32_t kRunning = 1, kExiting = 2;

// One array per field (a connection is an index): a warp's 32 `release` words are one
// 256-byte read over PCIe, and the CPU's scan of `seen` touches n / 8 cache lines.
struct Table {
  std::uint32_t want;   // CPU: 1 = keep running
  std::uint32_t state;  // kRunning / kExiting (0 before the first launch)
  std::uint32_t n;      // connections in use
  std::uint32_t pad0;
  std::uint64_t starts;  // kernels that started (diagnostics)
  std::uint32_t trace;   // CPU: 1 = stamp times (read once per kernel start)
  std::uint32_t pad1;
  std::uint64_t gpu_now;  // trace: the global timer, every pass
  std::uint64_t passes;   // passes of the kernels so far (diagnostics)
  std::uint64_t pad[2];
  std::uint64_t watch[kMaxConns];    // device address (read by the kernel)
  std::uint64_t target[kMaxConns];   // device address (written by the kernel)
  std::uint64_t seen[kMaxConns];     // kernel -> CPU
  std::uint64_t release[kMaxConns];  // CPU -> kernel (0: nothing to store yet)
  // Trace only (kernel -> CPU, global timer ns).
  std::uint64_t seen_at[kMaxConns];
  std::uint64_t stored[kMaxConns];
  std::uint64_t stored_at[kMaxConns];
};
static_assert(sizeof(Table) == 64 + 7 * 8 * kMaxConns);

}  // namespace crystal::plugin::p2p_agent
