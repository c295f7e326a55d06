// Live side of the engine: tickets for real ranks' posts, released at modelled times.
#include "crystal/replay/live_scheduler.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <utility>

namespace crystal::replay {

LiveScheduler::LiveScheduler(const Clock& clock, CostFn cost)
    : clock_(clock), cost_(std::move(cost)) {}

std::uint64_t LiveScheduler::post(const LivePost& p) {
  const LiveCost c = cost_(p);
  std::lock_guard lock(mu_);
  TimeNs& free_at = link_free_[p.connection];
  const TimeNs start = std::max({p.posted_ns, p.peer_ready_ns, free_at});
  free_at = start + c.occupancy_ns;
  const std::uint64_t ticket = next_ticket_++;
  const TimeNs release = free_at + c.latency_ns;
  live_.emplace(ticket, LiveCompletion{ticket, p.rank, p.connection, p.posted_ns, release});
  due_.push(release, ticket);
  posted_.notify_all();
  return ticket;
}

bool LiveScheduler::test(std::uint64_t ticket) {
  std::lock_guard lock(mu_);
  if (ticket == 0 || ticket >= next_ticket_)
    throw std::out_of_range("LiveScheduler::test: unknown ticket " + std::to_string(ticket));
  auto it = live_.find(ticket);
  if (it == live_.end()) return true;
  if (clock_.now() < it->second.release_ns) return false;
  live_.erase(it);  // its heap entry is skipped when it surfaces
  return true;
}

std::optional<TimeNs> LiveScheduler::releaseTime(std::uint64_t ticket) const {
  std::lock_guard lock(mu_);
  auto it = live_.find(ticket);
  if (it == live_.end()) return std::nullopt;
  return it->second.release_ns;
}

std::optional<LiveCompletion> LiveScheduler::popDueLocked(TimeNs now) {
  while (!due_.empty() && due_.nextTime() <= now) {
    const std::uint64_t ticket = due_.pop().payload;
    auto it = live_.find(ticket);
    if (it == live_.end()) continue;  // already completed through test()
    LiveCompletion c = it->second;
    live_.erase(it);
    return c;
  }
  return std::nullopt;
}

std::vector<LiveCompletion> LiveScheduler::releaseDue() {
  std::lock_guard lock(mu_);
  std::vector<LiveCompletion> out;
  const TimeNs now = clock_.now();
  while (auto c = popDueLocked(now)) out.push_back(*c);
  return out;
}

std::optional<LiveCompletion> LiveScheduler::waitNext(TimeNs timeout_ns) {
  const auto* wall = dynamic_cast<const WallClock*>(&clock_);
  const TimeNs deadline = clock_.now() + timeout_ns;
  std::unique_lock lock(mu_);
  for (;;) {
    const TimeNs now = clock_.now();
    if (auto c = popDueLocked(now)) return c;
    if (now >= deadline) return std::nullopt;
    TimeNs wake = deadline;
    if (!due_.empty()) wake = std::min(wake, due_.nextTime());
    if (wall != nullptr) {
      posted_.wait_until(lock, wall->at(wake));  // a new post may be due earlier: re-check
    } else {
      posted_.wait_for(lock, std::chrono::milliseconds(1));
    }
  }
}

std::size_t LiveScheduler::pending() const {
  std::lock_guard lock(mu_);
  return live_.size();
}

}  // namespace crystal::replay
