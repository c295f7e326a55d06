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
  ASSERT_EQ(m.fill(0, Proto::LL, dst.data(), 64, /*receiver step*/ 2), DataWritten::Mirrored);
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
  ASSERT_EQ(m.fill(3, Proto::Simple, dst.data(), 8, 11), DataWritten::Mirrored);
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
  ASSERT_EQ(m.fill(0, Proto::Simple, dst.data(), 32, 0), DataWritten::Mirrored);
  m.sendDone(0);
  EXPECT_EQ(m.copiesKept(), 0u);
}

TEST(MirrorChannel, MismatchUnknownOrForgottenSendsAreRefused) {
  MirrorChannel m;
  m.attachReceiver();
  std::vector<std::uint64_t> src(16, 5), dst(16, 0);
  m.sendPosted(0, Proto::LL, src.data(), 128);
  EXPECT_EQ(m.fill(0, Proto::LL128, dst.data(), 128, 0), DataWritten::OtherProto);
  EXPECT_EQ(m.fill(1, Proto::LL, dst.data(), 128, 1), DataWritten::NotSent);  // not yet
  for (std::uint64_t k = 1; k <= MirrorChannel::kDepth; ++k)
    m.sendPosted(k, Proto::LL, src.data(), 128);
  // Overwritten by k = kDepth.
  EXPECT_EQ(m.fill(0, Proto::LL, dst.data(), 128, 0), DataWritten::NotSent);
  m.sendPosted(40, Proto::LL, nullptr, 128);  // no registered buffer: nothing to read
  EXPECT_EQ(m.fill(40, Proto::LL, dst.data(), 128, 0), DataWritten::NotKept);
  std::vector<std::uint64_t> dev(16, 3);
  m.sendPosted(41, Proto::LL, dev.data(), 128, /*on_device=*/true);
  EXPECT_EQ(m.fill(41, Proto::LL, dst.data(), 128, 0), DataWritten::NotKept)
      << "a GPU send buffer is never read by the CPU";
}

TEST(MirrorChannel, ShortSendLeavesFlaggedZeroLinesAfterIt) {
  MirrorChannel m;
  m.attachReceiver();
  auto src = llLines(1, 7, 0);
  m.sendPosted(0, Proto::LL, src.data(), 16);
  std::vector<std::uint32_t> dst(12, 0xdead);
  ASSERT_EQ(m.fill(0, Proto::LL, dst.data(), 48, 4), DataWritten::Mirrored);
  EXPECT_EQ(dst, (std::vector<std::uint32_t>{7, 5, 8, 5, 0, 5, 0, 5, 0, 5, 0, 5}));
}

// An empty send (NCCL posts the second slice of a chunk smaller than two slices with 0 bytes)
// is mirrored as nothing: the GPU reads no byte of that receive, so none is written (a
// receive slot is up to 1 MiB: zeroing it cost the proxy ~50 us per step on the H200).
TEST(MirrorChannel, EmptySendWritesNothing) {
  MirrorChannel m;
  m.attachReceiver();
  std::vector<unsigned char> slot(64, 0xab);
  m.sendPosted(1, Proto::Simple, slot.data(), 0);
  EXPECT_EQ(m.fill(1, Proto::Simple, slot.data(), 64, 0), DataWritten::Mirrored);
  EXPECT_EQ(slot, std::vector<unsigned char>(64, 0xab));
  // LL: no data, but every line still gets this step's flags.
  std::vector<std::uint32_t> ll(8, 0xdead);
  m.sendPosted(2, Proto::LL, nullptr, 0);
  EXPECT_EQ(m.fill(2, Proto::LL, ll.data(), 32, 6), DataWritten::Mirrored);
  EXPECT_EQ(ll, (std::vector<std::uint32_t>{0, 7, 0, 7, 0, 7, 0, 7}));
  // A non-empty send outside any registered buffer cannot be read.
  m.sendPosted(3, Proto::Simple, nullptr, 16);
  EXPECT_EQ(m.fill(3, Proto::Simple, slot.data(), 64, 0), DataWritten::NotKept);
}

