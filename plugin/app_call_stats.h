// What the application's thread spends in NCCL's enqueuing calls and, inside them, in this
// library: the tuner, the profiler's callbacks, the P2P agent's before/after (CUDA event
// records), the interposer's lookups. CRYSTAL_HOST_STATS=1 turns it on; each
// ncclCommDestroy/Abort then prints the destroying thread's counts since the previous line.
//
// Why: the emulated rank spends host time per collective that a target rank does not (a
// 1 MiB broadcast's ~15 us against real NCCL's 7-10 on the H200, 2026-12-04), and a small
// operation is host-bound. These counts say which part is NCCL's and which is ours, in the
// run itself; perf attached to the program mostly sees communicator creation.
//
// Off, a span costs one relaxed load. On, two clock reads (~40 ns). The counts are the
// thread's own (thread_local, plain adds): NCCL calls the tuner and the profiler's API and
// task events on the thread that enqueues, so one thread's record holds one call's parts.
#pragma once

#include <cstdint>
#include <string>

#include "crystal/live/clock.h"

namespace crystal::plugin {

struct AppCallStats {
  // Collectives and p2p calls through the interposer: entry to return, and inside NCCL's.
  std::int64_t calls = 0, call_ns = 0, call_nccl_ns = 0;
  std::int64_t ungrouped = 0;  // of them outside ncclGroupStart/End (each an operation)
  // Outermost ncclGroupEnd (each enqueues the group's operations).
  std::int64_t group_ends = 0, group_end_ns = 0, group_end_nccl_ns = 0;
  std::int64_t pacing_ns = 0;  // the P2P agent's before()/after(), in either of the above
  std::int64_t tuner_calls = 0, tuner_ns = 0;        // getCollInfo (inside NCCL's calls)
  std::int64_t profiler_calls = 0, profiler_ns = 0;  // startEvent/stopEvent on this thread
};

[[nodiscard]] bool appCallStatsOn() noexcept;  // CRYSTAL_HOST_STATS, read once
void setAppCallStatsForTesting(bool on) noexcept;
[[nodiscard]] AppCallStats& appCallStats() noexcept;  // the calling thread's

// Adds the time of a scope to one field of the thread's record (and 1 to a count).
class AppSpan {
 public:
  using Field = std::int64_t AppCallStats::*;
  explicit AppSpan(Field ns, Field count = nullptr) noexcept : on_(appCallStatsOn()) {
    if (!on_) return;
    ns_ = ns;
    count_ = count;
    t0_ = live::nowNs();
  }
  ~AppSpan() {
    if (!on_) return;
    AppCallStats& s = appCallStats();
    s.*ns_ += live::nowNs() - t0_;
    if (count_ != nullptr) ++(s.*count_);
  }
  AppSpan(const AppSpan&) = delete;
  AppSpan& operator=(const AppSpan&) = delete;

 private:
  bool on_;
  Field ns_ = nullptr, count_ = nullptr;
  live::TimeNs t0_ = 0;
};

// The record in words, per operation (ungrouped calls + outermost group ends); empty when
// the thread made no call.
[[nodiscard]] std::string describeAppCallStats(const AppCallStats& s);

// With CRYSTAL_HOST_STATS on: the calling thread's line on stderr and in NCCL's log (INFO),
// then its record starts over.
void logAppCallStats() noexcept;

}  // namespace crystal::plugin
