#include "crystal/live/link_timing.h"

#include <algorithm>

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

void StepLog::record(TimeNs posted) {
  std::lock_guard lock(mu_);
  times_.push_back(posted);
  if (times_.size() > kKeep) {
    times_.pop_front();
    ++first_;
  }
}

std::optional<TimeNs> StepLog::at(std::uint64_t step) const {
  std::lock_guard lock(mu_);
  if (step < first_ || step >= first_ + times_.size()) return std::nullopt;
  return times_[step - first_];
}

std::uint64_t StepLog::count() const {
  std::lock_guard lock(mu_);
  return first_ + times_.size();
}

TimeNs VirtualLink::postSend(TimeNs now, std::uint64_t bytes) {
  log_->record(now);
  return port_->reserve(now, params_.occupancy(bytes)) + params_.latency_ns;
}

std::optional<TimeNs> VirtualLink::recvArrival(std::uint64_t step, TimeNs posted,
                                               std::uint64_t bytes) {
  TimeNs ready = posted;
  if (pair_) {
    const auto sent = pair_->at(step);
    if (!sent) {
      // Not yet reached by the (symmetric) virtual sender, unless the step was forgotten.
      if (step >= pair_->count()) return std::nullopt;
    } else {
      ready = std::max(ready, *sent);
    }
  }
  return port_->reserve(ready, params_.occupancy(bytes)) + params_.latency_ns;
}

}  // namespace crystal::live
