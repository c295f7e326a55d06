#include "ring_fold.h"

#include <algorithm>
#include <cmath>

namespace crystal::plugin {
namespace {

// NCCL 2.28.9's ring chunking (enqueue.cc calcCollChunking, device/*): data bytes a channel
// moves per ring step and loop, and requests per step. Simple: 4 MiB buffer / NCCL_STEPS 8
// = 512 KiB per step slot; all-reduce/all-gather/reduce-scatter chunks of 4 slots sent as
// 2 slices, broadcast/reduce chunks of 1 slot in 1. LL: 512 KiB of 16-byte lines / 8 = 64 KiB
// per slot, half of it data. LL128: 120 x 640 x 8 x 8 bytes / 8 per slot, 120 of every 128
// of them data.
double chunkBytes(model::Func f, model::Proto p) {
  constexpr double kSlot = 512.0 * 1024;
  switch (p) {
    case model::Proto::LL: return kSlot / 8 / 2;
    case model::Proto::LL128: return 120.0 * 640 * 8 * 8 / 8 * 120.0 / 128.0;
    default: break;
  }
  return f == model::Func::Broadcast || f == model::Func::Reduce ? kSlot : 4 * kSlot;
}

int slicesPerStep(model::Func f, model::Proto p) {
  if (p != model::Proto::Simple) return 1;
  return f == model::Func::Broadcast || f == model::Func::Reduce ? 1 : 2;
}

// Ring steps of one loop.
int ringSteps(model::Func f, int n) {
  switch (f) {
    case model::Func::AllReduce: return 2 * (n - 1);
    case model::Func::AllGather:
    case model::Func::ReduceScatter: return n - 1;
    default: return 1;  // broadcast / reduce: a chain, one step per chunk
  }
}

// Bytes through the real rank's kernel (NCCL-tests' bus bytes).
double busBytes(model::Func f, std::uint64_t bytes, int n) {
  const double b = static_cast<double>(bytes);
  const double share = n > 1 ? static_cast<double>(n - 1) / n : 1.0;
  switch (f) {
    case model::Func::AllReduce: return 2 * share * b;
    case model::Func::AllGather:
    case model::Func::ReduceScatter: return share * b;
    default: return b;
  }
}

constexpr double kMargin = 1.25;

}  // namespace

RingFoldCost ringFoldCost(const RingFoldInput& in, int channels, const RingFoldParams& p) {
  const int n = std::max(1, in.nranks);
  const int c = std::max(1, channels);
  const bool chain = in.func == model::Func::Broadcast || in.func == model::Func::Reduce;
  // Per channel and step: the channel's share of one rank's block (a chain's whole buffer).
  const double per_step = static_cast<double>(in.bytes) / c / (chain ? 1 : n);
  const double loops = std::max(1.0, std::ceil(per_step / chunkBytes(in.func, in.proto)));
  RingFoldCost cost;
  cost.requests = static_cast<long>(2.0 * c * ringSteps(in.func, n) *
                                    slicesPerStep(in.func, in.proto) * loops);
  cost.proxy_us = static_cast<double>(cost.requests) * p.proxy_request_us;
  cost.gpu_us = p.gpu_channel_GBps > 0
                    ? busBytes(in.func, in.bytes, n) / (c * p.gpu_channel_GBps * 1e3)
                    : 0.0;
  return cost;
}

int ringChannelsToRun(const RingFoldInput& in, const RingFoldParams& p) {
  const int most = std::max(1, in.target_channels);
  // A chain does one step per chunk (little proxy work to save), and on fewer channels the
  // root's sends queue behind each other: unfolded.
  if (in.func == model::Func::Broadcast || in.func == model::Func::Reduce) return most;
  int best = most;
  double best_us = -1;
  for (int c = 1; c <= most; ++c) {
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

}  // namespace crystal::plugin
