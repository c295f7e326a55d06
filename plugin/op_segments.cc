#include "op_segments.h"

#include <algorithm>

namespace crystal::plugin {

void OpSegments::push(std::uint64_t op, int transfers, bool ring, bool allgather, bool bytes_free,
                      int channels, ChainOp chain) {
  if (transfers <= 0) return;  // nothing of it will reach this connection
  int hops = -1;
  std::uint64_t unit = 0;
  if (ring && chain.root >= 0 && nranks_ >= 2 && chain.root < nranks_ && self_rank_ >= 0 &&
      self_rank_ < nranks_) {
    // A broadcast flows from its root; a reduce from the rank after its root to the root.
    const int head = chain.reduce ? (chain.root + 1) % nranks_ : chain.root;
    hops = ((self_rank_ - head) % nranks_ + nranks_) % nranks_;
    // NCCL's ring broadcast/reduce cuts a loop into one chunk per channel, the last loop's
    // smaller (all of a small collective's): a transfer carries the collective's bytes per
    // channel and transfer, at most a chunk.
    const auto chunk = static_cast<std::uint64_t>(std::max(0, chain.chunk_bytes));
    const auto parts =
        static_cast<std::uint64_t>(std::max(1, channels)) * static_cast<std::uint64_t>(transfers);
    const std::uint64_t per = (chain.coll_bytes + parts - 1) / parts;  // 0 when unknown
    unit = chunk == 0 ? per : per == 0 ? chunk : std::min(chunk, per);
  }
  std::lock_guard lock(mu_);
  queue_.push_back({op, static_cast<std::uint32_t>(transfers), ring, allgather, bytes_free,
                    channels, hops, unit, hops >= 0 ? chain.issued_ns : 0});
}

std::optional<OpSegments::Place> OpSegments::next() {
  std::lock_guard lock(mu_);
  if (queue_.empty()) {
    ++unplaced_;
    return std::nullopt;
  }
  const Segment& s = queue_.front();
  Place p{s.op,
          used_,
          s.ring,
          s.ring && s.allgather && nranks_ >= 2 ? nranks_ - 1 : 0,
          s.bytes_free,
          s.channels,
          s.chain_hops,
          s.chain_unit_bytes,
          s.chain_issued_ns};
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
