// Wire layer: NCCL's hash against values computed with NCCL 2.28.9's own bitops.h, struct
// layouts, bounds-checked decoders, setup-tag decoding, alias addressing, virtual slices.
#include "wire.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>

#include "crystal/base/error.h"
#include "crystal/host/bootstrap_host.h"
#include "crystal/live/handle.h"
#include "nccl_hash.h"
#include "net.h"
#include "virtual_slices.h"

namespace crystal::host {
namespace {

// Golden values: a throwaway probe compiled against NCCL 2.28.9 src/include/bitops.h.
TEST(NcclHash, MatchesNccl2289) {
  std::array<std::byte, 128> id{};
  for (int i = 0; i < 128; ++i) id[static_cast<std::size_t>(i)] = static_cast<std::byte>(i * 7 + 3);
  EXPECT_EQ(ncclGetHash(id), 0x343193647d986d6eULL);
  std::array<std::byte, 128> zero{};
  EXPECT_EQ(ncclGetHash(zero), 0xcc976ec6c24bb53cULL);
  const char* abc = "abcdefghijk";
  EXPECT_EQ(ncclGetHash(std::as_bytes(std::span(abc, 11))), 0xea7e8fbfef0a9830ULL);
  EXPECT_EQ(splitCommHash(0x1234567890abcdefULL, 1, 3), 0xb06dae6ded48e7d1ULL);
  UniqueId uid;
  std::memcpy(uid.bytes.data(), id.data(), 128);
  EXPECT_EQ(commHashOf(uid), 0x343193647d986d6eULL);
}

TEST(Wire, FrameAndHandshake) {
  std::vector<std::byte> out;
  wire::appendHandshake(out, 0x0102030405060708ULL, 1);
  ASSERT_EQ(out.size(), 12u);
  const auto hs = wire::decodeHandshake(out);
  EXPECT_EQ(hs.magic, 0x0102030405060708ULL);
  EXPECT_EQ(hs.type, 1);
  std::vector<std::byte> frame;
  const std::array<std::byte, 3> payload{std::byte{1}, std::byte{2}, std::byte{3}};
  wire::appendFrame(frame, payload);
  ASSERT_EQ(frame.size(), 7u);
  EXPECT_EQ(wire::decodeFrameSize(frame, 100, "t"), 3);
  EXPECT_THROW((void)wire::decodeFrameSize(frame, 2, "t"), ProtocolError);
  const std::int32_t neg = -5;
  EXPECT_THROW((void)wire::decodeFrameSize(wire::bytesOf(neg), 100, "t"), ProtocolError);
  EXPECT_THROW((void)wire::decodeFrameSize(std::span(frame).first(3), 100, "t"), ProtocolError);
  EXPECT_THROW((void)wire::decodeHandshake(std::span(out).first(11)), ProtocolError);
}

TEST(Wire, DecodersRejectWrongSizes) {
  std::vector<std::byte> b(171);
  EXPECT_THROW((void)wire::decodeExact<wire::ExtInfo>(b, "extInfo"), ProtocolError);
  b.resize(172);
  wire::ExtInfo info;
  info.rank = 7;
  info.nranks = 64;
  std::memcpy(b.data(), &info, sizeof info);
  EXPECT_EQ(wire::decodeExact<wire::ExtInfo>(b, "extInfo").nranks, 64);
  EXPECT_THROW((void)wire::decodeConnectEntries(std::vector<std::byte>(255)), ProtocolError);
  EXPECT_THROW((void)wire::decodeConnectEntries({}), ProtocolError);
  EXPECT_THROW((void)wire::decodeConnectEntries(std::vector<std::byte>(129 * 256)), ProtocolError);
  EXPECT_EQ(wire::decodeConnectEntries(std::vector<std::byte>(512)).size(), 2u);
}

TEST(Wire, SetupTags) {
  wire::SetupTag t;
  ASSERT_TRUE(wire::decodeSetupTag((3 << 8) + 1, 8, t));
  EXPECT_EQ(t.distance, 3);
  EXPECT_FALSE(t.sync);
  EXPECT_EQ(t.graph, 1);
  ASSERT_TRUE(wire::decodeSetupTag((1 << 8) + (1 << 7) + 2, 8, t));
  EXPECT_TRUE(t.sync);
  EXPECT_EQ(t.graph, 2);
  ASSERT_TRUE(wire::decodeSetupTag(5 << 8, 8, t));  // p2p (graph NULL)
  EXPECT_EQ(t.graph, 0);
  EXPECT_FALSE(wire::decodeSetupTag(8 << 8, 8, t));  // distance >= nranks
  EXPECT_FALSE(wire::decodeSetupTag(wire::kTagBarrier, 1 << 20, t));
  EXPECT_FALSE(wire::decodeSetupTag(wire::kTagCommSplit, 1 << 20, t));
  EXPECT_FALSE(wire::decodeSetupTag(0, 8, t));
}

TEST(Wire, AliasAddresses) {
  for (int r : {0, 1, 255, 256, 8191, 65535, kMaxAliasRank}) {
    const auto a = aliasAddress(r, 4242);
    EXPECT_EQ(a.port(), 4242);
    EXPECT_EQ(a.ipv4() >> 24, 127u);
    EXPECT_EQ(aliasRank(a), r);
  }
  EXPECT_EQ(aliasAddress(8191, 1).str(), "127.0.32.0:1");
  EXPECT_EQ(aliasRank(wire::SocketAddress::fromIpv4(0x0a000001, 1)), -1);
  EXPECT_EQ(aliasRank(wire::SocketAddress::fromIpv4(0x7f000000, 1)), -1);
}

TEST(VirtualSlices, PeerInfoCopiesGpuAndSetsVersion) {
  wire::PeerInfo real;
  real.rank = 0;
  real.host_hash = 111;
  real.cuda_comp_cap = 90;
  real.total_global_mem = 150ULL << 30;
  real.cu_mem_support = 1;
  real.version = 22809;
  const VirtualRankContext v{0xabc, 13, 64, 8, 5000};
  const auto p = virtualPeerInfo(v, real);
  EXPECT_EQ(p.rank, 13);
  EXPECT_EQ(p.cuda_dev, 5);
  EXPECT_EQ(p.nvml_dev, 5);
  EXPECT_EQ(p.version, 22809);
  EXPECT_EQ(p.cuda_comp_cap, 90);
  EXPECT_EQ(p.total_global_mem, 150ULL << 30);
  EXPECT_EQ(p.cu_mem_support, 1);
  EXPECT_NE(p.host_hash, real.host_hash);
  EXPECT_NE(p.host_hash, virtualPeerInfo({0xabc, 14, 64, 8, 5000}, real).host_hash);
  EXPECT_EQ(p.comm, 0u);
}

TEST(VirtualSlices, FlatTopoRanksOnAll64Channels) {
  wire::AllGatherInfo real;
  real.graph_info[1].n_channels = 2;
  real.graph_info[1].bw_inter = 12.5f;
  real.cpu_arch = 1;
  real.cpu_vendor = 2;
  const auto g = virtualGraphInfo({1, 9, 64, 8, 1}, real);
  EXPECT_EQ(g.graph_info[1].n_channels, 2);
  EXPECT_FLOAT_EQ(g.graph_info[1].bw_inter, 12.5f);
  for (int c = 0; c < wire::kMaxChannels; ++c) {
    EXPECT_EQ(g.topo_ranks.ring_recv[c], 9);
    EXPECT_EQ(g.topo_ranks.ring_send[c], 9);
    EXPECT_EQ(g.topo_ranks.ring_prev[c], -1);
    EXPECT_EQ(g.topo_ranks.ring_next[c], -1);
    EXPECT_EQ(g.topo_ranks.tree_to_parent[c], 9);
  }
  EXPECT_EQ(g.topo_ranks.nvls_head_num, 0);
  EXPECT_EQ(g.cpu_arch, 1);
  EXPECT_EQ(g.cpu_vendor, 2);
}

TEST(VirtualSlices, ClassifyAllGathers) {
  EXPECT_EQ(classifyAllGather(0, 120, 8), AllGatherKind::RingAddresses);
  EXPECT_EQ(classifyAllGather(1, 120, 8), AllGatherKind::PeerInfo);
  EXPECT_EQ(classifyAllGather(2, 2292, 8), AllGatherKind::GraphInfo);
  EXPECT_EQ(classifyAllGather(3, 8, 8), AllGatherKind::SplitInfo);
  EXPECT_EQ(classifyAllGather(4, 2, 8), AllGatherKind::RingConnInfo);
  EXPECT_THROW((void)classifyAllGather(2, 2280, 8), ProtocolError);
  EXPECT_THROW((void)classifyAllGather(5, 128, 8), ProtocolError);
}

TEST(VirtualSlices, RingDataAdvertisesAlias) {
  const auto d = virtualRingData({7, 300, 1024, 8, 6000});
  EXPECT_EQ(aliasRank(d.peer_address), 300);
  EXPECT_EQ(d.peer_address.port(), 6000);
  EXPECT_EQ(d.ras.host_hash, 0u);
}

}  // namespace
}  // namespace crystal::host
