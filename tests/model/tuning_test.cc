// Our reproduction of NCCL 2.28.9's tuning model against NCCL's own output, captured on
// the GPU machine (2 processes x 1 H200, NCCL_HOSTID h0/h1, Socket 10 Gb/s; log in
// docs/model/nccl-2.28.9-2x1-socket-rank0.log) and against hand-derived DGX values.
#include <gtest/gtest.h>

#include <cmath>

#include "crystal/model/nccl_model.h"

namespace crystal::model {
namespace {

NcclModel socketPair() {
  ClusterConfig c;
  c.nodes = 2;
  c.gpus_per_node = 1;
  c.fabric.nics_per_node = 1;
  c.fabric.nic.bandwidth_GBps = 1.25;
  ModelConfig m;
  m.overrides.emplace_back("nic_path_phb", 1.0);  // Socket NIC "attached to first CPU"
  return NcclModel(c, m);
}

// NCCL prints "latency/bandwidth" with %8.1f/%6.1f; recover both from two estimates.
struct Cell {
  double lat, bw;
};
Cell cell(const NcclModel& m, Func f, Algo a, Proto p, CommShape s) {
  const double t0 = m.ncclEstimate(f, 0, s, a, p);
  if (t0 < 0) return {-1, 0};
  const double t1 = m.ncclEstimate(f, 1000000000ULL, s, a, p);
  return {t0, 1e6 / (t1 - t0)};
}

TEST(Tuning, MatchesNcclTableTwoHostsSocket) {
  const NcclModel m = socketPair();
  const CommShape s{2, 2, 1};
  struct Row {
    Func f;
    Algo a;
    Proto p;
    double lat, bw;  // NCCL's printed values (bw 0.0 = disabled)
  };
  const Row rows[] = {
      {Func::Broadcast, Algo::Ring, Proto::LL, 9.3, 0.6},
      {Func::Broadcast, Algo::Ring, Proto::Simple, 22.4, 1.2},
      {Func::AllGather, Algo::Ring, Proto::LL, 11.6, 1.2},
      {Func::AllGather, Algo::Ring, Proto::Simple, 22.4, 2.4},
      {Func::ReduceScatter, Algo::Ring, Proto::Simple, 22.4, 2.4},
      {Func::AllReduce, Algo::Tree, Proto::LL, 16.8, 0.2},
      {Func::AllReduce, Algo::Tree, Proto::Simple, 36.4, 0.9},
      {Func::AllReduce, Algo::Ring, Proto::LL, 16.6, 0.6},
      {Func::AllReduce, Algo::Ring, Proto::Simple, 36.4, 1.2},
      {Func::AllGather, Algo::Pat, Proto::Simple, 17.6, 1.8},
      {Func::ReduceScatter, Algo::Pat, Proto::Simple, 17.6, 1.8},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(std::string(toString(r.f)) + " " + std::string(toString(r.a)) + " " +
                 std::string(toString(r.p)));
    const Cell c = cell(m, r.f, r.a, r.p, s);
    EXPECT_NEAR(c.lat, r.lat, 0.05);
    // Tree bandwidths are scaled by treeCorrectionFactor at 1 GB (1.0 for LL/Simple... );
    // compare with NCCL's rounding to 0.1.
    if (r.a != Algo::Tree) {
      EXPECT_NEAR(c.bw, r.bw, 0.05);
    }
  }
  // LL128 is off: the GPU-NIC path is PHB (NCCL prints the latency with bandwidth 0.0).
  EXPECT_LT(m.ncclEstimate(Func::AllReduce, 1024, s, Algo::Ring, Proto::LL128), 0);
  EXPECT_EQ(m.whyUnsupported(Func::AllReduce, s, Algo::Ring, Proto::LL128),
            "LL128 off: GPU-NIC path beyond PXN");
  EXPECT_EQ(m.commChannels(s), 2);
}

TEST(Tuning, TreeBandwidthWithCorrectionFactor) {
  // Tree/Simple AllReduce: NCCL bw 0.938 GB/s (printed 0.9); at 1 MiB (log2(2^20/64) = 14)
  // the correction factor is 0.5.
  const NcclModel m = socketPair();
  const double t = m.ncclEstimate(Func::AllReduce, 1 << 20, {2, 2, 1}, Algo::Tree, Proto::Simple);
  const double bw = 2.4 * 0.92 * 0.85 * 0.5;  // bwIntra x tree x pattern-TREE x bus->alg
  EXPECT_NEAR(t, 36.4 + (1 << 20) / (1000.0 * bw * 0.5), 0.01);
}

TEST(Tuning, ChoicesMatchNcclLog) {
  // NCCL's "AllReduce: N Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0}" lines.
  const NcclModel m = socketPair();
  const CommShape s{2, 2, 1};
  Choice c = m.choose(Func::AllReduce, 1024, s);
  EXPECT_EQ(c.algo, Algo::Ring);
  EXPECT_EQ(c.proto, Proto::LL);
  EXPECT_EQ(c.channels, 1);
  for (std::uint64_t bytes : {1ULL << 16, 1ULL << 20, 1ULL << 24}) {
    c = m.choose(Func::AllReduce, bytes, s);
    EXPECT_EQ(c.algo, Algo::Ring) << bytes;
    EXPECT_EQ(c.proto, Proto::Simple) << bytes;
    EXPECT_EQ(c.channels, 2) << bytes;
  }
}

TEST(Tuning, UnsupportedCombinationsSayWhy) {
  const NcclModel m{ClusterConfig{}, ModelConfig{}};
  const CommShape s{8, 1, 8};
  EXPECT_LT(m.time(Func::AllReduce, 1 << 20, s, Algo::Nvls, Proto::Simple, 8), 0);
  EXPECT_EQ(m.whyUnsupported(Func::AllReduce, s, Algo::Nvls, Proto::Simple), "NVLS not modelled");
  EXPECT_LT(m.time(Func::AllGather, 1 << 20, s, Algo::Tree, Proto::Simple, 8), 0);
  EXPECT_EQ(m.whyUnsupported(Func::AllGather, s, Algo::Tree, Proto::Simple),
            "Tree only for AllReduce");
  EXPECT_EQ(m.whyUnsupported(Func::AllGather, s, Algo::Pat, Proto::Simple),
            "PAT only with 1 GPU per node");
  EXPECT_NE(m.whyUnsupported(Func::AllReduce, s, Algo::CollNetDirect, Proto::Simple), "");
  EXPECT_EQ(m.whyUnsupported(Func::AllReduce, s, Algo::Ring, Proto::LL128), "");
}

TEST(Tuning, CostTableIsNcclLayout) {
  ClusterConfig cl;
  cl.nodes = 16;
  const NcclModel m{cl, ModelConfig{}};
  const CommShape s{128, 16, 8};
  const CostTable t = m.costTable(Func::AllReduce, 1 << 20, s);
  const Choice c = m.choose(Func::AllReduce, 1 << 20, s);
  float best = 1e30f;
  int ba = -1, bp = -1;
  for (int a = 0; a < kNumAlgos; ++a) {
    for (int p = 0; p < kNumProtos; ++p) {
      if (t[a][p] >= 0 && t[a][p] < best) {
        best = t[a][p];
        ba = a;
        bp = p;
      }
    }
  }
  EXPECT_EQ(ba, static_cast<int>(c.algo));
  EXPECT_EQ(bp, static_cast<int>(c.proto));
  EXPECT_EQ(t[static_cast<int>(Algo::Nvls)][static_cast<int>(Proto::Simple)], -1.0f);
  EXPECT_EQ(t[static_cast<int>(Algo::Pat)][static_cast<int>(Proto::Simple)], -1.0f);
}

}  // namespace
}  // namespace crystal::model
