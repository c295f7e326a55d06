// Which store keys the virtual ranks write, as PyTorch 2.11 names them on the wire.
#include "virtual_ranks.h"

#include <gtest/gtest.h>

#include "crystal/base/error.h"

namespace crystal::store {
namespace {

TEST(StoreVirtualRanks, InitCounterHoldsEveryVirtualCheckIn) {
  VirtualRanks v({.world_size = 64, .real_ranks = {0, 32}});
  EXPECT_EQ(v.virtualCount(), 62);
  const auto keys = v.initialKeys();
  ASSERT_EQ(keys.size(), 1u);
  EXPECT_EQ(keys[0], (std::pair<std::string, std::string>{"init/", "62"}));
}

TEST(StoreVirtualRanks, DefaultGroupIdIsWrittenByRankZero) {
  VirtualRanks v({.world_size = 64, .real_ranks = {5}});
  const KeyClass k = v.classify("/default_pg/0//cuda//0");
  EXPECT_EQ(k.role, KeyRole::UniqueId);
  EXPECT_EQ(k.writer, 0);
  EXPECT_EQ(v.classify("/default_pg/0//cuda//3").writer, 0);
  EXPECT_FALSE(v.isReal(0));
  EXPECT_TRUE(v.isReal(5));
}

TEST(StoreVirtualRanks, ScalableRootsFollowPyTorchBlocks) {
  // 8192 ranks, 128 per root: 64 roots at 0, 128, ..., 8064.
  EXPECT_EQ(VirtualRanks::rootRank(0, 8192, 128), 0);
  EXPECT_EQ(VirtualRanks::rootRank(32, 8192, 128), 4096);
  EXPECT_EQ(VirtualRanks::rootRank(63, 8192, 128), 8064);
  // 10 ranks, 4 per root: 3 roots of 4, 3, 3 ranks (the first size%roots get one more).
  EXPECT_EQ(VirtualRanks::rootRank(1, 10, 4), 4);
  EXPECT_EQ(VirtualRanks::rootRank(2, 10, 4), 7);
  VirtualRanks v({.world_size = 8192, .real_ranks = {0, 4096}});
  EXPECT_EQ(v.classify("/default_pg/0//cuda//UniqueNCCLID:32").writer, 4096);
  EXPECT_EQ(v.classify("/default_pg/0//cuda//UniqueNCCLID:64").role, KeyRole::None);
}

TEST(StoreVirtualRanks, LazyP2pIdIsWrittenByTheLowRank) {
  VirtualRanks v({.world_size = 16, .real_ranks = {3}});
  const KeyClass k = v.classify("/default_pg/0//cuda//2:3");
  EXPECT_EQ(k.role, KeyRole::UniqueId);
  EXPECT_EQ(k.writer, 2);
  EXPECT_EQ(v.classify("/default_pg/0//cuda//3:2").role, KeyRole::None);
  EXPECT_EQ(v.classify("/default_pg/0//cuda//2:16").role, KeyRole::None);
}

TEST(StoreVirtualRanks, SubgroupIdWriterIsUnknown) {
  VirtualRanks v({.world_size = 16, .real_ranks = {3}});
  const KeyClass k = v.classify("/default_pg/0//1//cuda//0");
  EXPECT_EQ(k.role, KeyRole::UniqueId);
  EXPECT_EQ(k.writer, -1);
  EXPECT_NE(k.what.find("'1'"), std::string::npos) << k.what;
  EXPECT_EQ(v.classify("/default_pg/0//ab12cd//cuda//UniqueNCCLID:0").role, KeyRole::UniqueId);
}

TEST(StoreVirtualRanks, BarrierKeys) {
  VirtualRanks v({.world_size = 64, .real_ranks = {0}});
  EXPECT_EQ(v.virtualAdds("/default_pg/store_based_barrier_key:0"), 63);
  EXPECT_FALSE(v.virtualAdds("/default_pg/0//store_based_barrier_key:1").has_value());
  EXPECT_EQ(v.classify("/default_pg/0//store_based_barrier_key:1:last_worker").role,
            KeyRole::BarrierRelease);
}

TEST(StoreVirtualRanks, KeysNoVirtualRankWrites) {
  VirtualRanks v({.world_size = 64, .real_ranks = {0}});
  for (const char* key :
       {"/exception_dump", "init/", "/default_pg/0//cuda//x", "/default_pg/0//cuda//",
        "/default_pg/0//1//cpu//0/3", "/foo", "/default_pg/0//cuda//99999999999"})
    EXPECT_EQ(v.classify(key).role, KeyRole::None) << key;
}

TEST(StoreVirtualRanks, BadJobsAreRefused) {
  EXPECT_THROW(VirtualRanks({.world_size = 0, .real_ranks = {}}), InputError);
  EXPECT_THROW(VirtualRanks({.world_size = 4, .real_ranks = {4}}), InputError);
  EXPECT_THROW(VirtualRanks({.world_size = 4, .real_ranks = {1, 1}}), InputError);
  EXPECT_THROW(VirtualRanks({.world_size = 4, .real_ranks = {1}, .ranks_per_root = 0}), InputError);
}

}  // namespace
}  // namespace crystal::store
