// What NCCL will run next on a communicator, as its tuner saw it.
//
// The net API carries no operation: an isend/irecv is bytes on a connection. NCCL calls the
// tuner's getCollInfo once per collective at enqueue time (before the kernel and its proxy
// ops start), with the function and size; the tuner knows which algorithm, protocol and
// channel count it made NCCL pick. It appends that here; a tree channel of the same
// communicator reads the entries in order when its connections start a new operation
// (crystal/live/tree_timing.h), which tells it the chunk size and channel count the model
// times, things the proxy's posts do not show (a receive is posted at the slot size).
//
// Per communicator (keyed by NCCL's commId, which the tuner, the v11 net init and the host's
// handles share). Bounded: the oldest entries drop out after kKeep appends.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>

#include "crystal/model/nccl_model.h"

namespace crystal::live {

struct CollectiveEntry {
  model::Func func = model::Func::AllReduce;
  model::Algo algo = model::Algo::Ring;
  model::Proto proto = model::Proto::Simple;
  std::uint64_t bytes = 0;
  int channels = 0;  // what the tuner set; 0: NCCL keeps its own count (all it built)
  int root = -1;     // broadcast, reduce: the root (the interposer's call); -1: unknown
  // The target's count where the tuner runs the operation on another (`channels`: more, for
  // the real rank's GPU to keep the target's pace, plugin/ring_fold.h); 0: `channels`.
  int target_channels = 0;
};

class CollectiveLog {
 public:
  static constexpr std::size_t kKeep = 4096;

  void append(const CollectiveEntry& e);
  // The first entry at or after `*cursor` for which `want` holds; moves the cursor past it.
  // std::nullopt (cursor at the end) when there is none yet.
  template <typename Pred>
  [[nodiscard]] std::optional<CollectiveEntry> next(std::uint64_t* cursor, Pred want) {
    std::lock_guard lock(mu_);
    std::uint64_t i = std::max(*cursor, first_);
    for (; i < first_ + entries_.size(); ++i) {
      const CollectiveEntry& e = entries_[static_cast<std::size_t>(i - first_)];
      if (want(e)) {
        *cursor = i + 1;
        return e;
      }
    }
    *cursor = i;
    return std::nullopt;
  }
  [[nodiscard]] std::uint64_t appended() const;

 private:
  mutable std::mutex mu_;
  std::deque<CollectiveEntry> entries_;
  std::uint64_t first_ = 0;  // absolute index of entries_.front()
};

// The process's log of communicator `comm_id` (created on first use; never 0 = unknown).
[[nodiscard]] std::shared_ptr<CollectiveLog> collectiveLog(std::uint64_t comm_id);

}  // namespace crystal::live
