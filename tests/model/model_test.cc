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
// The links' times alone: no floor of a chain member's own kernel (chain_kernel_scale 0).
ModelConfig linksOnly() {
  ModelConfig mc;
  mc.overrides.emplace_back("chain_kernel_scale", 0.0);
  return mc;
}

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
// latency and chunk crossing each), the root its first hop only. The links' times: without
// the floor of a member's own kernel (NoMemberRunsFasterThanItsOwnKernel), which at 1 MiB
// is above the first few members' chain.
TEST(TimeAtRank, BroadcastChainShortensTowardTheRoot) {
  const NcclModel m(dgx(8), linksOnly());
  const CommShape s = full(8);
  for (std::uint64_t b : {std::uint64_t{1} << 20, std::uint64_t{1} << 30}) {
    const double whole = m.time(Func::Broadcast, b, s, Algo::Ring, Proto::Simple, 16);
    const auto at = [&](int rank, int root) {
      return m.timeAtRank(Func::Broadcast, b, s, Algo::Ring, Proto::Simple, 16, rank, root);
    };
    EXPECT_NEAR(at(63, 0), whole, 1e-12 * whole);
    // Root 5: its chain ends at rank 4 and crosses all 8 node boundaries (from 7, 15, ..., 63),
    // one NET hop more than from root 0 and one NVLink hop less.
    const double net = at(8, 0) - at(7, 0), nvl = at(2, 0) - at(1, 0);
    EXPECT_GT(net, nvl);
    EXPECT_NEAR(at(4, 5), whole + net - nvl, 1e-9 * whole);
    double before = 0;
    for (int r = 1; r < 64; ++r) {
      const double t = m.timeAtRank(Func::Broadcast, b, s, Algo::Ring, Proto::Simple, 16, r, 0);
      EXPECT_GT(t, before) << r;
      before = t;
    }
    // The root only sends: it ends before rank 1 has the last chunk.
    const double root = m.timeAtRank(Func::Broadcast, b, s, Algo::Ring, Proto::Simple, 16, 0, 0);
    EXPECT_LT(root, m.timeAtRank(Func::Broadcast, b, s, Algo::Ring, Proto::Simple, 16, 1, 0));
  }
  // 1 MiB: latency-bound, so the root is far earlier; 1 GiB: the chain's pace dominates
  // (the root still skips the last chunk's 62 further hops).
  const double r1 = m.timeAtRank(Func::Broadcast, 1 << 20, s, Algo::Ring, Proto::Simple, 16, 0, 0);
  EXPECT_LT(r1, 0.5 * m.time(Func::Broadcast, 1 << 20, s, Algo::Ring, Proto::Simple, 16));
  const double r30 =
      m.timeAtRank(Func::Broadcast, 1ULL << 30, s, Algo::Ring, Proto::Simple, 16, 0, 0);
  EXPECT_GT(r30, 0.5 * m.time(Func::Broadcast, 1ULL << 30, s, Algo::Ring, Proto::Simple, 16));
  // Other calls: the whole operation.
  EXPECT_DOUBLE_EQ(m.timeAtRank(Func::AllReduce, 1 << 20, s, Algo::Tree, Proto::Simple, 16, 0, 0),
                   m.time(Func::AllReduce, 1 << 20, s, Algo::Tree, Proto::Simple, 16));
}

