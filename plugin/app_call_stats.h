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
  // Operations whose host time passed kSetUpNs: NCCL connecting a comm's channels or peers
  // at their first use (tens of ms for an all-to-all's 126 connections). They are left out
  // of every figure above, else one of them outweighs thousands of operations.
  std::int64_t set_up_ops = 0, set_up_ns = 0;
  // The slowest counted operations, slowest first: where an operation's outlier went (the
  // first call after the program waited for its stream took 5-7x the others on an H100,
  // tests/gpu/hybrid/README.md, forty-first session). `index`: the operation's place among
  // the counted ones since the record started, from 0.
  struct Op {
    std::int64_t index = -1, ns = 0, nccl_ns = 0, tuner_ns = 0, profiler_ns = 0, pacing_ns = 0;
  };
  static constexpr int kSlowest = 3;
  Op slowest[kSlowest];
};
inline constexpr std::int64_t kSetUpNs = 1'000'000;

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

// Declared before an operation's outermost span (an ungrouped call, an outermost
// ncclGroupEnd: `boundary`), so that it ends after it: an operation over kSetUpNs moves from
// the record's figures to its set-up count.
class AppOperation {
 public:
  explicit AppOperation(bool boundary) noexcept : on_(boundary && appCallStatsOn()) {}
  ~AppOperation();
  AppOperation(const AppOperation&) = delete;
  AppOperation& operator=(const AppOperation&) = delete;

 private:
  bool on_;
};

// The record in words, per operation (ungrouped calls + outermost group ends); empty when
// the thread made no call.
[[nodiscard]] std::string describeAppCallStats(const AppCallStats& s);

// With CRYSTAL_HOST_STATS on: the calling thread's line on stderr and in NCCL's log (INFO),
// then its record starts over.
void logAppCallStats() noexcept;

}  // namespace crystal::plugin
