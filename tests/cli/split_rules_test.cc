// Split planning: parsing of --split, and the colors/keys virtual ranks get from the rules
// and the real ranks' own choices.
#include "crystal/control/split_rules.h"

#include <gtest/gtest.h>

#include "crystal/base/error.h"

namespace crystal::control {
namespace {

TEST(SplitRules, Parse) {
  const auto r = parseSplitRules("block:8,stride:4,same,none");
  ASSERT_EQ(r.size(), 4u);
  EXPECT_EQ(r[0].kind, SplitRule::Kind::Block);
  EXPECT_EQ(r[0].n, 8);
  EXPECT_EQ(r[1].kind, SplitRule::Kind::Stride);
  EXPECT_EQ(r[1].n, 4);
  EXPECT_EQ(r[2].kind, SplitRule::Kind::Same);
  EXPECT_EQ(r[3].kind, SplitRule::Kind::None);
  EXPECT_TRUE(parseSplitRules("").empty());
  for (const char* bad : {"block", "block:0", "block:x", "stride:", "same:2", "ring:4", "block:8,"})
    EXPECT_THROW((void)parseSplitRules(bad), InputError) << bad;
}

TEST(SplitPlanner, BlockGroupsTakeTheRealRanksColorAndKeyConvention) {
  SplitPlanner p(parseSplitRules("block:8"));
  const std::uint64_t world = 0xabc;
  p.markRootComm(world);
  p.recordReal(world, 1, {0, /*color=*/1000, /*key=*/0});  // real rank 0, key = its rank
  // Rank 0's group: the real color; key follows "key = rank".
  EXPECT_EQ(p.choose(world, 1, 5).color, 1000);
  EXPECT_EQ(p.choose(world, 1, 5).key, 5);
  // Other groups: their own colors, distinct from each other and from 1000.
  EXPECT_EQ(p.choose(world, 1, 8).color, 1);
  EXPECT_EQ(p.choose(world, 1, 15).color, 1);
  EXPECT_EQ(p.choose(world, 1, 63).color, 7);
  EXPECT_EQ(p.choose(world, 1, 63).key, 63);
}

TEST(SplitPlanner, StrideAndColorClashes) {
  SplitPlanner p(parseSplitRules("same,stride:8"));
  const std::uint64_t world = 1;
  p.markRootComm(world);
  p.recordReal(world, 2, {5, /*color=*/3, /*key=*/7});     // real rank 5 in group 5 uses color 3
  EXPECT_EQ(p.choose(world, 2, 13).color, 3);              // 13 % 8 == 5: with the real rank
  EXPECT_EQ(p.choose(world, 2, 13).key, 7);                // a constant key is copied
  EXPECT_EQ(p.choose(world, 2, 11).color, 3 + (1 << 20));  // group 3 must not take color 3
  EXPECT_EQ(p.choose(world, 2, 12).color, 4);
  // Split 1 is "same": everyone follows the real rank.
  p.recordReal(world, 1, {5, 9, 5});
  EXPECT_EQ(p.choose(world, 1, 40).color, 9);
  EXPECT_EQ(p.choose(world, 1, 40).key, 40);
}

TEST(SplitPlanner, NoColorAndUnlistedSplits) {
  SplitPlanner p(parseSplitRules("none"));
  p.markRootComm(7);
  EXPECT_EQ(p.choose(7, 1, 3).color, -1);
  p.recordReal(7, 2, {0, -1, 0});  // the real rank leaves: its group (everyone) leaves too
  EXPECT_EQ(p.choose(7, 2, 3).color, -1);
  // A split child (not root-created) follows "same".
  p.recordReal(99, 1, {2, 4, 2});
  EXPECT_EQ(p.choose(99, 1, 6).color, 4);
}

}  // namespace
}  // namespace crystal::control