// Broadcasts back to back (nccl-tests' loop) stream through the chain: per operation, a
// receiver pays the fill once and every chunk at the slowest hop's pace, but no operation
// sooner than the slowest member before it runs one (its fixed cost and its chunks).
TEST(LoopTimeAtRank, BroadcastReceiversPayTheChainsFillOnce) {
  const NcclModel m(dgx(8), {});
  const CommShape s = full(8);
  const auto bc = [&](std::uint64_t b, int rank, int iters) {
    return m.loopTimeAtRank(Func::Broadcast, b, s, Algo::Ring, Proto::Simple, 16, rank, 0, iters);
  };
  const std::uint64_t gib = 1ULL << 30;
  // The pace of one operation's chunks: a size twice as large adds them once more.
  const double per_op = m.time(Func::Broadcast, 2 * gib, s, Algo::Ring, Proto::Simple, 16) -
                        m.time(Func::Broadcast, gib, s, Algo::Ring, Proto::Simple, 16);
  const double base = m.opOverheadUs(Algo::Ring, Proto::Simple);
  for (int rank : {1, 5, 8, 63}) {
    const double alone =
        m.timeAtRank(Func::Broadcast, gib, s, Algo::Ring, Proto::Simple, 16, rank, 0);
    EXPECT_DOUBLE_EQ(bc(gib, rank, 1), alone) << rank;
    // Ranks 0-4 send over NVLink, whose chunks take less than the NET's (the chain's pace)
    // by more than an operation's fixed cost; from rank 8 rank 7, which sends over the NET,
    // is before it: its chunks at the chain's pace and its fixed cost.
    const double op = rank < 8 ? per_op : per_op + base;
    for (int n : {2, 20}) EXPECT_NEAR(bc(gib, rank, n) * n, alone + (n - 1) * op, 1e-6) << rank;
  }
  // Unset rank: the chain's last member, time() for one operation.
  EXPECT_DOUBLE_EQ(bc(gib, -1, 1), m.time(Func::Broadcast, gib, s, Algo::Ring, Proto::Simple, 16));
  EXPECT_DOUBLE_EQ(bc(gib, -1, 20), bc(gib, 63, 20));
  // A member is no faster than its own chunks: 1 MiB is 64 KiB a channel, one chunk.
  EXPECT_GE(bc(1 << 20, 5, 20), m.opOverheadUs(Algo::Ring, Proto::Simple));
  // Other calls do not overlap.
  EXPECT_DOUBLE_EQ(
      m.loopTimeAtRank(Func::AllGather, gib, s, Algo::Ring, Proto::Simple, 16, 5, 0, 20),
      m.timeAtRank(Func::AllGather, gib, s, Algo::Ring, Proto::Simple, 16, 5, 0));
}

// The root waits for rank 1's 8-slot window, not for rank 1: alone, an operation of at most
// 8 chunks a channel runs at its own link's pace; back to back it ends a window ahead of the
// chain. Measured on the H200 with the real rank as the root of 64 (8 x 8, Simple, 16
// channels, 20 iterations; tests/gpu/hybrid/README.md, seventeenth session): 64 MiB, 256 MiB
// and 1 GiB took 160.1, 663.0 and 2675.1 us an operation (-9.7, -2.6, -0.7 % from one
// operation at rank 1, the model before).
TEST(LoopTimeAtRank, RootEndsAWindowAheadOfTheChain) {
  const NcclModel m(dgx(8), {});
  const CommShape s = full(8);
  const auto bc = [&](std::uint64_t b, int rank, int iters) {
    return m.loopTimeAtRank(Func::Broadcast, b, s, Algo::Ring, Proto::Simple, 16, rank, 0, iters);
  };
  const double base = m.opOverheadUs(Algo::Ring, Proto::Simple);
  // 32 and 64 MiB: 4 and 8 chunks of 512 KiB a channel, within the window: its link's pace
  // (alone, the root's own kernel, NoMemberRunsFasterThanItsOwnKernel, is as slow at 64 MiB).
  const NcclModel links(dgx(8), linksOnly());
  const auto alone = [&](std::uint64_t b) {
    return links.loopTimeAtRank(Func::Broadcast, b, s, Algo::Ring, Proto::Simple, 16, 0, 0, 1);
  };
  EXPECT_NEAR(alone(64 << 20), 2 * alone(32 << 20) - base, 1e-9);
  EXPECT_NEAR(bc(64 << 20, 0, 1), alone(64 << 20), 0.01 * alone(64 << 20));
  EXPECT_LT(bc(64 << 20, 0, 1), bc(64 << 20, 1, 1));
  const std::pair<std::uint64_t, double> measured[] = {
      {64ULL << 20, 160.1}, {256ULL << 20, 663.0}, {1ULL << 30, 2675.1}};
  for (const auto& [b, us] : measured) {
    EXPECT_NEAR(bc(b, 0, 20), us, 0.02 * us) << b;
    // A window ahead of the member after it, whose fill the loop spreads too.
    EXPECT_LT(bc(b, 0, 20), bc(b, 1, 20)) << b;
  }
}

