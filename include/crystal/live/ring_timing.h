// Timing of one ring channel of a real rank whose ring neighbours are virtual.
//
// The model (replay/model closed_form.h, pipeline.h) runs a ring collective as units (one
// NCCL slice = one isend/irecv of the proxy): member x sends unit u to x+1 once its link is
// free and, from the second step of a loop on, once unit u-s (s = slices per step) from x-1
// has arrived. Every node holds the same ring positions (period p = members per node), so the
// ring is p classes repeated; the last position of a node sends over the NET, the others over
// NVLink. The real rank is one position q. Its receive of unit u comes from position q-1,
// which by periodicity behaves like the virtual position q+p-1 of the chain
//   real (q) -> q+1 -> ... -> q+p-1 -> real,
// so RingChannel runs the model's recurrence for the p-1 virtual positions of that chain,
// driven by the real rank's own sends (their post and delivery times), lazily when a receive
// needs it. With p = 1 (one member per node, or a single node) the previous member is a copy
// of the real rank: it sends unit u when the real rank does.
//
// The virtual members start an operation no earlier than the real rank's proxy does: an
// irecv posted on an idle receive connection marks the start of an operation, a lower
// bound for every virtual send of it.
//
// No hang: a receive whose unit the real rank has not sent yet waits (a ring's receive k
// never precedes the real rank's send k in NCCL's order), unless the real rank posted
// nothing for kStallSteps step times + kStallSlackNs: then the pairing cannot be a ring's
// (e.g. a chain broadcast, where the send depends on the receive) and the receive is timed
// from its own post, the previous member taken as ready.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "crystal/live/link_timing.h"

namespace crystal::live {

// One link a ring member sends over. A channel gets an equal share of it while `busy`
// channels of the ring are in an operation, never more than `one_ns_per_byte` allows (one
// channel drives one NIC): the model's per-channel bandwidth min(link / channels, cap).
// A ring the real NCCL built with fewer channels (`connected`) than the link has ports
// (`ports`, the NICs) lets each channel stand for ports / connected of them: the target's
// NCCL would have used more channels, and the link, not one port, is what it has.
struct RingHop {
  TimeNs latency_ns = 0;
  double link_ns_per_byte = 0;  // whole link (NVLink of a GPU, the NICs a node's members drive)
  double one_ns_per_byte = 0;   // one channel's cap (a NIC port), 0 = none
  int ports = 1;                // ports the link is made of
  [[nodiscard]] TimeNs occupancy(std::uint64_t bytes, int busy, int connected = 0) const noexcept {
    const double stand_for =
        connected > 0 ? std::max(1.0, static_cast<double>(ports) / connected) : 1.0;
    const double per_byte =
        std::max(link_ns_per_byte * std::max(1, busy), one_ns_per_byte / stand_for);
    return static_cast<TimeNs>(static_cast<double>(bytes) * per_byte + 0.5);
  }
};

class RingChannel {
 public:
  static constexpr int kStallSteps = 4;
  static constexpr TimeNs kStallSlackNs = 200'000;
  static constexpr std::uint64_t kWindow = 1024;  // units kept per channel (power of two)
  static constexpr std::size_t kMaxStarts = 64;   // operation starts not yet sent, kept

  // chain[0]: the real rank's send link; chain[j], 0 < j < p: virtual position q+j's send
  // link (chain[p-1] sends to the real rank). With p = 1, chain[0] is the send link and `in`
  // the link into the real rank. `slices`: units per ring step (Simple: chunkSteps /
  // sliceSteps = 2). `busy`: channels of this ring with receives outstanding (shared).
  // `connected`: ring channels the real rank's NCCL connected (shared; null = unknown).
  RingChannel(std::vector<RingHop> chain, RingHop in, int slices,
              std::shared_ptr<std::atomic<int>> busy,
              std::shared_ptr<std::atomic<int>> connected = nullptr);

  [[nodiscard]] int period() const { return period_; }

  // The real rank posts its send unit (sequence number = the count so far); returns its
  // delivery time at the next member.
  [[nodiscard]] TimeNs postSend(TimeNs now, std::uint64_t bytes);
  // The real rank posted receive `unit`; `idle`: no other receive outstanding on it.
  void postRecv(std::uint64_t unit, TimeNs now, bool idle);
  // A receive completed; `idle`: none is outstanding any more (the operation ended here).
  void recvDone(bool idle);
  // Arrival of receive `unit` (posted at `posted`, `bytes` capacity) once known.
  [[nodiscard]] std::optional<TimeNs> recvArrival(std::uint64_t unit, TimeNs posted,
                                                  std::uint64_t bytes, TimeNs now);

 private:
  [[nodiscard]] std::size_t slot(std::uint64_t u) const { return u & (kWindow - 1); }
  [[nodiscard]] TimeNs& delivered(int pos, std::uint64_t u) {
    return delivered_[static_cast<std::size_t>(pos) * kWindow + slot(u)];
  }
  [[nodiscard]] bool kept(std::uint64_t u) const { return u + kWindow > sends_; }
  // Computes virtual position `pos`'s sends up to unit `upto` (inclusive).
  void advance(int pos, std::uint64_t upto);
  [[nodiscard]] TimeNs depReady(int pos, std::uint64_t u);
  // Serialises a unit on the channel's share of a link: returns its delivery time.
  [[nodiscard]] TimeNs transmit(const RingHop& hop, TimeNs& free_at, TimeNs ready,
                                std::uint64_t bytes);

  std::mutex mu_;
  int period_;
  int slices_;
  std::vector<RingHop> chain_;
  RingHop in_;
  std::shared_ptr<std::atomic<int>> busy_;
  std::shared_ptr<std::atomic<int>> connected_;
  bool in_op_ = false;
  std::vector<TimeNs> free_at_;       // [pos]: the channel's share of pos's link is free; [p]: in_
  std::uint64_t sends_ = 0;           // units the real rank has sent
  TimeNs last_send_ = 0;              // post time of its newest send
  std::vector<TimeNs> posted_;        // [slot]: real send post time
  std::vector<std::uint64_t> bytes_;  // [slot]: its size (every member sends the same)
  std::vector<TimeNs> op_start_;      // [slot]: start of the operation the unit belongs to
  std::vector<TimeNs> delivered_;     // [pos * kWindow + slot]: delivery of pos's send
  std::vector<std::uint64_t> frontier_;  // [pos]: next unit to compute (pos >= 1)
  // Operation starts seen on the receive side, (first unit, time), oldest first.
  std::vector<std::pair<std::uint64_t, TimeNs>> starts_;
  TimeNs current_start_ = 0;
};

}  // namespace crystal::live
