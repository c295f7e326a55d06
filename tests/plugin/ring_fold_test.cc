// The tuner's choice of real ring channels (plugin/ring_fold.h) on the 64-rank target of
// tests/gpu/hybrid/hybrid64.yaml, with the figures measured on the H200.
#include <gtest/gtest.h>

#include "crystal/model/nccl_model.h"
#include "ring_fold.h"

namespace crystal::test {
namespace {

using model::Func;
using model::Proto;
using plugin::RingFoldInput;
using plugin::RingFoldParams;

constexpr std::uint64_t MiB = 1u << 20;

// The model's ring/Simple time of the 64-rank target (8 x 8 H200, 16 channels).
RingFoldInput target(Func f, std::uint64_t bytes) {
  Config cfg;
  cfg.cluster.nodes = 8;
  const model::NcclModel m(cfg.cluster, cfg.model);
  const model::CommShape shape{64, 8, 8};
  RingFoldInput in;
  in.func = f;
  in.proto = Proto::Simple;
  in.bytes = bytes;
  in.nranks = 64;
  in.target_channels = 16;
  in.model_us = m.time(f, bytes, shape, model::Algo::Ring, Proto::Simple, 16);
  return in;
}

TEST(RingFold, RequestsCountNcclsSlicesPerStepAndLoop) {
  const RingFoldParams p{17.0, 0.5};
  // 64-rank all-gather, 1 MiB: 63 steps x 2 slices, one loop, both directions.
  EXPECT_EQ(plugin::ringFoldCost(target(Func::AllGather, MiB), 16, p).requests, 16 * 2 * 63 * 2);
  EXPECT_EQ(plugin::ringFoldCost(target(Func::AllReduce, MiB), 1, p).requests, 2 * 126 * 2);
  // 1 GiB on one channel: 16 MiB per rank and step > the 2 MiB chunk: 8 loops.
  EXPECT_EQ(plugin::ringFoldCost(target(Func::AllGather, 1024 * MiB), 1, p).requests,
            2 * 63 * 2 * 8);
  // The GPU's share: 1 GiB all-gather moves 63/64 GiB of bus bytes; 16 channels at 17 GB/s.
  EXPECT_NEAR(plugin::ringFoldCost(target(Func::AllGather, 1024 * MiB), 16, p).gpu_us,
              1024.0 * MiB * 63 / 64 / (16 * 17e3), 1e-6);
  EXPECT_NEAR(plugin::ringFoldCost(target(Func::AllGather, MiB), 4, p).proxy_us,
              4 * 2 * 63 * 2 * 0.5, 1e-9);
}

TEST(RingFold, SmallRingsRunOnOneChannel) {
  const RingFoldParams p{17.0, 0.5};
  for (std::uint64_t b : {1024ul, 64 * 1024ul, MiB, 4 * MiB}) {
    EXPECT_EQ(plugin::ringChannelsToRun(target(Func::AllGather, b), p), 1) << b;
    EXPECT_EQ(plugin::ringChannelsToRun(target(Func::ReduceScatter, b), p), 1) << b;
  }
}

// The fewest channels whose GPU and proxy costs stay (with the margin) under the model.
TEST(RingFold, MidSizesTakeTheFewestChannelsThatKeepTheModelsPace) {
  const RingFoldParams p{17.0, 0.5};
  // An 8 MiB all-reduce: the model's ring takes ~640 us, the GPU ~970 us on one channel.
  const RingFoldInput in = target(Func::AllReduce, 8 * MiB);
  const int c = plugin::ringChannelsToRun(in, p);
  EXPECT_GT(c, 1);
  EXPECT_LT(c, 16);
  const auto fits = [&](int k) {
    const auto cost = plugin::ringFoldCost(in, k, p);
    return 1.25 * std::max(cost.gpu_us, cost.proxy_us) <= in.model_us;
  };
  EXPECT_TRUE(fits(c));
  EXPECT_FALSE(fits(c - 1));
}

// When no count fits, the one where the slower of GPU and proxy is fastest: 64 MiB sits
// between a GPU-bound few and a proxy-bound many; 1 GiB is GPU-bound: all 16.
TEST(RingFold, WhenNothingFitsTheBalanceOfGpuAndProxy) {
  const RingFoldParams p{17.0, 0.5};
  const RingFoldInput mid = target(Func::AllGather, 64 * MiB);
  const int c = plugin::ringChannelsToRun(mid, p);
  const auto worst = [&](int k) {
    const auto cost = plugin::ringFoldCost(mid, k, p);
    return std::max(cost.gpu_us, cost.proxy_us);
  };
  for (int k = 1; k <= 16; ++k) EXPECT_LE(worst(c), worst(k)) << k;
  EXPECT_GT(c, 1);
  EXPECT_LT(c, 16);
  EXPECT_EQ(plugin::ringChannelsToRun(target(Func::AllGather, 1024 * MiB), p), 16);
  // A faster GPU needs fewer channels for the same size.
  EXPECT_LT(plugin::ringChannelsToRun(target(Func::AllGather, 1024 * MiB), {200.0, 0.5}), 16);
}

TEST(RingFold, ChainsAreNotFolded) {
  for (std::uint64_t b : {1024ul, MiB, 1024 * MiB})
    EXPECT_EQ(plugin::ringChannelsToRun(target(Func::Broadcast, b), {17.0, 0.5}), 16) << b;
}

TEST(RingFold, NeverMoreThanTheTargetsChannelsUnlessTheRealRankHasMore) {
  RingFoldInput in = target(Func::AllReduce, 1024 * MiB);
  in.target_channels = 4;
  EXPECT_EQ(plugin::ringChannelsToRun(in, {17.0, 0.5}), 4);
  in.real_channels = 2;  // fewer than the target's: the target's count bounds
  EXPECT_EQ(plugin::ringChannelsToRun(in, {17.0, 0.5}), 4);
  in.real_channels = 0;
  in.target_channels = 0;
  EXPECT_EQ(plugin::ringChannelsToRun(in, {17.0, 0.5}), 1);
}

// With 32 real channels (emulation.real_channels): a 1 GiB broadcast (no proxy work to add)
// runs on the fewest above the target's 16 that keep its GPU within the model's time; a ring
// never goes above the target's (on the H200 it got slower there); small sizes are unchanged.
TEST(RingFold, OnlyChainsUseMoreChannelsThanTheTargetsWhenTheRealRankHasThem) {
  const RingFoldParams p{17.0, 0.5};
  RingFoldInput ag = target(Func::AllGather, 1024 * MiB);
  ag.real_channels = 32;
  EXPECT_EQ(plugin::ringChannelsToRun(ag, p), 16);

  RingFoldInput bc = target(Func::Broadcast, 1024 * MiB);
  bc.real_channels = 32;
  const int b = plugin::ringChannelsToRun(bc, p);
  EXPECT_GT(b, 16);
  EXPECT_LE(b, 32);
  EXPECT_LE(1.25 * plugin::ringFoldCost(bc, b, p).gpu_us, bc.model_us);
  EXPECT_GT(1.25 * plugin::ringFoldCost(bc, b - 1, p).gpu_us, bc.model_us) << "the fewest";
  bc.real_channels = 0;
  EXPECT_EQ(plugin::ringChannelsToRun(bc, p), 16) << "without more, the target's";

  for (Func f : {Func::AllGather, Func::Broadcast}) {
    RingFoldInput small = target(f, MiB);
    small.real_channels = 32;
    EXPECT_EQ(plugin::ringChannelsToRun(small, p), f == Func::Broadcast ? 16 : 1);
  }
}

// Under p2p_peers a ring that stays on the real rank's node runs on the target's channels, or
// on more (up to the real rank's NCCL_MIN_NCHANNELS) where its kernel needs them. A ring's
// kernel time counts its slices too (slice_us a slice, 126 a channel on 64 ranks whatever the
// size): the 64 MiB all-gather, which bytes alone kept on 16 channels and which read +5 to +7 %
// of the model there on the H100, gets the fewest that fit; small sizes keep the target's.
TEST(RingFold, OnNodeRingsCountTheirSlicesAsWellAsTheirBytes) {
  const RingFoldParams bytes_only{17.0, 0.5};
  const RingFoldParams sliced{17.0, 0.5, 1.5};
  EXPECT_EQ(plugin::ringFoldCost(target(Func::AllGather, 64 * MiB), 16, sliced).slices, 63 * 2);
  EXPECT_EQ(plugin::ringFoldCost(target(Func::AllReduce, 64 * MiB), 16, sliced).slices, 126 * 2);
  EXPECT_EQ(plugin::ringFoldCost(target(Func::AllGather, 1024 * MiB), 1, sliced).slices,
            63 * 2 * 8);
  EXPECT_NEAR(plugin::ringFoldCost(target(Func::AllGather, 64 * MiB), 16, sliced).gpu_us,
              64.0 * MiB * 63 / 64 / (16 * 17e3) + 126 * 1.5, 1e-6);
  const auto fits = [](const RingFoldInput& in, int c, const RingFoldParams& p) {
    return 1.25 * plugin::ringFoldCost(in, c, p).gpu_us <= in.model_us;
  };
  for (Func f : {Func::AllGather, Func::ReduceScatter}) {
    RingFoldInput in = target(f, 64 * MiB);
    in.real_channels = 28;
    EXPECT_EQ(plugin::onNodeRingChannels(in, bytes_only), 16) << "bytes alone: the target's";
    const int c = plugin::onNodeRingChannels(in, sliced);
    EXPECT_GT(c, 20);
    EXPECT_LT(c, 28);
    EXPECT_TRUE(fits(in, c, sliced));
    EXPECT_FALSE(fits(in, c - 1, sliced)) << "the fewest";
    for (std::uint64_t b : {MiB, 4 * MiB, 16 * MiB}) {
      RingFoldInput small = target(f, b);
      small.real_channels = 28;
      EXPECT_EQ(plugin::onNodeRingChannels(small, sliced), 16) << b;
    }
    RingFoldInput big = target(f, 1024 * MiB);
    big.real_channels = 28;
    EXPECT_EQ(plugin::onNodeRingChannels(big, sliced), 28) << "none fits: all of R's";
  }
  // A chain's units are not counted: the broadcast's choice does not move.
  RingFoldInput bc = target(Func::Broadcast, 64 * MiB);
  bc.real_channels = 28;
  EXPECT_EQ(plugin::ringFoldCost(bc, 16, sliced).gpu_us,
            plugin::ringFoldCost(bc, 16, bytes_only).gpu_us);
  EXPECT_EQ(plugin::onNodeRingChannels(bc, sliced), plugin::onNodeRingChannels(bc, bytes_only));
}

}  // namespace
}  // namespace crystal::test