// No member of a chain runs faster than its own kernel with peers that never make it wait
// (StepOptions::chain_broadcast, chain_reduce: measured points, linear between). Measured with
// the real rank of 64 and free-running peers, 300 back to back (2026-12-05): broadcast 1 / 4
// / 16 / 64 MiB 14.3 / 22.1 / 53.2 / 135.7 us an operation on the H200; reduce (a member)
// 12.7 / 19.4 at 1 / 4 MiB on the H100, 42.1 / 104.2 at 16 / 64 MiB (the H200's root, scaled).
TEST(LoopTimeAtRank, NoMemberRunsFasterThanItsOwnKernel) {
  const NcclModel m(dgx(8), {}), links(dgx(8), linksOnly());
  const CommShape s = full(8);
  const auto bc = [&](const NcclModel& model, Func f, std::uint64_t b, int rank, Proto p) {
    return model.loopTimeAtRank(f, b, s, Algo::Ring, p, 16, rank, 0, 20);
  };
  // The kernels at a channel's bytes of 1 / 4 / 16 / 64 MiB on 16 channels.
  const ChainKernel bk = m.chainKernel(Func::Broadcast, Proto::Simple);
  const ChainKernel rk = m.chainKernel(Func::Reduce, Proto::Simple);
  const std::pair<std::uint64_t, double> bcast[] = {
      {1 << 20, 14.3}, {4 << 20, 22.1}, {16 << 20, 53.2}, {64 << 20, 135.7}};
  for (const auto& [b, us] : bcast) EXPECT_DOUBLE_EQ(bk.atBytes(b / 16.0), us) << b;
  const std::pair<std::uint64_t, double> reduce[] = {
      {1 << 20, 12.7}, {4 << 20, 19.4}, {16 << 20, 42.1}, {64 << 20, 104.2}};
  for (const auto& [b, us] : reduce) EXPECT_DOUBLE_EQ(rk.atBytes(b / 16.0), us) << b;
  // Between points linear, past the last on its slope: 8 MiB a channel.
  EXPECT_DOUBLE_EQ(bk.atBytes(2 << 20), 53.2 + (135.7 - 53.2) / 3);
  EXPECT_DOUBLE_EQ(bk.atBytes(8 << 20), 135.7 + (135.7 - 53.2) * 4 / 3);
  // The root (the head) at 1 / 4 / 16 MiB: its own kernel, over its links.
  for (std::uint64_t b : {1ULL << 20, 4ULL << 20, 16ULL << 20}) {
    EXPECT_DOUBLE_EQ(bc(m, Func::Broadcast, b, 0, Proto::Simple), bk.atBytes(b / 16.0)) << b;
    EXPECT_LT(bc(links, Func::Broadcast, b, 0, Proto::Simple), bk.atBytes(b / 16.0)) << b;
  }
  EXPECT_NEAR(bc(links, Func::Broadcast, 1 << 20, 0, Proto::Simple), 10.73, 0.01);
  // A member: the chain's fill once, then one operation a kernel of the members before it,
  // each operation's own (a reduce's members run recvReduceSend, faster than recvCopySend).
  for (Func f : {Func::Broadcast, Func::Reduce}) {
    const double kernel = (f == Func::Reduce ? rk : bk).atBytes(65536);
    const double alone = m.loopTimeAtRank(f, 1 << 20, s, Algo::Ring, Proto::Simple, 16, 5, 0, 1);
    EXPECT_GT(alone, kernel);
    EXPECT_NEAR(bc(m, f, 1 << 20, 5, Proto::Simple) * 20, alone + 19 * kernel, 1e-9)
        << model::toString(f);
  }
  // From 64 MiB the links are slower than the kernel: unchanged.
  for (std::uint64_t b : {64ULL << 20, 1ULL << 30}) {
    for (int rank : {0, 5, 63}) {
      EXPECT_DOUBLE_EQ(bc(m, Func::Broadcast, b, rank, Proto::Simple),
                       bc(links, Func::Broadcast, b, rank, Proto::Simple))
          << b << " " << rank;
    }
  }
  // The reduce's root ends the 63-hop chain: its fill once, then an operation of the slowest
  // member before it, the kernel (12.7 us at 1 MiB) where it is over a member's links. Measured
  // on the H200 and the H100 (rank 0 of 64, 20 back to back; 2026-12-05): 41.1 us an operation.
  EXPECT_NEAR(bc(m, Func::Reduce, 1 << 20, 0, Proto::Simple), 35.17, 0.01);
  EXPECT_NEAR(bc(links, Func::Reduce, 1 << 20, 0, Proto::Simple), 33.57, 0.01);
  // At 16 MiB a member's NET crossing (its chunks over a channel's share of the NIC) is slower
  // than the reduce kernel (42.1 us): the links set it.
  EXPECT_DOUBLE_EQ(bc(m, Func::Reduce, 16 << 20, 0, Proto::Simple),
                   bc(links, Func::Reduce, 16 << 20, 0, Proto::Simple));
  // Measured for Simple only: LL keeps the links' time.
  EXPECT_TRUE(m.chainKernel(Func::Broadcast, Proto::LL).empty());
  EXPECT_DOUBLE_EQ(bc(m, Func::Broadcast, 1 << 20, 0, Proto::LL),
                   bc(links, Func::Broadcast, 1 << 20, 0, Proto::LL));
  // The whole operation (the chain's last member) is far slower than one kernel.
  EXPECT_DOUBLE_EQ(m.time(Func::Broadcast, 1 << 20, s, Algo::Ring, Proto::Simple, 16),
                   links.time(Func::Broadcast, 1 << 20, s, Algo::Ring, Proto::Simple, 16));
  // chain_kernel_scale multiplies the curve; 0 removes it; out of range is refused.
  ModelConfig half;
  half.overrides.emplace_back("chain_kernel_scale", 0.5);
  EXPECT_DOUBLE_EQ(
      NcclModel(dgx(2), half).chainKernel(Func::Broadcast, Proto::Simple).atBytes(65536), 14.3 / 2);
  EXPECT_TRUE(links.chainKernel(Func::Reduce, Proto::Simple).empty());
  for (double bad : {-1.0, 101.0}) {
    ModelConfig mc;
    mc.overrides.emplace_back("chain_kernel_scale", bad);
    EXPECT_THROW(NcclModel(dgx(2), mc), InputError) << bad;
  }
}

