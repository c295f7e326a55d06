// The table between the P2P pacer (CPU, p2p_agent.cc) and its agent kernel (GPU,
// p2p_agent_kernel.cu). It lies in pinned, device-mapped host memory.
//
// Per connection the kernel copies `watch` (a counter in a pool block that the real rank's
// NCCL kernel moves: V's recv tail for a send connection, V's send head for a receive one) to
// `seen`, and moves `target` (R's own send head or recv tail) by the rules of
// p2p_agent_rules.h: a receive's to min(`release`, head + NCCL_STEPS), where the CPU releases
// by the model; a send's credits itself, `occupancy` ns after each unit of `unit_steps`
// steps R sent. The CPU fills a connection's `watch`, `target` and `kind` before it raises
// `n` past it, and sets `occupancy` and `unit_steps` per operation.
//
// Threads: one per connection (`kThreads`) loop on GPU memory only (R's counters, the
// global timer, shared memory); one more warp (`kReaderThreads`) copies the table's words the
// CPU writes (`release`, `occupancy`, `unit_steps`, `n`, `want`) into shared memory, so a
// PCIe read of mapped host memory (~8 us on the H200 host) delays only the CPU's releases,
// never the kernel's reaction to R.
//
// Lifetime (the GPU writer's protocol, gpu_writer_ring.h): the kernel runs while `want` is 1.
// Seeing 0 it sets state = kExiting, fences, and looks again; still 0 -> it returns. The CPU
// sets want = 1, fences, then reads state: not kRunning -> it sets kRunning and launches a
// kernel (stream-ordered after one that is still leaving).
//
// Preludes (p2p_agent_rules.h): the first `pre_units` receives of an operation R's stream has
// not reached yet, which the kernel releases by itself, so a short operation does not start
// with a round trip through the CPU (an 8-rank ring's 40 us all-gather lost 5-15 us to it).
// The CPU fills `pre_at`, `pre_units`, `pre_steps`, `pre_start`, `pre_delay` and every
// connection's `pre_value`, then raises `pre_seq`; the reader warp copies them once per new
// `pre_seq` (into one of two buffers by its parity: the last operation's prelude may still run).
// An armed receive's thread watches R's head reach `pre_value` (R's count before the
// operation: it took the last one's receives, its stream reached this one), no sooner than
// `pre_start`, and anchors the operation `pre_delay` later (the model's per-operation base):
// it publishes that (`anchor_at`, for the CPU too) and releases unit k at anchor + pre_at[k],
// its counter at pre_value + (k + 1) * pre_steps, within R's slots.
//
// Times (the GPU's global timer, ns): the kernel stamps when it saw each `seen` value
// (seen_at, written before the value) and, every pass, the timer itself (gpu_now), so the CPU
// can map them onto its clock and give the model R's moves when they happened, not when its
// pass saw them. With `trace` 1 when a kernel starts (CRYSTAL_P2P_TRACE, p2p_trace.h) it also
// stamps the value it last stored at `target` and when (stored, stored_at).
#pragma once

#include <cstdint>

namespace crystal::plugin::p2p_agent {

inline constexpr std::uint32_t kMaxConns = 256;  // 64 channels x 2 sides x 2 graphs
inline constexpr std::uint32_t kThreads = 256;   // one per connection
inline constexpr std::uint32_t kReaderThreads = 32;
inline constexpr std::uint32_t kRunning = 1, kExiting = 2;
inline constexpr std::uint32_t kPreUnits = 32;  // a prelude's units at most (one reader lane each)

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
  std::uint64_t gpu_now;  // the global timer, every pass
  std::uint64_t passes;   // passes of the kernels so far (diagnostics)
  std::uint64_t pad[2];
  std::uint64_t watch[kMaxConns];    // device address (read by the kernel)
  std::uint64_t target[kMaxConns];   // device address (written by the kernel)
  std::uint64_t seen[kMaxConns];     // kernel -> CPU
  std::uint64_t release[kMaxConns];  // CPU -> kernel, receives (0: nothing to store yet)
  std::uint64_t seen_at[kMaxConns];  // kernel -> CPU: when it saw `seen` (global timer ns)
  // Trace only (kernel -> CPU, global timer ns).
  std::uint64_t stored[kMaxConns];
  std::uint64_t stored_at[kMaxConns];
  std::uint64_t occupancy[kMaxConns];  // CPU -> kernel, sends: ns per unit (0: at once)
  std::uint32_t unit_steps[kMaxConns];  // CPU -> kernel, sends: counter steps per unit
  std::uint32_t kind[kMaxConns];        // CPU -> kernel: 1 send, 0 receive
  // Preludes (above). CPU -> kernel but anchor_*.
  std::uint32_t pre_seq;    // raised once the rest is written (0: none yet)
  std::uint32_t pre_units;  // units in pre_at
  std::uint32_t pre_steps;  // counter steps a unit
  std::uint32_t pad2;
  std::uint64_t pre_start;  // global timer: the operation starts no sooner (0: any time)
  std::uint64_t pre_delay;  // ns from its stream reaching it to its first unit's schedule
  std::uint64_t pre_at[kPreUnits];      // unit k due this long (ns) after the anchor
  std::uint64_t pre_value[kMaxConns];   // receive: R's count before it (kNoPrelude: not armed)
  std::uint64_t anchor_at[kMaxConns];   // kernel -> CPU: the anchor (rules: kAnchorMissed)
  std::uint32_t anchor_seq[kMaxConns];  // kernel -> CPU: the pre_seq of anchor_at
};
static_assert(sizeof(Table) == 64 + 8 * 8 * kMaxConns + 2 * 4 * kMaxConns + 32 + 8 * kPreUnits +
                                   2 * 8 * kMaxConns + 4 * kMaxConns);

}  // namespace crystal::plugin::p2p_agent
