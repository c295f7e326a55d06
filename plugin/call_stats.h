// What NCCL's proxy thread spends inside the plugin's data calls (isend, irecv, test) and,
// among them, in CUDA driver calls (GPU-memory writes), per calling thread. Each thread
// counts into its own record (relaxed loads and stores: plain moves, no locked adds); a
// close logs every thread's counts since the previous log (logThreadCallStats).
//
// Why: NCCL's proxy serves every connection of a rank in turn, one step per connection per
// round, so the time a round takes sets the pace of LL/LL128 rings (the GPU waits for the
// next receive's flags). The per-request trace shows receives tested late (`proxy_late`);
// these counts say whether the plugin or NCCL spent that time.
#pragma once

#include <atomic>
#include <cstdint>

#include "crystal/live/clock.h"

namespace crystal::plugin {

// A counter written by one thread and read by another.
class RelaxedCounter {
 public:
  void add(std::int64_t v) noexcept {
    n_.store(n_.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
  }
  [[nodiscard]] std::int64_t get() const noexcept { return n_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::int64_t> n_{0};
};

struct ThreadCallStats {
  RelaxedCounter calls;       // isend + irecv + test
  RelaxedCounter inside_ns;   // their summed duration
  RelaxedCounter active_ns;   // exit to exit of consecutive calls less than kIdleNs apart
  RelaxedCounter cuda_calls;  // CUDA driver calls made inside them (DeviceQueue)
  RelaxedCounter cuda_ns;
  live::TimeNs last_exit = 0;  // the owning thread's only
  // A gap this long between two calls is NCCL's proxy idle (no operation), not a round.
  static constexpr live::TimeNs kIdleNs = 1'000'000;
};

// The calling thread's record (created and registered on first use, kept for the process).
[[nodiscard]] ThreadCallStats& threadCallStats();

// Times one data call: construct at entry with the time the call reads anyway.
class DataCallTimer {
 public:
  explicit DataCallTimer(live::TimeNs entry) : s_(threadCallStats()), entry_(entry) {}
  ~DataCallTimer() {
    const live::TimeNs exit = live::nowNs();
    s_.calls.add(1);
    s_.inside_ns.add(exit - entry_);
    if (s_.last_exit > 0 && entry_ - s_.last_exit < ThreadCallStats::kIdleNs)
      s_.active_ns.add(exit - s_.last_exit);
    else
      s_.active_ns.add(exit - entry_);
    s_.last_exit = exit;
  }
  DataCallTimer(const DataCallTimer&) = delete;
  DataCallTimer& operator=(const DataCallTimer&) = delete;

 private:
  ThreadCallStats& s_;
  live::TimeNs entry_;
};

// Times one CUDA driver call.
class CudaCallTimer {
 public:
  CudaCallTimer() : s_(threadCallStats()), entry_(live::nowNs()) {}
  ~CudaCallTimer() {
    s_.cuda_calls.add(1);
    s_.cuda_ns.add(live::nowNs() - entry_);
  }
  CudaCallTimer(const CudaCallTimer&) = delete;
  CudaCallTimer& operator=(const CudaCallTimer&) = delete;

 private:
  ThreadCallStats& s_;
  live::TimeNs entry_;
};

// One INFO line per thread with its counts since the previous log, if it made at least
// `min_calls` data calls since (a bulk close logs once).
void logThreadCallStats(std::int64_t min_calls = 1000);

}  // namespace crystal::plugin
