#include "op_segments.h"

namespace crystal::plugin {

void OpSegments::push(std::uint64_t op, int transfers, bool ring, bool allgather,
                      bool bytes_free, int channels) {
  if (transfers <= 0) return;  // nothing of it will reach this connection
  std::lock_guard lock(mu_);
  queue_.push_back(
      {op, static_cast<std::uint32_t>(transfers), ring, allgather, bytes_free, channels});
}

std::optional<OpSegments::Place> OpSegments::next() {
  std::lock_guard lock(mu_);
  if (queue_.empty()) {
    ++unplaced_;
    return std::nullopt;
  }
  const Segment& s = queue_.front();
  Place p{s.op, used_, s.ring, s.ring && s.allgather && nranks_ >= 2 ? nranks_ - 1 : 0,
          s.bytes_free, s.channels};
  if (++used_ == s.transfers) {
    queue_.pop_front();
    used_ = 0;
  }
  return p;
}

std::size_t OpSegments::pending() const {
  std::lock_guard lock(mu_);
  return queue_.size();
}

std::uint64_t OpSegments::unplaced() const {
  std::lock_guard lock(mu_);
  return unplaced_;
}

}  // namespace crystal::plugin