// The chain kernels are the target GPU's: a cluster.gpu.model naming an H100 (the preset
// h100-dgx-ib's) gets the H100's measured points (twenty-fifth session, rank 5 of 64 free,
// 300 back to back: broadcast 15.1 / 23.9 / 55.3 / 152.2 us, reduce 13.2 / 19.5 / 45.4 /
// 118.6 at 1-64 MiB on 16 channels), any other the H200's; chain_kernel_scale scales the
// target's.
TEST(LoopTimeAtRank, ChainKernelsAreTheTargetGpus) {
  ClusterConfig h100 = dgx(8);
  h100.gpu.model = "NVIDIA H100 80GB HBM3";
  const NcclModel m(h100, {}), h200(dgx(8), {});
  const std::pair<std::uint64_t, std::pair<double, double>> points[] = {{1 << 20, {15.1, 13.2}},
                                                                        {4 << 20, {23.9, 19.5}},
                                                                        {16 << 20, {55.3, 45.4}},
                                                                        {64 << 20, {152.2, 118.6}}};
  for (const auto& [b, us] : points) {
    EXPECT_DOUBLE_EQ(m.chainKernel(Func::Broadcast, Proto::Simple).atBytes(b / 16.0), us.first);
    EXPECT_DOUBLE_EQ(m.chainKernel(Func::Reduce, Proto::Simple).atBytes(b / 16.0), us.second);
  }
  EXPECT_DOUBLE_EQ(h200.chainKernel(Func::Broadcast, Proto::Simple).atBytes(65536), 14.3);
  // Rank 5's broadcasts back to back at 1 MiB: a kernel of the members before it, the H100's.
  const CommShape s = full(8);
  const double h100_loop =
      m.loopTimeAtRank(Func::Broadcast, 1 << 20, s, Algo::Ring, Proto::Simple, 16, 5, 0, 300);
  const double h200_loop =
      h200.loopTimeAtRank(Func::Broadcast, 1 << 20, s, Algo::Ring, Proto::Simple, 16, 5, 0, 300);
  EXPECT_GT(h100_loop, h200_loop + 0.7);
  EXPECT_NEAR(h100_loop - h200_loop, 15.1 - 14.3, 0.01);
  for (const char* name : {"H100", "h100 SXM5"}) {
    ClusterConfig c = dgx(2);
    c.gpu.model = name;
    EXPECT_DOUBLE_EQ(NcclModel(c, {}).chainKernel(Func::Reduce, Proto::Simple).atBytes(65536), 13.2)
        << name;
  }
  ModelConfig half;
  half.overrides.emplace_back("chain_kernel_scale", 0.5);
  EXPECT_DOUBLE_EQ(NcclModel(h100, half).chainKernel(Func::Broadcast, Proto::Simple).atBytes(65536),
                   15.1 / 2);
}

