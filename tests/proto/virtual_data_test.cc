// Data policies of virtual senders (plugin/virtual_data.h): the mirror channel's pairing of
// sends and receives, fall-back to zero, and what zero/none write for each protocol.
#include "virtual_data.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "crystal/base/error.h"

namespace crystal::plugin {
namespace {

using proto::Proto;

// Sender LL lines of step `step` carrying payload words base, base+1, ...
std::vector<std::uint32_t> llLines(int lines, std::uint32_t base, std::uint64_t step) {
  std::vector<std::uint32_t> v;
  for (int i = 0; i < lines; ++i) {
    v.push_back(base + 2 * i);
    v.push_back(proto::llFlag(step));
    v.push_back(base + 2 * i + 1);
    v.push_back(proto::llFlag(step));
  }
  return v;
}

TEST(DataPolicy, ParseAndName) {
  EXPECT_EQ(parseDataPolicy("mirror", "x"), DataPolicy::Mirror);
  EXPECT_EQ(parseDataPolicy("zero", "x"), DataPolicy::Zero);
  EXPECT_EQ(parseDataPolicy("none", "x"), DataPolicy::None);
  EXPECT_STREQ(dataPolicyName(DataPolicy::None), "none");
  try {
    (void)parseDataPolicy("copy", "environment CRYSTAL_DATA");
    FAIL() << "accepted 'copy'";
  } catch (const InputError& e) {
    EXPECT_THAT(e.what(), testing::HasSubstr("environment CRYSTAL_DATA='copy'"));
  }
}

TEST(DataPolicy, ProtocolOfRegionFollowsRegistrationOrder) {
  EXPECT_EQ(protoOfRegion(0, 3), Proto::LL);
  EXPECT_EQ(protoOfRegion(1, 3), Proto::LL128);
  EXPECT_EQ(protoOfRegion(2, 3), Proto::Simple);
  EXPECT_EQ(protoOfRegion(3, 3), Proto::Simple);  // a user buffer registered later
  EXPECT_EQ(protoOfRegion(0, 2), Proto::LL);      // p2p with NCCL_ALLOC_P2P_NET_LL_BUFFERS
  EXPECT_EQ(protoOfRegion(1, 2), Proto::Simple);
  EXPECT_EQ(protoOfRegion(0, 1), Proto::Simple);  // the shared p2p pool
}

TEST(MirrorChannel, ReceiveCopiesTheLiveSendWithItsOwnFlags) {
  MirrorChannel m;
  m.attachReceiver();
  auto src = llLines(4, 100, /*sender step*/ 6);
  m.sendPosted(0, Proto::LL, src.data(), 64);
  std::vector<std::uint32_t> dst(16, 0xdead);
  ASSERT_TRUE(m.fill(0, Proto::LL, dst.data(), 64, /*receiver step*/ 2));
  EXPECT_EQ(dst, llLines(4, 100, 2));
  EXPECT_EQ(m.copiesKept(), 0u);  // read straight from the send buffer
}

TEST(MirrorChannel, CompletedSendIsKeptForALateReceive) {
  MirrorChannel m;
  m.attachReceiver();
  std::vector<unsigned char> src = {1, 2, 3, 4, 5, 6, 7, 8};
  m.sendPosted(3, Proto::Simple, src.data(), src.size());
  m.sendDone(3);
  std::fill(src.begin(), src.end(), 0xff);  // NCCL reuses the buffer after done
  std::vector<unsigned char> dst(8, 0);
  ASSERT_TRUE(m.fill(3, Proto::Simple, dst.data(), 8, 11));
  EXPECT_EQ(dst, (std::vector<unsigned char>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(m.copiesKept(), 1u);
}

TEST(MirrorChannel, NoCopyWithoutReceiverOrAfterConsumption) {
  MirrorChannel alone;
  std::vector<unsigned char> src(32, 7), dst(32, 0);
  alone.sendPosted(0, Proto::Simple, src.data(), 32);
  alone.sendDone(0);
  EXPECT_EQ(alone.copiesKept(), 0u);
  MirrorChannel m;
  m.attachReceiver();
  m.sendPosted(0, Proto::Simple, src.data(), 32);
  ASSERT_TRUE(m.fill(0, Proto::Simple, dst.data(), 32, 0));
  m.sendDone(0);
  EXPECT_EQ(m.copiesKept(), 0u);
}

TEST(MirrorChannel, MismatchUnknownOrForgottenSendsAreRefused) {
  MirrorChannel m;
  m.attachReceiver();
  std::vector<std::uint64_t> src(16, 5), dst(16, 0);
  m.sendPosted(0, Proto::LL, src.data(), 128);
  EXPECT_FALSE(m.fill(0, Proto::LL128, dst.data(), 128, 0));  // other protocol
  EXPECT_FALSE(m.fill(1, Proto::LL, dst.data(), 128, 1));     // not sent yet
  for (std::uint64_t k = 1; k <= MirrorChannel::kDepth; ++k)
    m.sendPosted(k, Proto::LL, src.data(), 128);
  EXPECT_FALSE(m.fill(0, Proto::LL, dst.data(), 128, 0));  // overwritten by k = kDepth
  m.sendPosted(40, Proto::LL, nullptr, 0);                 // device memory: unreadable
  EXPECT_FALSE(m.fill(40, Proto::LL, dst.data(), 128, 0));
}

TEST(MirrorChannel, ShortSendLeavesFlaggedZeroLinesAfterIt) {
  MirrorChannel m;
  m.attachReceiver();
  auto src = llLines(1, 7, 0);
  m.sendPosted(0, Proto::LL, src.data(), 16);
  std::vector<std::uint32_t> dst(12, 0xdead);
  ASSERT_TRUE(m.fill(0, Proto::LL, dst.data(), 48, 4));
  EXPECT_EQ(dst, (std::vector<std::uint32_t>{7, 5, 8, 5, 0, 5, 0, 5, 0, 5, 0, 5}));
}

TEST(DeliverVirtualData, MirrorFallsBackToZero) {
  MirrorChannel m;
  m.attachReceiver();
  std::vector<std::uint32_t> ll(8, 0xdead);
  deliverVirtualData(DataPolicy::Mirror, &m, 0, Proto::LL, ll.data(), 32, 0);
  EXPECT_EQ(ll, (std::vector<std::uint32_t>{0, 1, 0, 1, 0, 1, 0, 1}));
  std::vector<unsigned char> simple(16, 0xab);
  deliverVirtualData(DataPolicy::Mirror, nullptr, 0, Proto::Simple, simple.data(), 16, 0);
  EXPECT_EQ(simple, std::vector<unsigned char>(16, 0));  // stale mirrored bytes cleared
}

TEST(DeliverVirtualData, ZeroAndNonePerProtocol) {
  std::vector<std::uint32_t> ll(8, 0xdead);
  deliverVirtualData(DataPolicy::Zero, nullptr, 0, Proto::LL, ll.data(), 32, 2);
  EXPECT_EQ(ll, (std::vector<std::uint32_t>{0, 3, 0, 3, 0, 3, 0, 3}));
  std::fill(ll.begin(), ll.end(), 0xdead);
  deliverVirtualData(DataPolicy::None, nullptr, 0, Proto::LL, ll.data(), 32, 2);
  EXPECT_EQ(ll, (std::vector<std::uint32_t>{0xdead, 3, 0xdead, 3, 0xdead, 3, 0xdead, 3}));
  std::vector<std::uint64_t> l128(16, 9);
  deliverVirtualData(DataPolicy::None, nullptr, 0, Proto::LL128, l128.data(), 128, 2);
  EXPECT_EQ(l128[0], 9u);
  EXPECT_EQ(l128[15], 3u);
  deliverVirtualData(DataPolicy::Zero, nullptr, 0, Proto::LL128, l128.data(), 128, 3);
  EXPECT_EQ(l128[14], 0u);
  EXPECT_EQ(l128[15], 4u);
  std::vector<unsigned char> simple(16, 0xab);
  deliverVirtualData(DataPolicy::Zero, nullptr, 0, Proto::Simple, simple.data(), 16, 0);
  deliverVirtualData(DataPolicy::None, nullptr, 0, Proto::Simple, simple.data(), 16, 0);
  EXPECT_EQ(simple, std::vector<unsigned char>(16, 0xab));  // Simple: nobody else writes it
}

}  // namespace
}  // namespace crystal::plugin
