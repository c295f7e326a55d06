// Deterministic discrete-event queue and the two clocks the engine runs on.
//
// Events are ordered by (time, sequence number): two events at the same time pop in the
// order they were pushed, so a replay gives the same answer on every machine and run.
// A binary heap keeps push/pop at O(log n) (a sorted linked list is O(n) per insertion,
// which is what makes large replays crawl).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <utility>
#include <vector>

namespace crystal::replay {

// Engine time: nanoseconds (config.h fixes the units).
using TimeNs = std::int64_t;

[[nodiscard]] inline TimeNs usToNs(double us) {
  return static_cast<TimeNs>(us * 1000.0 + (us >= 0 ? 0.5 : -0.5));
}
[[nodiscard]] inline double nsToUs(TimeNs ns) { return static_cast<double>(ns) / 1000.0; }

template <typename Payload>
class EventQueue {
 public:
  struct Entry {
    TimeNs time = 0;
    std::uint64_t seq = 0;
    Payload payload{};
  };

  void push(TimeNs time, Payload payload) {
    heap_.push_back(Entry{time, next_seq_++, std::move(payload)});
    std::push_heap(heap_.begin(), heap_.end(), later);
  }
  [[nodiscard]] bool empty() const { return heap_.empty(); }
  [[nodiscard]] std::size_t size() const { return heap_.size(); }
  // Time of the next event; the queue must not be empty.
  [[nodiscard]] TimeNs nextTime() const { return heap_.front().time; }
  [[nodiscard]] const Entry& top() const { return heap_.front(); }
  // Removes and returns the earliest event; the queue must not be empty.
  Entry pop() {
    std::pop_heap(heap_.begin(), heap_.end(), later);
    Entry e = std::move(heap_.back());
    heap_.pop_back();
    return e;
  }
  // Events pushed since construction (the engine's events/s counter).
  [[nodiscard]] std::uint64_t pushed() const { return next_seq_; }

 private:
  // std heap functions build a max-heap; "later" as less-than puts the earliest on top.
  static bool later(const Entry& a, const Entry& b) {
    return a.time != b.time ? a.time > b.time : a.seq > b.seq;
  }
  std::vector<Entry> heap_;
  std::uint64_t next_seq_ = 0;
};

// A source of "now" for the live side. Simulation never reads a clock: its time is the
// event queue's. Live emulation reads the wall clock; tests drive a ManualClock.
class Clock {
 public:
  virtual ~Clock() = default;
  [[nodiscard]] virtual TimeNs now() const = 0;
};

// Wall-clock time since construction (steady, monotonic).
class WallClock final : public Clock {
 public:
  WallClock() : epoch_(std::chrono::steady_clock::now()) {}
  [[nodiscard]] TimeNs now() const override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                                epoch_)
        .count();
  }
  // Wall-clock instant of engine time `t`, for timed waits.
  [[nodiscard]] std::chrono::steady_clock::time_point at(TimeNs t) const {
    return epoch_ + std::chrono::nanoseconds(t);
  }

 private:
  std::chrono::steady_clock::time_point epoch_;
};

// A clock that only moves when told to; never backwards.
class ManualClock final : public Clock {
 public:
  [[nodiscard]] TimeNs now() const override { return now_.load(std::memory_order_acquire); }
  void advanceTo(TimeNs t) {
    if (t < now()) throw std::logic_error("ManualClock: time cannot go backwards");
    now_.store(t, std::memory_order_release);
  }

 private:
  std::atomic<TimeNs> now_{0};  // read by the live side's threads
};

}  // namespace crystal::replay