// A reduce is the chain the other way round: from root + 1 to the root, which ends last.
TEST(LoopTimeAtRank, ReduceEndsAtTheRoot) {
  const NcclModel m(dgx(8), {});
  const CommShape s = full(8);
  const std::uint64_t b = 256ULL << 20;
  const double whole = m.time(Func::Reduce, b, s, Algo::Ring, Proto::Simple, 16);
  EXPECT_DOUBLE_EQ(m.timeAtRank(Func::Reduce, b, s, Algo::Ring, Proto::Simple, 16, 7, 7), whole);
  EXPECT_LT(m.timeAtRank(Func::Reduce, b, s, Algo::Ring, Proto::Simple, 16, 9, 7), whole);
  // Rank 8 heads the chain: it only sends.
  EXPECT_LT(m.timeAtRank(Func::Reduce, b, s, Algo::Ring, Proto::Simple, 16, 8, 7),
            m.timeAtRank(Func::Reduce, b, s, Algo::Ring, Proto::Simple, 16, 9, 7));
}

// A ring all-gather / reduce-scatter / all-reduce as one member sees it: its own finish in
// the recurrence. The node's first position (its last data comes over the NET hop into the
// node) ends with the whole operation, each position after it earlier.
TEST(TimeAtRank, RingMemberFinishesByItsPlaceBehindTheNetHop) {
  const NcclModel m(dgx(8), {});
  const CommShape s = full(8);
  for (Func f : {Func::AllGather, Func::ReduceScatter, Func::AllReduce}) {
    for (std::uint64_t b : {1ULL << 20, 256ULL << 20}) {
      const double whole = m.time(f, b, s, Algo::Ring, Proto::Simple, 16);
      double prev = whole;
      for (int r = 8; r < 16; ++r) {  // the second node: NET hop 7 -> 8
        const double t = m.timeAtRank(f, b, s, Algo::Ring, Proto::Simple, 16, r, -1);
        if (r == 8) {
          EXPECT_NEAR(t, whole, 1e-6 * whole) << toString(f) << " " << b;
        }
        EXPECT_LE(t, prev + 1e-9) << r;
        prev = t;
      }
      EXPECT_LT(prev, whole) << toString(f) << " " << b;
      const double r13 = m.timeAtRank(f, b, s, Algo::Ring, Proto::Simple, 16, 13, -1);
      if (b == 256ULL << 20) {
        EXPECT_LT(r13, 0.99 * whole) << toString(f);
      }
      // Equal to the recurrence's class of one.
      const std::vector<StartClass> classes{{0.0, 13}, {0.0, 1}, {0.0, 50}};
      EXPECT_DOUBLE_EQ(r13, m.ringFinishTimes(f, b, s, Proto::Simple, 16, classes)[1]);
    }
  }
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

ModelConfig noSliceTime() {
  ModelConfig mc;
  mc.overrides.emplace_back("ring_slice_us", 0.0);
  return mc;
}

TEST(Choose, HugeRingAllReduceRunsAtNicBusBandwidth) {
  // 8 x 50 GB/s rail NICs per node: ring bus bandwidth tends to 400 GB/s, less the GPU's
  // time per 1 MiB slice (1.9 us beside the slice's 41.9 us on a channel's 25 GB/s).
  const NcclModel m(dgx(16), {}), wire(dgx(16), noSliceTime());
  const std::uint64_t bytes = 1ULL << 34;
  const Choice c = m.choose(Func::AllReduce, bytes, full(16));
  ASSERT_EQ(c.algo, Algo::Ring);
  ASSERT_EQ(c.channels, 16);
  const auto bus = [&](double us) {
    return static_cast<double>(bytes) / us / 1e3 * busBwFactor(Func::AllReduce, 128);
  };
  EXPECT_NEAR(bus(wire.time(Func::AllReduce, bytes, full(16), c.algo, c.proto, c.channels)), 400.0,
              4.0);
  const double slice_us = (1 << 20) / 25e3;
  EXPECT_NEAR(bus(c.time_us), 400.0 * slice_us / (slice_us + 1.9), 4.0);
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
  // The links alone (a GPU time per slice would take the same time on either).
  const NcclModel fewer(four, noSliceTime()), more(dgx(16), noSliceTime());
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
  EXPECT_NEAR(m8.p2pTime(256 << 10, false, 64) - m8.p2pTime(128 << 10, false, 64), 131072 / 14.3e3,
              1e-9);
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

// A channel runs its p2p batches one after the other and a batch's peers at once, so the
// latency is paid once per batch: a group of 8 rounds (one node distance) per batch, the
// groups spread over the 16 p2p channels (one per peer from 64 ranks on). 64 ranks: 8
// groups, one batch a channel; 1024: 128 groups, 8; 8192: 1024, 64.
TEST(AllToAll, OneLatencyPerBatchOfAChannel) {
  ModelConfig no_proxy;  // the proxy's time per transfer bounds empty ones too
  no_proxy.overrides.emplace_back("net_request_us", 0.0);
  for (const auto& [nodes, batches] : {std::pair{8, 1}, std::pair{128, 8}, std::pair{1024, 64}}) {
    const NcclModel m(dgx(nodes), no_proxy);
    ASSERT_EQ(m.commChannels(full(nodes)), 16);
    const double fixed = m.allToAllTime(0, full(nodes)) - m.opOverheadUs(Algo::Ring, Proto::Simple);
    EXPECT_NEAR(fixed, batches * m.netStep(Proto::Simple, 1).latency_us, 1e-9) << nodes;
  }
}

// One proxy thread posts and tests every NET transfer of the rank (NCCL 2.28.9: 128 KiB p2p
// chunks, a quarter of it for less than a chunk a peer, half below 8 chunks; as few of a
// peer's channels as keep a part within a chunk): 64 ranks in 8 nodes, 56 NET peers.
TEST(AllToAll, TheProxyPostsEveryNetTransfer) {
  const NcclModel m(dgx(8), {});
  const CommShape s = full(8);
  ModelConfig no_proxy;
  no_proxy.overrides.emplace_back("net_request_us", 0.0);
  const NcclModel bytes_only(dgx(8), no_proxy);
  const double fixed = m.opOverheadUs(Algo::Ring, Proto::Simple) +
                       m.netStep(Proto::Simple, 1).latency_us;  // one batch a channel
  // 64 KiB a peer (4 MiB): 2 transfers of 32 KiB each way to each NET peer: 224 x 0.61 us,
  // above the NIC's 56 x 64 KiB.
  EXPECT_NEAR(m.allToAllTime(64 << 10, s), fixed + 224 * 0.61, 1e-6);
  EXPECT_GT(m.allToAllTime(64 << 10, s), bytes_only.allToAllTime(64 << 10, s) + 50);
  // 16 KiB a peer: one transfer each way.
  EXPECT_NEAR(m.allToAllTime(16 << 10, s), fixed + 112 * 0.61, 1e-6);
  // 256 KiB: 2 channels of 128 KiB in 64 KiB chunks: 448 transfers (273 us), under the NIC's
  // 294 us: the bytes bound it.
  EXPECT_DOUBLE_EQ(m.allToAllTime(256 << 10, s), bytes_only.allToAllTime(256 << 10, s));
  // 16 MiB a peer (1 GiB): the NIC's, by far.
  EXPECT_DOUBLE_EQ(m.allToAllTime(16 << 20, s), bytes_only.allToAllTime(16 << 20, s));
  // One node: no NET transfer, no proxy bound.
  EXPECT_DOUBLE_EQ(m.allToAllTime(64 << 10, full(1)), bytes_only.allToAllTime(64 << 10, full(1)));
  ModelConfig slow;
  slow.overrides.emplace_back("net_request_us", 1.0);
  EXPECT_NEAR(NcclModel(dgx(8), slow).allToAllTime(64 << 10, s), fixed + 224.0, 1e-6);
  ModelConfig bad;
  bad.overrides.emplace_back("net_request_us", -0.5);
  EXPECT_THROW(NcclModel(dgx(8), bad), InputError);
}

// NCCL's CPU time for an all-to-all's 2 N grouped calls: 2.9 + 1.49 x N us (real NCCL
// 2.28.9 on the H200's host: 14.8 us at N = 8, 26.7 at N = 16), overridable; the GPU time
// (allToAllTime, choose) does not include it.
TEST(AllToAll, HostTimeOfTheGroupedCalls) {
  const NcclModel m(dgx(8), {});
  EXPECT_NEAR(m.allToAllHostUs(full(1)), 2.9 + 1.49 * 8, 1e-9);
  EXPECT_NEAR(m.allToAllHostUs(full(8)), 2.9 + 1.49 * 64, 1e-9);  // 98.26
  EXPECT_EQ(m.allToAllHostUs({1, 1, 1}), 0.0);
  EXPECT_DOUBLE_EQ(m.choose(Func::AllToAll, 64ULL << 10, full(8)).time_us,
                   m.allToAllTime(1 << 10, full(8)));
  EXPECT_LT(m.allToAllTime(1 << 10, full(8)), m.allToAllHostUs(full(8)));
  ModelConfig mc;
  mc.overrides.emplace_back("a2a_group_host_us", 10.0);
  mc.overrides.emplace_back("a2a_peer_host_us", 0.5);
  EXPECT_NEAR(NcclModel(dgx(8), mc).allToAllHostUs(full(8)), 10.0 + 0.5 * 64, 1e-9);
  ModelConfig bad;
  bad.overrides.emplace_back("a2a_peer_host_us", -1.0);
  try {
    NcclModel b(dgx(8), bad);
    ADD_FAILURE() << "accepted a negative a2a_peer_host_us";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("model.overrides.a2a_peer_host_us"), std::string::npos);
  }
}

// A plugin that completes each NET step at post + GPU time + bytes/bw + the rest of the
// latency (netStep) reproduces the model's time of a NET-only ring (2 nodes x 1 GPU,
// all-gather, Simple).
TEST(NetStep, PluginTimingReproducesRingTime) {
  const NcclModel m(dgx(2), {});
  const CommShape s{2, 2, 1};
  const int ch = 4;
  const StepTiming st = m.netStep(Proto::Simple, ch, s);
  EXPECT_DOUBLE_EQ(st.ring_unit_us, 1.9);
  EXPECT_DOUBLE_EQ(m.netStep(Proto::LL128, ch, s).ring_unit_us, 0.0);
  EXPECT_DOUBLE_EQ(m.treeNetStep(Proto::Simple, ch, s).ring_unit_us, 0.0);
  // 64 MiB over 4 channels: 16 MiB per channel, 2 MiB chunks, 1 MiB slices, 8 NET steps.
  double link_free = 0, done = 0;
  for (int step = 0; step < 8; ++step) {
    const double start = link_free;
    link_free = start + st.ring_unit_us + (1 << 20) / (st.bandwidth_GBps * 1e3);
    done = link_free + st.latency_us - st.ring_unit_us;
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

// The GPU's time per ring slice (StepOptions::ring_slice_us) keeps a channel busy: a
// bandwidth-bound ring pays it for each of its units, a latency-bound one (one slice in flight
// per hop) keeps its time, as the real rank's kernel showed on the H200 (docs/model.md).
TEST(RingSliceTime, EachSliceKeepsTheChannelBusy) {
  const NcclModel m(dgx(8), {}), wire(dgx(8), noSliceTime());
  const CommShape s = full(8);
  const auto t = [&](const NcclModel& x, std::uint64_t bytes, Func f) {
    return x.time(f, bytes, s, Algo::Ring, Proto::Simple, 16);
  };
  // Bandwidth-bound (T = U t + alpha): U - 1 more times the slice's GPU time, the last
  // one's being inside the step latency. 256 MiB all-gather on 16 channels: 63 steps x 2
  // slices of 128 KiB, 1 loop; 1 GiB all-reduce: 126 steps x 2 slices.
  EXPECT_NEAR(t(m, 256ULL << 20, Func::AllGather) - t(wire, 256ULL << 20, Func::AllGather),
              125 * 1.9, 1e-6);
  EXPECT_NEAR(t(m, 1ULL << 30, Func::AllReduce) - t(wire, 1ULL << 30, Func::AllReduce), 251 * 1.9,
              1e-6);
  // 16 MiB (8 KiB slices): latency-bound. Two slices' GPU time (3.8 us) exceed an NVLink
  // step's latency (3.4 us), so NVLink steps take the former: +1.8 %.
  const double small = t(wire, 16ULL << 20, Func::AllGather);
  EXPECT_GT(t(m, 16ULL << 20, Func::AllGather), small);
  EXPECT_LT(t(m, 16ULL << 20, Func::AllGather), 1.02 * small);
  // Other protocols, trees and p2p keep their times.
  EXPECT_DOUBLE_EQ(m.time(Func::AllGather, 256ULL << 20, s, Algo::Ring, Proto::LL128, 16),
                   wire.time(Func::AllGather, 256ULL << 20, s, Algo::Ring, Proto::LL128, 16));
  EXPECT_DOUBLE_EQ(m.time(Func::AllReduce, 256ULL << 20, s, Algo::Tree, Proto::Simple, 16),
                   wire.time(Func::AllReduce, 256ULL << 20, s, Algo::Tree, Proto::Simple, 16));
  ModelConfig bad;
  bad.overrides.emplace_back("ring_slice_us", -1.0);
  EXPECT_THROW(NcclModel(dgx(2), bad), InputError);
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
