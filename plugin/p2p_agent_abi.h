// The table between the P2P pacer (CPU, p2p_agent.cc) and its agent kernel (GPU,
// p2p_agent_kernel.cu). It lies in pinned, device-mapped host memory; per-connection fields
// are arrays so that a warp reads 32 connections' words in one or two PCIe transactions.
//
// The kernel stands in for the virtual GPUs on the real GPU, per connection i:
// - seen[i] = *watch[i]: how far the real rank's NCCL kernel moved the counter it writes into
//   the virtual side's block (V's recv tail: R sent; V's send head: R emptied a slot).
// - A send connection (kind 1): each slice R sends (slice_steps[i] steps of the tail, seen at
//   GPU time t) is consumed by V at max(t, the previous slice's) + occ_ns[i]: the kernel
//   stores the slice's end into R's head (*target[i]) then. The CPU sets occ_ns and
//   slice_steps per operation (the model's occupancy of a slice on R's link).
// - A receive connection (kind 2): the CPU writes entries {due (GPU ns), value, seq} into
//   sched[i] (a ring of kDepth; seq = k + 1 says slot k % kDepth holds entry k, so the kernel
//   needs one PCIe read to find it); the kernel stores value into R's tail (*target[i]) once
//   due passed and R's head (seen) is within NCCL_STEPS of value (the slot is free), then
//   counts sched_read[i]. sched_write[i] is the CPU's own count.
// - release[i] (CPU): a floor the kernel stores whenever it exceeds what it stored (the
//   free-running fallback: 1 << 62).
// gpu_ns: the kernel's clock (globaltimer), so the CPU can convert its model's times.
//
// Lifetime (the flag writer's protocol, flag_ring.h): the kernel runs while `want` is 1.
// Seeing 0 it sets state = kExiting, fences, and looks again; still 0 -> it returns. The CPU
// sets want = 1, fences, then reads state: not kRunning -> it sets kRunning and launches a
// kernel (stream-ordered after one that is still leaving). The CPU fills a connection's
// watch, target and kind before it raises `n` past it.
#pragma once

#include <cstdint>

namespace crystal::plugin::p2p_agent {

inline constexpr std::uint32_t kMaxConns = 256;  // 64 channels x 2 sides x 2 graphs
inline constexpr std::uint32_t kThreads = 256;   // one per connection
inline constexpr std::uint32_t kDepth = 32;      // receive entries in flight per connection
inline constexpr std::uint32_t kRunning = 1, kExiting = 2;
inline constexpr std::uint64_t kSend = 1, kRecv = 2;

struct Entry {  // written due, value, then seq
  std::uint64_t due;  // GPU ns
  std::uint64_t value;
  std::uint64_t seq;  // k + 1 for the k-th entry of the connection: the slot holds it
  std::uint64_t pad;
};

struct Table {
  std::uint32_t want;   // CPU: 1 = keep running
  std::uint32_t state;  // kRunning / kExiting (0 before the first launch)
  std::uint32_t n;      // connections in use
  std::uint32_t pad0;
  std::uint64_t starts;  // kernels that started (diagnostics)
  std::uint64_t gpu_ns;  // the kernel's globaltimer, each pass
  std::uint64_t passes;  // passes of all kernels (diagnostics)
  std::uint64_t pad[3];
  std::uint64_t watch[kMaxConns];   // device addresses (CPU, before n)
  std::uint64_t target[kMaxConns];  // device addresses (CPU, before n)
  std::uint64_t kind[kMaxConns];    // kSend / kRecv (CPU, before n)
  std::uint64_t slice_steps[kMaxConns];  // send: steps per slice (CPU, per operation)
  std::uint64_t occ_ns[kMaxConns];       // send: V's occupancy per slice (CPU, per operation)
  std::uint64_t release[kMaxConns];      // CPU: floor to store
  std::uint64_t sched_write[kMaxConns];  // recv: entries written (CPU)
  std::uint64_t seen[kMaxConns];         // GPU
  std::uint64_t sched_read[kMaxConns];   // recv: entries stored (GPU)
  Entry sched[kMaxConns][kDepth];        // recv (CPU)
};
static_assert(sizeof(Table) == 64 + 9 * 8 * kMaxConns + 32 * kDepth * kMaxConns);

}  // namespace crystal::plugin::p2p_agent
