#include "crystal/live/collective_log.h"

#include <map>

namespace crystal::live {

void CollectiveLog::append(const CollectiveEntry& e) {
  std::lock_guard lock(mu_);
  entries_.push_back(e);
  if (entries_.size() > kKeep) {
    entries_.pop_front();
    ++first_;
  }
}

std::uint64_t CollectiveLog::appended() const {
  std::lock_guard lock(mu_);
  return first_ + entries_.size();
}

std::shared_ptr<CollectiveLog> collectiveLog(std::uint64_t comm_id) {
  static std::mutex mu;
  static std::map<std::uint64_t, std::shared_ptr<CollectiveLog>> logs;
  std::lock_guard lock(mu);
  auto& log = logs[comm_id];
  if (!log) log = std::make_shared<CollectiveLog>();
  return log;
}

}  // namespace crystal::live
