// Mirror rewrites (mirror_result.h) of collectives called inside ncclGroupStart/End: NCCL
// enqueues a grouped collective on its stream only at the outermost ncclGroupEnd, so its
// rewrite waits until then; a group that fails or is only simulated cancels them. One per
// thread (NCCL's group depth is per thread).
#pragma once

#include <utility>
#include <vector>

#include "mirror_result.h"

namespace crystal::plugin {

class MirrorGroup {
 public:
  void started() noexcept { ++depth_; }
  [[nodiscard]] bool open() const noexcept { return depth_ > 0; }
  void defer(MirrorResult&& m) { pending_.push_back(std::move(m)); }

  // After an ncclGroupEnd (launched: NCCL enqueued the group's work). At the outermost end,
  // `run(m)` each deferred rewrite in call order when launched, else cancels them all; returns
  // the first non-zero `run` result, else 0.
  template <typename Run>
  int ended(bool launched, Run&& run) {
    if (depth_ > 0) --depth_;
    if (depth_ > 0 || pending_.empty()) return 0;
    std::vector<MirrorResult> pending;
    pending.swap(pending_);
    int out = 0;
    for (MirrorResult& m : pending) {
      if (!launched) {
        m.cancel();
        continue;
      }
      if (const int r = run(m); r != 0 && out == 0) out = r;
    }
    return out;
  }

  [[nodiscard]] std::size_t waiting() const noexcept { return pending_.size(); }

 private:
  int depth_ = 0;
  std::vector<MirrorResult> pending_;
};

}  // namespace crystal::plugin
