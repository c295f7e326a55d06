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

std::optional<TimeNs> StepLog::last() const {
  std::lock_guard lock(mu_);
  if (times_.empty()) return std::nullopt;
  return times_.back();
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
                                               std::uint64_t bytes, TimeNs now) {
  TimeNs ready = posted;
  if (pair_) {
    if (const auto sent = pair_->at(step)) {
      ready = std::max(ready, *sent);
    } else if (step >= pair_->count()) {
      // The paired sender has not reached this step: wait while it progresses (see the
      // header: the pairing is a guess, a stalled sender means it was wrong).
      const TimeNs step_ns = params_.occupancy(bytes) + params_.latency_ns;
      const TimeNs unpaired = posted + step_ns;
      const auto last = pair_->last();
      const bool stalled = !last || now - *last > kStallSteps * step_ns + kStallSlackNs;
      if (now < unpaired || !stalled) return std::nullopt;
    }
  }
  return port_->reserve(ready, params_.occupancy(bytes)) + params_.latency_ns;
}

}  // namespace crystal::live
