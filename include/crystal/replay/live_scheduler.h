// Wall-clock-driven side of the engine, for live emulation.
//
// A real rank's operations enter here as they happen ("rank r posted a send of n bytes on
// connection c at wall time t"); each gets a ticket and a modelled release time, and its
// completion leaves not before that time. The plugin's proxy thread calls post()/test()
// while the host thread drains releaseDue()/waitNext(): every public member is
// thread-safe.
//
// Timing of one post on a connection: the connection carries one transfer at a time (it is
// one NIC queue pair / channel), so a transfer starts when it is posted, the link is free,
// and the peer is ready (a virtual peer's readiness comes from the replay); it occupies the
// link for `occupancy_ns` and completes `latency_ns` later. Latency overlaps the next
// transfer's occupancy, as pipelined NCCL steps do.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "crystal/replay/event_queue.h"

namespace crystal::replay {

enum class LiveOpKind : std::uint8_t { Send, Recv };

struct LivePost {
  std::int32_t rank = -1;        // the real rank that posted
  std::uint64_t connection = 0;  // caller's connection id (unique per comm/peer/channel)
  LiveOpKind kind = LiveOpKind::Send;
  std::uint64_t bytes = 0;
  TimeNs posted_ns = 0;      // wall time (on the scheduler's clock) of the post
  TimeNs peer_ready_ns = 0;  // earliest time the peer side is ready (0 = already)
};

// Modelled cost of one post; see the header comment.
struct LiveCost {
  TimeNs occupancy_ns = 0;
  TimeNs latency_ns = 0;
};

struct LiveCompletion {
  std::uint64_t ticket = 0;
  std::int32_t rank = -1;
  std::uint64_t connection = 0;
  TimeNs posted_ns = 0;
  TimeNs release_ns = 0;  // modelled completion; never handed out before the clock reaches it
};

class LiveScheduler {
 public:
  using CostFn = std::function<LiveCost(const LivePost&)>;

  // `clock` must outlive the scheduler. A WallClock makes waitNext() sleep on the wall.
  LiveScheduler(const Clock& clock, CostFn cost);

  // Registers a post and returns its ticket (1, 2, ...). Thread-safe.
  [[nodiscard]] std::uint64_t post(const LivePost& p);
  // True once the clock has reached the ticket's release time. A completed ticket is
  // forgotten after the first true; asking again returns true. Throws std::out_of_range
  // for a ticket never issued.
  [[nodiscard]] bool test(std::uint64_t ticket);
  // Modelled release time of a pending ticket (std::nullopt once completed).
  [[nodiscard]] std::optional<TimeNs> releaseTime(std::uint64_t ticket) const;
  // Every pending completion whose release time has come, in (release time, post) order.
  [[nodiscard]] std::vector<LiveCompletion> releaseDue();
  // Blocks until the next pending completion is due (then returns it) or until `timeout_ns`
  // of clock time pass (then returns nullopt). Needs a WallClock or a clock advanced by
  // another thread; polls at most every millisecond on other clocks.
  [[nodiscard]] std::optional<LiveCompletion> waitNext(TimeNs timeout_ns);
  [[nodiscard]] std::size_t pending() const;

 private:
  [[nodiscard]] std::optional<LiveCompletion> popDueLocked(TimeNs now);

  const Clock& clock_;
  CostFn cost_;
  mutable std::mutex mu_;
  std::condition_variable posted_;
  EventQueue<std::uint64_t> due_;                           // ticket by release time
  std::unordered_map<std::uint64_t, LiveCompletion> live_;  // pending tickets
  std::unordered_map<std::uint64_t, TimeNs> link_free_;     // connection -> busy until
  std::uint64_t next_ticket_ = 1;
};

}  // namespace crystal::replay
