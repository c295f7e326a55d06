#include "crystal/live/link_timing.h"

#include <algorithm>

#include "crystal/live/ring_timing.h"

namespace crystal::live {

TimeNs PortQueue::reserve(TimeNs ready, TimeNs occupancy) noexcept {
  std::lock_guard lock(mu_);
  const TimeNs start = std::max(ready, free_at_);
  free_at_ = start + occupancy;
  return free_at_;
}

TimeNs PortQueue::freeAt() const noexcept {
  std::lock_guard lock(mu_);
  return free_at_;
}

VirtualLink::VirtualLink(std::shared_ptr<RingChannel> ring) : ring_(std::move(ring)) {}

TimeNs VirtualLink::postSend(TimeNs now, std::uint64_t bytes) {
  if (ring_) return ring_->postSend(now, bytes);
  return port_->reserve(now, params_.occupancy(bytes)) + params_.latency_ns;
}

void VirtualLink::postRecv(std::uint64_t step, TimeNs now, bool idle) {
  if (ring_) ring_->postRecv(step, now, idle);
}

void VirtualLink::recvDone(bool idle) {
  if (ring_) ring_->recvDone(idle);
}

std::optional<TimeNs> VirtualLink::recvArrival(std::uint64_t step, TimeNs posted,
                                               std::uint64_t bytes, TimeNs now) {
  if (ring_) return ring_->recvArrival(step, posted, bytes, now);
  return port_->reserve(posted, params_.occupancy(bytes)) + params_.latency_ns;
}

}  // namespace crystal::live
