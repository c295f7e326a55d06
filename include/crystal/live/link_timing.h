// Timed completions of NET transfers of a real rank (the plugin's virtual and real comms).
//
// Model (docs/plugin.md "Timing model"):
//   * A NIC port is a queue per direction: a transfer starts when it is posted and the port
//     is free, occupies it for bytes / bandwidth, and is delivered `latency` later. Latency
//     overlaps the next transfer's occupancy (pipelined steps), as in LiveScheduler.
//   * Send to a virtual peer: done at delivery on the target (start + occupancy + latency).
//   * Receive from a virtual peer: by symmetry of a ring, the virtual neighbour posts its
//     step k on a channel when the real rank posts its own step k on the paired send
//     connection (the k-th virtual send comm of the same communicator pairs with the k-th
//     virtual recv comm). Arrival = max(that time, receive posted, inbound port free)
//     + occupancy + latency. Without a paired send connection the receive is timed from its
//     own post (the peer is assumed ready).
// Limits: symmetry holds for rings/trees of identical ranks; a virtual peer that is slower
// (e.g. a straggler in the graph) needs the host's replay, which will feed StepLog instead.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>

#include "crystal/live/clock.h"

namespace crystal::live {

// Per-connection link parameters of the target (from NcclModel::netStep).
struct LinkParams {
  TimeNs latency_ns = 0;
  double ns_per_byte = 0;  // 1 / bandwidth
  [[nodiscard]] TimeNs occupancy(std::uint64_t bytes) const noexcept {
    return static_cast<TimeNs>(static_cast<double>(bytes) * ns_per_byte + 0.5);
  }
};

// One direction of one NIC port; shared by every connection on that device.
class PortQueue {
 public:
  // Reserves the port for `bytes` from max(ready, free); returns the end of occupancy.
  [[nodiscard]] TimeNs reserve(TimeNs ready, TimeNs occupancy) noexcept;
  [[nodiscard]] TimeNs freeAt() const noexcept;

 private:
  mutable std::mutex mu_;
  TimeNs free_at_ = 0;
};

// Post times of a send connection's steps, read by the paired receive (symmetry). Steps
// older than kKeep are forgotten; a receive that old is timed from its own post.
class StepLog {
 public:
  static constexpr std::size_t kKeep = 4096;
  void record(TimeNs posted);
  // Post time of step `step` (0-based) if it was posted and is still kept.
  [[nodiscard]] std::optional<TimeNs> at(std::uint64_t step) const;
  [[nodiscard]] std::uint64_t count() const;
  // Post time of the newest step, if any.
  [[nodiscard]] std::optional<TimeNs> last() const;

 private:
  mutable std::mutex mu_;
  std::deque<TimeNs> times_;
  std::uint64_t first_ = 0;  // step number of times_.front()
};

// Times the steps of one connection to/from a virtual peer.
class VirtualLink {
 public:
  VirtualLink(LinkParams params, std::shared_ptr<PortQueue> port)
      : params_(params), port_(std::move(port)) {}

  // Send step posted at `now`: returns its delivery time and logs the step for the pair.
  [[nodiscard]] TimeNs postSend(TimeNs now, std::uint64_t bytes);
  // Receive step: returns its arrival time once known, std::nullopt while it is not.
  // `step` is the receive's 0-based sequence number on this connection, `now` the caller's
  // clock. The pairing of send and receive connections is a guess (creation order: NCCL
  // also connects tree and PAT peers whose receives precede their sends). NCCL posts
  // receives up to 8 steps ahead, so a ring's receive k legitimately waits for send k while
  // the real rank keeps sending k-8..k-1. The paired sender is therefore waited for while
  // it makes progress; once the step would have arrived from a ready peer AND the sender
  // has posted nothing for kStallSteps step times (+ kStallSlackNs), the pairing is taken
  // to be wrong (a receive the real rank's next send depends on) and the receive is timed
  // from its own post: a wrong pairing costs accuracy, never a hang.
  static constexpr int kStallSteps = 4;
  static constexpr TimeNs kStallSlackNs = 200'000;
  [[nodiscard]] std::optional<TimeNs> recvArrival(std::uint64_t step, TimeNs posted,
                                                  std::uint64_t bytes, TimeNs now);
  void pairWith(std::shared_ptr<StepLog> sender_log) { pair_ = std::move(sender_log); }
  [[nodiscard]] const std::shared_ptr<StepLog>& log() const { return log_; }
  [[nodiscard]] const LinkParams& params() const { return params_; }

 private:
  LinkParams params_;
  std::shared_ptr<PortQueue> port_;
  std::shared_ptr<StepLog> log_ = std::make_shared<StepLog>();
  std::shared_ptr<StepLog> pair_;
};

}  // namespace crystal::live
