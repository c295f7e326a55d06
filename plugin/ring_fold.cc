#include "ring_fold.h"

#include <algorithm>
#include <cmath>

#include "crystal/live/nccl_slots.h"

namespace crystal::plugin {
namespace {

// Broadcast and reduce run as a chain (one step per chunk), the others as a ring.
bool isChain(model::Func f) { return f == model::Func::Broadcast || f == model::Func::Reduce; }

// NCCL 2.28.9's ring chunking (enqueue.cc calcCollChunking, include/collectives.h): data
// bytes a channel moves per ring step and loop, and requests per step. Simple all-reduce,
// all-gather and reduce-scatter chunks are 4 slots sent as 2 slices, broadcast/reduce chunks
// 1 slot in 1; LL and LL128 move one slot per step.
double chunkBytes(model::Func f, model::Proto p) {
  const double slot = live::kSlotDataBytes[static_cast<int>(p)];
  return p == model::Proto::Simple && !isChain(f) ? 4 * slot : slot;
}

int slicesPerStep(model::Func f, model::Proto p) {
  return p == model::Proto::Simple && !isChain(f) ? 2 : 1;
}

// Ring steps of one loop.
int ringSteps(model::Func f, int n) {
  if (isChain(f)) return 1;
  return f == model::Func::AllReduce ? 2 * (n - 1) : n - 1;
}

// Bytes through the real rank's kernel (NCCL-tests' bus bytes).
double busBytes(model::Func f, std::uint64_t bytes, int n) {
  const double b = static_cast<double>(bytes);
  if (isChain(f)) return b;
  const double share = n > 1 ? static_cast<double>(n - 1) / n : 1.0;
  return f == model::Func::AllReduce ? 2 * share * b : share * b;
}

constexpr double kMargin = 1.25;

}  // namespace

RingFoldCost ringFoldCost(const RingFoldInput& in, int channels, const RingFoldParams& p) {
  const int n = std::max(1, in.nranks);
  const int c = std::max(1, channels);
  // Per channel and step: the channel's share of one rank's block (a chain's whole buffer).
  const double per_step = static_cast<double>(in.bytes) / c / (isChain(in.func) ? 1 : n);
  const double loops = std::max(1.0, std::ceil(per_step / chunkBytes(in.func, in.proto)));
  RingFoldCost cost;
  cost.slices = static_cast<long>(ringSteps(in.func, n) * slicesPerStep(in.func, in.proto) * loops);
  cost.requests = 2L * c * cost.slices;  // each slice a send and a receive on every channel
  cost.proxy_us = static_cast<double>(cost.requests) * p.proxy_request_us;
  cost.gpu_us = p.gpu_channel_GBps > 0
                    ? busBytes(in.func, in.bytes, n) / (c * p.gpu_channel_GBps * 1e3)
                    : 0.0;
  if (!isChain(in.func)) cost.gpu_us += static_cast<double>(cost.slices) * p.slice_us;
  return cost;
}

int ringChannelsToRun(const RingFoldInput& in, const RingFoldParams& p) {
  const int target = std::max(1, in.target_channels);
  // A chain does one step per chunk (little proxy work to save), and on fewer channels the
  // root's sends queue behind each other: never below the target's count, but above it when
  // the real rank has more channels. A ring never goes above: on the H200 (2026-12-04) 32
  // real channels made 1 GiB rings 1.4-1.7x slower than 16 (the proxy's NET requests grow
  // with the count), where a 1 GiB broadcast went from +14 % to +2 % of the model.
  const bool chain = isChain(in.func);
  const int most = chain ? std::max(target, std::min(in.real_channels, 64)) : target;
  const int fewest = chain ? target : 1;
  int best = target;
  double best_us = -1;
  for (int c = fewest; c <= most; ++c) {
    const RingFoldCost k = ringFoldCost(in, c, p);
    const double need_us = kMargin * std::max(k.gpu_us, k.proxy_us);
    if (need_us <= in.model_us) return c;
    if (best_us < 0 || need_us < best_us) {
      best = c;
      best_us = need_us;
    }
  }
  return best;
}

int onNodeRingChannels(const RingFoldInput& in, const RingFoldParams& p) {
  const int target = std::max(1, in.target_channels);
  const int most = std::max(target, std::min(in.real_channels, 64));
  for (int c = target; c < most; ++c)
    if (kMargin * ringFoldCost(in, c, p).gpu_us <= in.model_us) return c;
  return most;
}

}  // namespace crystal::plugin
