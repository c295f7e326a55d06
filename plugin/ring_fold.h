// Folding a ring collective onto fewer real channels.
//
// On an emulated host NCCL's proxy reaches both ring neighbours of every channel through NET:
// the real rank's proxy posts and tests 2 x steps x slices requests per channel and operation
// (8064 for a 64-rank Simple all-reduce on 16 channels), where a target rank does that only
// on the channels whose ring leaves or enters its node (2 of 16 each way on 8 x 8 H200) and
// NVLink carries the rest with no proxy work. Measured on the H200 (2026-12-03), that proxy
// work alone held 64-rank ring collectives of 1-256 MiB at 1.6-2.1 ms (model 313-683 us).
//
// So the tuner asks NCCL for fewer ring channels than the target's, and the ring timing lets
// each stand for target / used of them (crystal/live/ring_timing.h RingHop: the link, not one
// NIC port, is shared by the channels running). The count is the smallest that the real
// machine can keep at the model's pace: its GPU moves `gpu_channel_GBps` of bus bytes per
// channel, its proxy takes `proxy_request_us` per NET request; both are the emulated host's
// figures (emulation.gpu_channel_GBps / proxy_request_us). What stays unfaithful: the real
// rank's kernel runs on fewer SMs than a target rank's (compute it overlaps sees less
// contention).
#pragma once

#include <cstdint>

#include "crystal/model/nccl_model.h"

namespace crystal::plugin {

struct RingFoldInput {
  model::Func func = model::Func::AllReduce;
  model::Proto proto = model::Proto::Simple;
  std::uint64_t bytes = 0;  // NCCL's size for the tuner (all ranks' data for gathers)
  int nranks = 1;
  int target_channels = 1;  // the target's ring channels for this operation
  // The real rank's ring channels (NCCL_MIN_NCHANNELS; 0 = the target's): a broadcast or
  // reduce the real GPU cannot carry at the model's pace on the target's count may use up to
  // these.
  int real_channels = 0;
  double model_us = 0;      // the model's time for it
};

struct RingFoldParams {
  double gpu_channel_GBps = 17.0;
  double proxy_request_us = 0.5;
  // The real rank's kernel time per ring slice beyond its bytes (waiting on and posting the
  // counters; a P2P ring paced by the agent kernel adds its reaction): emulation.gpu_slice_us,
  // which only on-node rings use (onNodeRingChannels). 0: bytes alone.
  double slice_us = 0.0;
};

// What the real machine needs to run the operation on `channels` channels.
struct RingFoldCost {
  double gpu_us = 0;      // the GPU moving the bus bytes (and its slices, with slice_us)
  double proxy_us = 0;    // NCCL's proxy serving the NET requests
  long requests = 0;      // NET requests of the operation (both directions, every channel)
  long slices = 0;        // slices one channel's kernel runs (steps x slices a step x loops)
};
[[nodiscard]] RingFoldCost ringFoldCost(const RingFoldInput& in, int channels,
                                        const RingFoldParams& p);

// The channels to run the operation on: the fewest with which neither the GPU nor the proxy
// (with a 25 % margin: their costs overlap, not perfectly) exceeds the model's time, else the
// count where the slower of the two is fastest. A ring runs on 1..target_channels. Broadcast
// and reduce (chains: one step per chunk) run on target_channels..max(target_channels,
// real_channels): folded onto one channel a 1 MiB broadcast's root took 24.1 us instead of
// 17.7 on the H200 (model 14.2), and one real channel moves ~17-22 GB/s through NET where a
// target channel moves its share of NVLink, so a large broadcast needs more than the target's
// (1 GiB root: +14 % on 16, +2 % on 32 with emulation.real_channels).
[[nodiscard]] int ringChannelsToRun(const RingFoldInput& in, const RingFoldParams& p);

// Rings that stay on the real rank's node at the rank (emulation.p2p_peers, PluginState::
// ringsOnNode): no NET request passes NCCL's proxy, and each hop is paced by the agent kernel,
// so only the GPU counts. Measured on the H200 (2026-12-04, rank 13 of 64, free-running) the
// real kernel moved ~17 GB/s of bus bytes per channel, under the target's 16-channel share
// of NVLink from 256 MiB (all-gather +40 %). So such a ring runs on the fewest channels from
// the target's up to the real rank's (real_channels, NCCL_MIN_NCHANNELS) whose GPU time with
// the margin fits the model's, else on all of those; each stands for target / used. A ring's
// GPU time counts its slices (`slice_us` each) as well as its bytes: a 64-rank ring runs 126
// slices a channel (252 for an all-reduce) whatever its size, and where bytes alone said 16
// channels kept the 64 MiB all-gather's pace, the real kernel took +5 to +7 % of the model
// paced (on the H100, 2026-12-06: free-running 387 us on 16 channels, model 425; the paced
// kernel ~60 us over its free time). A chain's units (one a loop) are not counted.
[[nodiscard]] int onNodeRingChannels(const RingFoldInput& in, const RingFoldParams& p);

}  // namespace crystal::plugin
