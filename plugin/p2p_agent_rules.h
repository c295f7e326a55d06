// What the P2P agent kernel decides on the GPU by itself (p2p_agent_kernel.cu), shared with
// the CPU stand-ins that test it (tests/plugin: the fake driver's kernel, the pacer's virtual
// clock). Both rules react to R's own counters, which the kernel reads from GPU memory in
// about a microsecond, where a round trip through the CPU costs two PCIe reads of mapped host
// memory (~8 us each on the H200 host, 2026-12-04) and set the pace of small operations.
//
// - Receive slots (a virtual sender V): V may fill a slot only once R emptied it, so R's recv
//   tail is min(what the model released, R's head + NCCL_STEPS). The CPU releases open loop.
// - Send credits (V as receiver): V empties R's slot once the unit crossed R's share of its
//   link: each unit of `unit_steps` counter steps R sends at `now` completes at
//   max(now, previous completion) + `occupancy_ns`, and R's send head moves to its end then.
// - Preludes (p2p_agent_abi.h): a ring operation's receives come a fixed schedule after it
//   starts (the CPU's model says so too, P2pPacer::scheduled), and it starts when R's stream
//   reaches it, which the kernel sees first on the GPU: R took the last operation's receives.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define CRYSTAL_HD __host__ __device__ __forceinline__
#else
#define CRYSTAL_HD inline
#endif

namespace crystal::plugin::p2p_agent {

inline constexpr std::uint64_t kSlotSteps = 8;  // NCCL_STEPS

CRYSTAL_HD std::uint64_t gatedTail(std::uint64_t released, std::uint64_t head) {
  return released < head + kSlotSteps ? released : head + kSlotSteps;
}

// Credits of one send connection not yet due. At most kSlotSteps units are in flight (R
// waits for credit beyond that); more seen at once (a kernel that started late) merge into
// the newest entry.
struct CreditQueue {
  static constexpr unsigned kCap = 8;
  std::uint64_t at[kCap] = {};
  std::uint64_t end[kCap] = {};
  unsigned first = 0, count = 0;
  std::uint64_t free_at = 0;  // R's share of its link is free (a completion time)
  std::uint64_t seen = 0;     // R's send tail, as far as units were queued
};

// R's send tail moved to `tail` by `now`: queue its units.
CRYSTAL_HD void creditsSent(CreditQueue& q, std::uint64_t tail, std::uint64_t now,
                            std::uint64_t occupancy_ns, std::uint32_t unit_steps) {
  const std::uint64_t step = unit_steps > 0 ? unit_steps : 1;
  while (q.seen < tail) {
    const std::uint64_t end = tail - q.seen < step ? tail : q.seen + step;
    q.free_at = (now > q.free_at ? now : q.free_at) + occupancy_ns;
    if (q.count == CreditQueue::kCap) {
      const unsigned last = (q.first + q.count - 1) % CreditQueue::kCap;
      q.at[last] = q.free_at;
      q.end[last] = end;
    } else {
      const unsigned k = (q.first + q.count) % CreditQueue::kCap;
      q.at[k] = q.free_at;
      q.end[k] = end;
      ++q.count;
    }
    q.seen = end;
  }
}

// The newest credit due by `now` (popping it and those before), or 0 when none is.
CRYSTAL_HD std::uint64_t creditsDue(CreditQueue& q, std::uint64_t now) {
  std::uint64_t value = 0;
  while (q.count > 0 && q.at[q.first] <= now) {
    value = q.end[q.first];
    q.first = (q.first + 1) % CreditQueue::kCap;
    --q.count;
  }
  return value;
}

// When the oldest credit is due (UINT64_MAX: none pending).
CRYSTAL_HD std::uint64_t creditsNext(const CreditQueue& q) {
  return q.count > 0 ? q.at[q.first] : ~std::uint64_t{0};
}

inline constexpr std::uint64_t kNoPrelude = ~std::uint64_t{0};  // pre_value: not armed
// Anchors: a GPU timer value, or one of these (the timer is never this small).
inline constexpr std::uint64_t kAnchorPending = 0, kAnchorMissed = 1;

// A receive connection armed with R's count `base` before the operation, R's head at `seen`
// since `changed_at` (`prev` before that change; 0 for the kernel's first look): when the
// operation's schedule starts there. R's stream reached it when R's head reached `base` (its
// last receive of the operation before: a ring's last step receives), no sooner than `start`
// (the program's call); the target's operation runs `delay` (its base cost) before its first
// unit's schedule. With nothing received yet (`base` 0) it starts at `start`. Pending while
// R's head is below `base`; missed if it passed `base` before the last change (R took this
// operation's units before the arm: the CPU's releases start it).
CRYSTAL_HD std::uint64_t anchorOf(std::uint64_t base, std::uint64_t prev, std::uint64_t seen,
                                  std::uint64_t changed_at, std::uint64_t start,
                                  std::uint64_t delay) {
  if (seen < base) return kAnchorPending;
  if (base > 0 && prev >= base) return kAnchorMissed;
  const std::uint64_t reached = base == 0 || changed_at < start ? start : changed_at;
  const std::uint64_t a = reached + delay;
  return a > kAnchorMissed ? a : kAnchorMissed + 1;
}

// A receive connection's prelude once anchored.
struct Prelude {
  std::uint64_t anchor = kAnchorPending;
  std::uint64_t base = 0;  // R's recv count before the operation
  std::uint32_t done = 0;  // units due so far
};

// The receive count the prelude released by `now` (`at`: the units' offsets from the anchor,
// ns; 0 without an anchor). `At` is a pointer or a volatile pointer (the kernel's shared copy).
template <class At>
CRYSTAL_HD std::uint64_t preludeTail(Prelude& p, At at, std::uint32_t units, std::uint32_t steps,
                                     std::uint64_t now) {
  if (p.anchor <= kAnchorMissed) return 0;
  while (p.done < units && p.anchor + at[p.done] <= now) ++p.done;
  return p.base + static_cast<std::uint64_t>(p.done) * steps;
}

// When the prelude's next unit is due (UINT64_MAX: none).
template <class At>
CRYSTAL_HD std::uint64_t preludeNext(const Prelude& p, At at, std::uint32_t units) {
  if (p.anchor <= kAnchorMissed || p.done >= units) return ~std::uint64_t{0};
  return p.anchor + at[p.done];
}

}  // namespace crystal::plugin::p2p_agent

#undef CRYSTAL_HD
