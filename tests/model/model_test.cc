// NcclModel as the engine and the plugin use it: NCCL's choices on DGX H200 targets,
// what-if directions, p2p / all-to-all, netStep consistency, bad input.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "crystal/base/error.h"
#include "crystal/model/nccl_model.h"

namespace crystal::model {
namespace {

ClusterConfig dgx(int nodes) {
  ClusterConfig c;
  c.nodes = nodes;
  return c;
}
CommShape full(int nodes) { return {nodes * 8, nodes, 8}; }

TEST(Choose, ProtocolBySizeOnOneNode) {
  const NcclModel m(dgx(1), {});
  const CommShape s = full(1);
  EXPECT_EQ(m.choose(Func::AllReduce, 1 << 10, s).proto, Proto::LL);
  EXPECT_EQ(m.choose(Func::AllReduce, 4 << 20, s).proto, Proto::LL128);
  EXPECT_EQ(m.choose(Func::AllReduce, 1ULL << 30, s).proto, Proto::Simple);
  EXPECT_EQ(m.choose(Func::AllReduce, 1ULL << 30, s).algo, Algo::Ring);
  // NCCL's channel reduction for small sizes (enqueue.cc:topoGetAlgoInfo):
  // LL ring threshold 8 x nranks bytes per thread, 512 threads.
  EXPECT_EQ(m.choose(Func::AllReduce, 1 << 10, s).channels, 1);
  EXPECT_EQ(m.choose(Func::AllReduce, 1ULL << 30, s).channels, m.commChannels(s));
}

TEST(Choose, TreeForMidSizesAcrossNodesRingForHuge) {
  const NcclModel m(dgx(16), {});
  const CommShape s = full(16);
  const Choice mid = m.choose(Func::AllReduce, 1 << 20, s);
  EXPECT_EQ(mid.algo, Algo::Tree);
  EXPECT_EQ(mid.proto, Proto::LL128);
  const Choice huge = m.choose(Func::AllReduce, 1ULL << 32, s);
  EXPECT_EQ(huge.algo, Algo::Ring);
  EXPECT_EQ(huge.proto, Proto::Simple);
  // All-gather never uses Tree; with 8 GPUs per node no PAT either.
  EXPECT_EQ(m.choose(Func::AllGather, 1 << 20, s).algo, Algo::Ring);
  // One GPU per node: PAT for all-gather at small sizes (tuning.cc:ncclPatEnable).
  EXPECT_EQ(m.choose(Func::AllGather, 1 << 16, {64, 64, 1}).algo, Algo::Pat);
}

// A ring broadcast at each rank's place: the chain's last rank sees the whole operation,
// every rank before it less by the hops it is nearer the root (one NVLink or NET hop's
// latency and chunk crossing each), the root its first hop only.
TEST(TimeAtRank, BroadcastChainShortensTowardTheRoot) {
  const NcclModel m(dgx(8), {});
  const CommShape s = full(8);
  for (std::uint64_t b : {std::uint64_t{1} << 20, std::uint64_t{1} << 30}) {
    const double whole = m.time(Func::Broadcast, b, s, Algo::Ring, Proto::Simple, 16);
    EXPECT_DOUBLE_EQ(m.timeAtRank(Func::Broadcast, b, s, Algo::Ring, Proto::Simple, 16, 63, 0),
                     whole);
    // Root 5: its chain ends at rank 4.
    EXPECT_DOUBLE_EQ(m.timeAtRank(Func::Broadcast, b, s, Algo::Ring, Proto::Simple, 16, 4, 5),
                     whole);
    double before = 0;
    for (int r = 1; r < 64; ++r) {
      const double t = m.timeAtRank(Func::Broadcast, b, s, Algo::Ring, Proto::Simple, 16, r, 0);
      EXPECT_GT(t, before) << r;
      before = t;
    }
    const double root = m.timeAtRank(Func::Broadcast, b, s, Algo::Ring, Proto::Simple, 16, 0, 0);
    EXPECT_DOUBLE_EQ(root,
                     m.timeAtRank(Func::Broadcast, b, s, Algo::Ring, Proto::Simple, 16, 1, 0));
    EXPECT_LT(root, whole);
  }
  // 1 MiB: latency-bound, so the root is far earlier; 1 GiB: the chain's pace dominates
  // (the root still skips the last chunk's 62 further hops).
  const double r1 = m.timeAtRank(Func::Broadcast, 1 << 20, s, Algo::Ring, Proto::Simple, 16, 0, 0);
  EXPECT_LT(r1, 0.5 * m.time(Func::Broadcast, 1 << 20, s, Algo::Ring, Proto::Simple, 16));
  const double r30 =
      m.timeAtRank(Func::Broadcast, 1ULL << 30, s, Algo::Ring, Proto::Simple, 16, 0, 0);
  EXPECT_GT(r30, 0.5 * m.time(Func::Broadcast, 1ULL << 30, s, Algo::Ring, Proto::Simple, 16));
  // Other calls: the whole operation.
  EXPECT_DOUBLE_EQ(m.timeAtRank(Func::AllReduce, 1 << 20, s, Algo::Ring, Proto::Simple, 16, 0, 0),
                   m.time(Func::AllReduce, 1 << 20, s, Algo::Ring, Proto::Simple, 16));
}

TEST(Choose, TimeIsStepModelOfTheChoice) {
  const NcclModel m(dgx(16), {});
  const CommShape s = full(16);
  const Choice c = m.choose(Func::AllReduce, 1ULL << 28, s);
  EXPECT_DOUBLE_EQ(c.time_us, m.time(Func::AllReduce, 1ULL << 28, s, c.algo, c.proto, c.channels));
  // Within 30 % of NCCL's own estimate for the same call (the step model is not fitted).
  const double est = m.ncclEstimate(Func::AllReduce, 1ULL << 28, s, c.algo, c.proto);
  EXPECT_NEAR(c.time_us, est, 0.3 * est);
  const NcclModel one(dgx(1), {});
  EXPECT_EQ(one.choose(Func::AllReduce, 1 << 20, {1, 1, 1}).time_us, 0.0);
}

TEST(Choose, HugeRingAllReduceRunsAtNicBusBandwidth) {
  // 8 x 50 GB/s rail NICs per node: ring bus bandwidth tends to 400 GB/s.
  const NcclModel m(dgx(16), {});
  const std::uint64_t bytes = 1ULL << 34;
  const Choice c = m.choose(Func::AllReduce, bytes, full(16));
  const double bus =
      static_cast<double>(bytes) / c.time_us / 1e3 * busBwFactor(Func::AllReduce, 128);
  EXPECT_NEAR(bus, 400.0, 4.0);
  EXPECT_DOUBLE_EQ(busBwFactor(Func::AllGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(busBwFactor(Func::Broadcast, 4), 1.0);
}

TEST(WhatIf, MoreNicBandwidthIsFaster) {
  ClusterConfig fast = dgx(16);
  fast.fabric.nic.bandwidth_GBps = 100.0;
  const NcclModel base(dgx(16), {}), quick(fast, {});
  for (std::uint64_t bytes : {1ULL << 26, 1ULL << 32}) {
    EXPECT_LT(quick.choose(Func::AllReduce, bytes, full(16)).time_us,
              base.choose(Func::AllReduce, bytes, full(16)).time_us)
        << bytes;
  }
  // At 1 MiB NCCL's choice on the faster NICs (32 channels) is not faster in the step
  // model than the old one; the same algorithm/protocol/channels always is.
  for (Algo a : {Algo::Tree, Algo::Ring}) {
    EXPECT_LT(quick.time(Func::AllReduce, 1 << 20, full(16), a, Proto::LL128, 16),
              base.time(Func::AllReduce, 1 << 20, full(16), a, Proto::LL128, 16));
  }
}

TEST(WhatIf, MoreNicsIsFasterAcrossNodes) {
  ClusterConfig four = dgx(16);
  four.fabric.nics_per_node = 4;
  const NcclModel fewer(four, {}), more(dgx(16), {});
  const double t4 =
      fewer.time(Func::AllGather, 1ULL << 30, full(16), Algo::Ring, Proto::Simple, 16);
  const double t8 = more.time(Func::AllGather, 1ULL << 30, full(16), Algo::Ring, Proto::Simple, 16);
  EXPECT_LT(t8, t4);
  EXPECT_NEAR(t4 / t8, 2.0, 0.1);  // NIC-bound: half the NICs, twice the time
}

TEST(WhatIf, MoreRanksRaiseAllReduceLatency) {
  double prev = 0;
  for (int nodes : {2, 8, 64, 512}) {
    const NcclModel m(dgx(nodes), {});
    const double t = m.time(Func::AllReduce, 1 << 10, full(nodes), Algo::Ring, Proto::LL, 1);
    EXPECT_GT(t, prev) << nodes;
    prev = t;
    const double tree = m.time(Func::AllReduce, 1 << 10, full(nodes), Algo::Tree, Proto::LL, 1);
    EXPECT_LT(tree, t) << "tree latency grows as log2(nodes)";
  }
}

TEST(WhatIf, OversubscriptionSlowsCommsBeyondALeaf) {
  ClusterConfig over = dgx(128);
  over.fabric.oversubscription = 4.0;
  const NcclModel flat(dgx(128), {}), tapered(over, {});
  const auto t = [](const NcclModel& m, int nodes) {
    return m.time(Func::AllGather, 1ULL << 32, full(nodes), Algo::Ring, Proto::Simple, 16);
  };
  EXPECT_DOUBLE_EQ(t(flat, 32), t(tapered, 32));  // 32 nodes = one leaf per rail
  EXPECT_GT(t(tapered, 64), 3.5 * t(flat, 64));
}

TEST(P2p, NetChunksAndNvlink) {
  const NcclModel m(dgx(2), {});
  const double net = m.p2pTime(1 << 20, false);
  const double nvl = m.p2pTime(1 << 20, true);
  EXPECT_LT(nvl, net);
  // One more 128 KiB NET chunk costs its time at the GPU's pace: a pair's peer gets 2 NCCL
  // channels of 14.3 GB/s each (slower than the 50 GB/s NIC).
  EXPECT_NEAR(m.p2pTime(256 << 10, false) - m.p2pTime(128 << 10, false), 131072 / 28.6e3, 1e-9);
  EXPECT_GT(m.p2pTime(1 << 30, false), (1 << 30) / 28.6e3);
  // In a 64-rank communicator (16 channels) a NET peer gets 1 channel: 14.3 GB/s.
  const NcclModel m8(dgx(8), {});
  EXPECT_NEAR(m8.p2pTime(256 << 10, false, 64) - m8.p2pTime(128 << 10, false, 64),
              131072 / 14.3e3, 1e-9);
  // Without the per-channel cap the chunk costs its time on one 50 GB/s NIC.
  ModelConfig uncapped;
  uncapped.overrides.emplace_back("p2p_net_channel_gbps", 0.0);
  const NcclModel n(dgx(2), uncapped);
  EXPECT_NEAR(n.p2pTime(256 << 10, false) - n.p2pTime(128 << 10, false), 131072 / 50e3, 1e-9);
}

TEST(AllToAll, NicSharingAcrossNodes) {
  const NcclModel m(dgx(16), {});
  const double one_node = m.allToAllTime(1 << 20, full(1));
  const double many = m.allToAllTime(1 << 20, full(16));
  EXPECT_LT(one_node, many);
  // 120 remote peers x 1 MiB through one 50 GB/s NIC share per GPU dominates.
  EXPECT_GT(many, 120.0 * (1 << 20) / 50e3);
  EXPECT_LT(many, 1.1 * 120.0 * (1 << 20) / 50e3 + 200);
  EXPECT_DOUBLE_EQ(m.choose(Func::AllToAll, 128ULL << 20, full(16)).time_us,
                   m.allToAllTime(1 << 20, full(16)));
}

// A plugin that completes each NET step at post + bytes/bw + latency (netStep) reproduces
// the model's time of a NET-only ring (2 nodes x 1 GPU, all-gather, Simple).
TEST(NetStep, PluginTimingReproducesRingTime) {
  const NcclModel m(dgx(2), {});
  const CommShape s{2, 2, 1};
  const int ch = 4;
  const StepTiming st = m.netStep(Proto::Simple, ch, s);
  // 64 MiB over 4 channels: 16 MiB per channel, 2 MiB chunks, 1 MiB slices, 8 NET steps.
  double link_free = 0, done = 0;
  for (int step = 0; step < 8; ++step) {
    const double start = link_free;
    link_free = start + (1 << 20) / (st.bandwidth_GBps * 1e3);
    done = link_free + st.latency_us;
  }
  const double base = 8.4;  // tuning.cc baseLatencies Ring/Simple
  EXPECT_NEAR(m.time(Func::AllGather, 64ULL << 20, s, Algo::Ring, Proto::Simple, ch), base + done,
              1e-6);
  // 4 channels share the member's one 50 GB/s rail NIC.
  EXPECT_NEAR(st.bandwidth_GBps, 12.5, 1e-9);
  EXPECT_NEAR(st.latency_us, 2.0 + 0.25 + (14.0 - 2.25), 1e-9);
}

TEST(StartOffsets, EqualStartsMatchTimeAndLateMemberDelays) {
  const NcclModel m(dgx(16), {});
  const CommShape s = full(16);
  const std::uint64_t bytes = 1ULL << 30;
  const std::vector<StartClass> same = {{0.0, 128}};
  const double t = m.time(Func::AllReduce, bytes, s, Algo::Ring, Proto::Simple, 16);
  const std::vector<double> f =
      m.ringFinishTimes(Func::AllReduce, bytes, s, Proto::Simple, 16, same);
  ASSERT_EQ(f.size(), 1u);
  EXPECT_NEAR(f[0], t, 0.01 * t);
  const std::vector<StartClass> late = {{0.0, 64}, {500.0, 64}};
  const std::vector<double> g =
      m.ringFinishTimes(Func::AllReduce, bytes, s, Proto::Simple, 16, late);
  ASSERT_EQ(g.size(), 2u);
  for (double x : g) {
    EXPECT_GT(x, f[0]);
    EXPECT_LE(x, f[0] + 500.0 + 1e-6);
  }
  const std::vector<StartClass> wrong = {{0.0, 100}};
  EXPECT_THROW((void)m.ringFinishTimes(Func::AllReduce, bytes, s, Proto::Simple, 16, wrong),
               InputError);
}

TEST(BadInput, ModelConfigErrorsNameTheField) {
  ModelConfig mc;
  mc.max_channels = 0;
  try {
    NcclModel m(dgx(2), mc);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("model.max_channels"), std::string::npos);
  }
  ModelConfig bad_flag;
  bad_flag.overrides.emplace_back("ll128", 3.0);
  EXPECT_THROW(NcclModel(dgx(2), bad_flag), InputError);
  ClusterConfig c = dgx(2);
  c.gpu.compute_capability = 7;
  EXPECT_THROW(NcclModel(c, {}), InputError);
  const NcclModel m(dgx(2), {});
  EXPECT_THROW((void)m.choose(Func::AllReduce, 1024, {16, 2, 9}), InputError);
}

TEST(BadInput, Ll128OverrideDisablesIt) {
  ModelConfig mc;
  mc.overrides.emplace_back("ll128", 0.0);
  const NcclModel m(dgx(1), mc);
  EXPECT_NE(m.choose(Func::AllReduce, 4 << 20, full(1)).proto, Proto::LL128);
  EXPECT_EQ(m.whyUnsupported(Func::AllReduce, full(1), Algo::Ring, Proto::LL128),
            "LL128 disabled by the model config");
}

}  // namespace
}  // namespace crystal::model
