#include "op_segments.h"

#include <algorithm>

#include "crystal/live/link_timing.h"

namespace crystal::plugin {

void OpSegments::push(std::uint64_t op, int transfers, bool ring, bool allgather, bool bytes_free,
                      int channels, ChainOp chain) {
  if (transfers <= 0) return;  // nothing of it will reach this connection
  int hops = -1;
  std::uint64_t unit = 0;
  const std::optional<int> chain_hops =
      ring ? live::chainHops(chain.root, chain.reduce, self_rank_, nranks_) : std::nullopt;
  if (chain_hops) {
    hops = *chain_hops;
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
                    channels, hops, unit, hops >= 0 ? chain.issued_ns : 0,
                    hops >= 0 && chain.reduce});
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
          s.chain_issued_ns,
          s.transfers,
          s.chain_reduce};
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
