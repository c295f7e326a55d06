// LL / LL128 lines against hand-computed bytes, and the step reconstruction across the
// NCCL_STEPS slot wrap-around (plugin/proto_lines.h).
#include "proto_lines.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace crystal::plugin::proto {
namespace {

std::vector<std::uint32_t> words32(const void* p, std::size_t bytes) {
  std::vector<std::uint32_t> w(bytes / 4);
  std::memcpy(w.data(), p, bytes);
  return w;
}

std::vector<std::uint64_t> words64(const void* p, std::size_t bytes) {
  std::vector<std::uint64_t> w(bytes / 8);
  std::memcpy(w.data(), p, bytes);
  return w;
}

TEST(ProtoLines, FlagsFollowNcclDefinitions) {
  EXPECT_EQ(llFlag(0), 1u);
  EXPECT_EQ(llFlag(41), 42u);
  EXPECT_EQ(llFlag(0xfffffffeull), 0xffffffffu);
  EXPECT_EQ(llFlag(0xffffffffull), 0u);  // NCCL_LL_FLAG truncates to 32 bits
  EXPECT_EQ(llFlag(0x100000005ull), 6u);
  EXPECT_EQ(ll128Flag(0xffffffffull), 0x100000000ull);  // LL128: full 64-bit step + 1
}

TEST(ProtoLines, EncodeLLHandComputed) {
  // Payload 0x0706050403020100 0x0f0e0d0c0b0a0908 0x11 0x10 (18 bytes) at step 4 (flag 5):
  // line i = {payload[8i..8i+4), 5, payload[8i+4..8i+8), 5}, last line zero-padded.
  unsigned char payload[18];
  for (int i = 0; i < 18; ++i) payload[i] = static_cast<unsigned char>(i);
  alignas(16) unsigned char lines[48];
  std::memset(lines, 0xee, sizeof lines);
  encodeLL(lines, payload, sizeof payload, 4);
  const std::vector<std::uint32_t> want = {0x03020100, 5, 0x07060504, 5, 0x0b0a0908, 5,
                                           0x0f0e0d0c, 5, 0x00001110, 5, 0x00000000, 5};
  EXPECT_EQ(words32(lines, sizeof lines), want);
}

TEST(ProtoLines, WriteLLZeroAndFlagsOnly) {
  alignas(16) std::uint32_t buf[12];
  for (int i = 0; i < 12; ++i) buf[i] = 0xa0 + i;
  writeLL(buf, 40, 9, Fill::Zero);  // 2 whole lines; the partial third line is untouched
  const std::vector<std::uint32_t> zero = {0, 10, 0, 10, 0, 10, 0, 10, 0xa8, 0xa9, 0xaa, 0xab};
  EXPECT_EQ(words32(buf, sizeof buf), zero);
  for (int i = 0; i < 12; ++i) buf[i] = 0xa0 + i;
  writeLL(buf, 48, 9, Fill::FlagsOnly);  // data words stay
  const std::vector<std::uint32_t> flags = {0xa0, 10, 0xa2, 10, 0xa4, 10,
                                            0xa6, 10, 0xa8, 10, 0xaa, 10};
  EXPECT_EQ(words32(buf, sizeof buf), flags);
}

TEST(ProtoLines, CopyLLKeepsDataRewritesFlags) {
  // Sender lines of step 2 (flag 3) become receiver lines of step 16 (flag 17).
  alignas(16) std::uint32_t src[8] = {0x11, 3, 0x22, 3, 0x33, 3, 0x44, 3};
  alignas(16) std::uint32_t dst[8] = {};
  copyLL(dst, src, sizeof dst, 16);
  const std::vector<std::uint32_t> want = {0x11, 17, 0x22, 17, 0x33, 17, 0x44, 17};
  EXPECT_EQ(words32(dst, sizeof dst), want);
}

TEST(ProtoLines, LL128FlagInLastWordOfEachLine) {
  alignas(16) std::uint64_t buf[32];
  for (int i = 0; i < 32; ++i) buf[i] = 0x5500 + i;
  writeLL128(buf, 256, 7, Fill::FlagsOnly);
  auto w = words64(buf, sizeof buf);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(w[i], (i % 16 == 15) ? 8u : 0x5500u + i) << "word " << i;
  writeLL128(buf, 256, 0x1ffffffffull, Fill::Zero);
  w = words64(buf, sizeof buf);
  for (int i = 0; i < 32; ++i)
    EXPECT_EQ(w[i], (i % 16 == 15) ? 0x200000000ull : 0u) << "word " << i;
}

TEST(ProtoLines, CopyLL128CopiesFifteenWordsPerLine) {
  alignas(16) std::uint64_t src[16], dst[16];
  for (int i = 0; i < 16; ++i) src[i] = 0x1000 + i;  // src flag (word 15) = 0x100f
  std::memset(dst, 0, sizeof dst);
  copyLL128(dst, src, 128, 99);
  for (int i = 0; i < 15; ++i) EXPECT_EQ(dst[i], 0x1000u + i);
  EXPECT_EQ(dst[15], 100u);
}

TEST(ProtoLines, WriteLinesSimple) {
  unsigned char src[5] = {1, 2, 3, 4, 5}, dst[5] = {9, 9, 9, 9, 9};
  writeLines(Proto::Simple, dst, 5, 3, nullptr, Fill::FlagsOnly);
  EXPECT_EQ(dst[0], 9);  // nothing to flag: left as it is
  writeLines(Proto::Simple, dst, 5, 3, src, Fill::Zero);
  EXPECT_EQ(std::memcmp(dst, src, 5), 0);
  writeLines(Proto::Simple, dst, 5, 3, nullptr, Fill::Zero);
  EXPECT_EQ(dst[4], 0);
}

TEST(StepTracker, FirstPostIsItsSlot) {
  StepTracker t;
  EXPECT_EQ(t.next(0), 0u);
  StepTracker u;
  EXPECT_EQ(u.next(3), 3u);
  EXPECT_FALSE(u.next(8));
  EXPECT_FALSE(u.next(-1));
  EXPECT_EQ(u.last(), 3u);  // a bad slot changes nothing
}

TEST(StepTracker, ConsecutiveStepsWrapAroundTheSlots) {
  StepTracker t;
  for (std::uint64_t s = 0; s < 50; ++s) EXPECT_EQ(t.next(static_cast<int>(s % 8)), s);
}

TEST(StepTracker, SimpleSlicesAndOpRoundingSkipSteps) {
  // Simple ring: sliceSteps 2, an op of 3 posts then the next op's base rounded up to a
  // multiple of chunkSteps 4: steps 0 2 4 | 8 10 | 12 14 16 18 20 | 24 ...
  StepTracker t;
  const std::uint64_t steps[] = {0, 2, 4, 8, 10, 12, 14, 16, 18, 20, 24, 29, 30, 31, 32};
  for (std::uint64_t s : steps) EXPECT_EQ(t.next(static_cast<int>(s % 8)), s);
}

TEST(StepTracker, SameSlotAgainMeansEightStepsLater) {
  StepTracker t;
  EXPECT_EQ(t.next(5), 5u);
  EXPECT_EQ(t.next(5), 13u);
  EXPECT_EQ(t.next(4), 20u);
}

TEST(StepTracker, FlagsAcrossThe32BitWrapOfLL) {
  // A connection that has run 2^32 - 3 steps: the LL flag wraps to 0 exactly where NCCL's
  // (uint32)(step + 1) does, while the LL128 flag keeps counting.
  StepTracker t(0xfffffffcull);  // slot 4
  const std::uint64_t a = *t.next(5), b = *t.next(7), c = *t.next(0), d = *t.next(1);
  EXPECT_EQ(a, 0xfffffffdull);
  EXPECT_EQ(b, 0xffffffffull);
  EXPECT_EQ(c, 0x100000000ull);
  EXPECT_EQ(d, 0x100000001ull);
  alignas(16) std::uint32_t line[4];
  writeLL(line, 16, b, Fill::Zero);
  EXPECT_EQ(line[1], 0u);
  EXPECT_EQ(line[3], 0u);
  writeLL(line, 16, c, Fill::Zero);
  EXPECT_EQ(line[1], 1u);
  EXPECT_EQ(ll128Flag(b), 0x100000000ull);
}

}  // namespace
}  // namespace crystal::plugin::proto
