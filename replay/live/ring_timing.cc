#include "crystal/live/ring_timing.h"

#include <algorithm>
#include <stdexcept>

namespace crystal::live {

RingChannel::RingChannel(std::vector<RingHop> chain, RingHop in, int slices,
                         std::shared_ptr<std::atomic<int>> busy,
                         std::shared_ptr<std::atomic<int>> connected)
    : period_(static_cast<int>(chain.size())),
      slices_(std::max(1, slices)),
      chain_(std::move(chain)),
      in_(in),
      busy_(busy ? std::move(busy) : std::make_shared<std::atomic<int>>(0)),
      connected_(connected ? std::move(connected) : std::make_shared<std::atomic<int>>(0)),
      free_at_(chain_.size() + 1, 0),
      posted_(kWindow, 0),
      bytes_(kWindow, 0),
      op_start_(kWindow, 0),
      delivered_(kWindow * std::max<std::size_t>(1, chain_.size()), 0),
      frontier_(std::max<std::size_t>(1, chain_.size()), 0) {
  if (chain_.empty()) throw std::invalid_argument("RingChannel: empty chain");
}

TimeNs RingChannel::postSend(TimeNs now, std::uint64_t bytes) {
  std::lock_guard lock(mu_);
  const std::uint64_t u = sends_++;
  while (!starts_.empty() && starts_.front().first <= u) {
    current_start_ = starts_.front().second;
    starts_.erase(starts_.begin());
  }
  const std::size_t s = slot(u);
  posted_[s] = now;
  bytes_[s] = bytes;
  op_start_[s] = current_start_;
  last_send_ = now;
  const TimeNs d = transmit(chain_[0], free_at_[0], now, bytes);
  delivered(0, u) = d;
  // Done once the data left the real rank's share of the link: the model has no send window,
  // so NCCL's 8-step credit (freed by this completion) must not wait for the hop latency.
  return d - chain_[0].latency_ns;
}

TimeNs RingChannel::transmit(const RingHop& hop, TimeNs& free_at, TimeNs ready,
                             std::uint64_t bytes) {
  const TimeNs start = std::max(ready, free_at);
  free_at = start + hop.occupancy(bytes, busy_->load(std::memory_order_relaxed),
                                  connected_->load(std::memory_order_relaxed));
  return free_at + hop.latency_ns;
}

void RingChannel::recvDone(bool idle) {
  if (!idle) return;
  std::lock_guard lock(mu_);
  if (in_op_) busy_->fetch_sub(1, std::memory_order_relaxed);
  in_op_ = false;
}

void RingChannel::postRecv(std::uint64_t unit, TimeNs now, bool idle) {
  if (!idle) return;
  std::lock_guard lock(mu_);
  if (!in_op_) busy_->fetch_add(1, std::memory_order_relaxed);
  in_op_ = true;
  // A later start for the same unit (re-posted after a fallback) replaces the earlier one.
  if (!starts_.empty() && starts_.back().first == unit)
    starts_.back().second = now;
  else
    starts_.emplace_back(unit, now);
  // A connection that only receives (the end of a broadcast chain) never consumes them.
  if (starts_.size() > kMaxStarts) starts_.erase(starts_.begin());
}

TimeNs RingChannel::depReady(int pos, std::uint64_t u) {
  TimeNs t = op_start_[slot(u)];
  const auto s = static_cast<std::uint64_t>(slices_);
  if (u >= s && kept(u - s) && (pos == 1 || frontier_[static_cast<std::size_t>(pos - 1)] > u - s))
    t = std::max(t, delivered(pos - 1, u - s));
  return t;
}

void RingChannel::advance(int pos, std::uint64_t upto) {
  std::uint64_t& next = frontier_[static_cast<std::size_t>(pos)];
  const auto p = static_cast<std::size_t>(pos);
  for (; next <= upto; ++next) {
    if (!kept(next)) continue;
    delivered(pos, next) =
        transmit(chain_[p], free_at_[p], depReady(pos, next), bytes_[slot(next)]);
  }
}

std::optional<TimeNs> RingChannel::recvArrival(std::uint64_t unit, TimeNs posted,
                                               std::uint64_t bytes, TimeNs now) {
  std::lock_guard lock(mu_);
  const bool one = period_ == 1;
  const RingHop& in = one ? in_ : chain_.back();
  TimeNs& in_free = free_at_[one ? chain_.size() : chain_.size() - 1];
  if (unit >= sends_ || !kept(unit)) {
    if (unit >= sends_) {
      const TimeNs step_ns = in.occupancy(bytes, 1) + in.latency_ns;
      const bool stalled = sends_ == 0 || now - last_send_ > kStallSteps * step_ns + kStallSlackNs;
      if (now < posted + step_ns || !stalled) return std::nullopt;
    }
    // Not a ring's order (or older than the window): the previous member is taken as ready.
    return transmit(in, in_free, posted, bytes);
  }
  const std::uint64_t b = bytes_[slot(unit)];
  // The previous member sends when its data is ready, not when the real rank's proxy reposts
  // the buffer (the model has no receive window either); the receive completes no earlier
  // than it was posted.
  TimeNs ready = 0;
  if (period_ == 1) {
    // The previous member is a copy of the real rank: it sends unit u when the real rank did.
    ready = posted_[slot(unit)];
  } else {
    const auto s = static_cast<std::uint64_t>(slices_);
    for (int pos = 1; pos < period_ - 1; ++pos) {
      const std::uint64_t lag = static_cast<std::uint64_t>(period_ - 1 - pos) * s;
      if (unit >= lag) advance(pos, unit - lag);
    }
    ready = depReady(period_ - 1, unit);
  }
  return std::max(posted, transmit(in, in_free, ready, b));
}

}  // namespace crystal::live