// A ring all-gather's first-step sends are sources: every receive of the loop mirrors one of
// them, long after kDepth later sends replaced them in the ring, and after NCCL reused their
// buffer.
TEST(MirrorChannel, SourcesOutliveTheRingOfRecentSends) {
  MirrorChannel m;
  m.attachReceiver();
  std::vector<unsigned char> own = {1, 2, 3, 4, 5, 6, 7, 8}, other(8, 9);
  m.sendPosted(0, Proto::Simple, own.data(), 8, false, /*source=*/true);
  for (std::uint64_t k = 1; k <= 2 * MirrorChannel::kDepth; ++k) {
    m.sendPosted(k, Proto::Simple, other.data(), 8);
    m.sendDone(k);
  }
  EXPECT_TRUE(m.sent(0));
  std::vector<unsigned char> dst(8, 0);
  ASSERT_EQ(m.fill(0, Proto::Simple, dst.data(), 8, 0), DataWritten::Mirrored);
  EXPECT_EQ(dst, own);
  m.sendDone(0);  // consumed once, kept anyway: more receives will use it
  std::fill(own.begin(), own.end(), 0xff);
  std::fill(dst.begin(), dst.end(), 0);
  ASSERT_EQ(m.fill(0, Proto::Simple, dst.data(), 8, 0), DataWritten::Mirrored);
  EXPECT_EQ(dst, (std::vector<unsigned char>{1, 2, 3, 4, 5, 6, 7, 8}));
  // Newer sources replace the oldest.
  for (std::uint64_t k = 100; k < 100 + MirrorChannel::kSources; ++k)
    m.sendPosted(k, Proto::Simple, other.data(), 8, false, true);
  EXPECT_FALSE(m.sent(0));
  EXPECT_EQ(m.fill(0, Proto::Simple, dst.data(), 8, 0), DataWritten::NotSent);
}

// A slot that already holds the send's bytes (same key, same length) is not copied again:
// Simple writes nothing, LL only its flags for this step.
TEST(MirrorChannel, SlotHoldingTheSameBytesIsNotCopiedAgain) {
  MirrorChannel m;
  m.attachReceiver();
  std::vector<unsigned char> src(16, 5);
  m.sendPosted(7, Proto::Simple, src.data(), 16, false, true);
  std::vector<unsigned char> slot(16, 0);
  MirrorChannel::Placed placed;
  ASSERT_EQ(m.fill(7, Proto::Simple, slot.data(), 16, 0, &placed), DataWritten::Mirrored);
  EXPECT_EQ(placed.k, 7u);
  EXPECT_EQ(placed.n, 16u);
  slot[3] = 0x42;  // a marker only a copy would overwrite
  ASSERT_EQ(m.fill(7, Proto::Simple, slot.data(), 16, 2, &placed), DataWritten::Mirrored);
  EXPECT_EQ(slot[3], 0x42) << "copied again";
  EXPECT_EQ(m.copiesSkipped(), 1u);
  MirrorChannel::Placed shorter{7, 8};  // the slot holds fewer bytes: copy
  ASSERT_EQ(m.fill(7, Proto::Simple, slot.data(), 16, 2, &shorter), DataWritten::Mirrored);
  EXPECT_EQ(slot[3], 5);
  EXPECT_EQ(shorter.n, 16u);

  auto lines = llLines(2, 40, 0);
  m.sendPosted(8, Proto::LL, lines.data(), 32, false, true);
  std::vector<std::uint32_t> ll(8, 0);
  MirrorChannel::Placed at;
  ASSERT_EQ(m.fill(8, Proto::LL, ll.data(), 32, 3, &at), DataWritten::Mirrored);
  EXPECT_EQ(ll, llLines(2, 40, 3));
  ll[0] = 0x77;  // data word: left alone by a flags-only rewrite
  ASSERT_EQ(m.fill(8, Proto::LL, ll.data(), 32, 4, &at), DataWritten::Mirrored);
  EXPECT_EQ(ll[0], 0x77u);
  EXPECT_EQ(ll[1], proto::llFlag(4));
  EXPECT_EQ(ll[7], proto::llFlag(4));
}

TEST(DeliverVirtualData, MirrorFallsBackToZero) {
  MirrorChannel m;
  m.attachReceiver();
  std::vector<std::uint32_t> ll(8, 0xdead);
  EXPECT_EQ(deliverVirtualData(DataPolicy::Mirror, &m, 0, Proto::LL, ll.data(), 32, 0),
            DataWritten::NotSent);
  EXPECT_EQ(ll, (std::vector<std::uint32_t>{0, 1, 0, 1, 0, 1, 0, 1}));
  std::vector<unsigned char> simple(16, 0xab);
  EXPECT_EQ(deliverVirtualData(DataPolicy::Mirror, nullptr, 0, Proto::Simple, simple.data(), 16, 0),
            DataWritten::Unpaired);
  EXPECT_EQ(simple, std::vector<unsigned char>(16, 0));  // stale mirrored bytes cleared
}

TEST(DeliverVirtualData, ZeroAndNonePerProtocol) {
  std::vector<std::uint32_t> ll(8, 0xdead);
  EXPECT_EQ(deliverVirtualData(DataPolicy::Zero, nullptr, 0, Proto::LL, ll.data(), 32, 2),
            DataWritten::PolicyLines);
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
  EXPECT_EQ(deliverVirtualData(DataPolicy::Zero, nullptr, 0, Proto::Simple, simple.data(), 16, 0),
            DataWritten::Nothing);
  EXPECT_EQ(deliverVirtualData(DataPolicy::None, nullptr, 0, Proto::Simple, simple.data(), 16, 0),
            DataWritten::Nothing);
  EXPECT_EQ(simple, std::vector<unsigned char>(16, 0xab));  // Simple: nobody else writes it
}

}  // namespace
}  // namespace crystal::plugin
