// A program's NCCL-tests table restated for the target: sizes of per-rank-block ops scaled
// as the interposer scales them, busbw for N.
#include "crystal/sweep/target_table.h"

#include <gtest/gtest.h>

#include "crystal/base/error.h"
#include "crystal/sweep/sweep_report.h"

namespace crystal::sweep {
namespace {

TEST(MappedBlockCount, FloorOfCountTimesKOverN) {
  EXPECT_EQ(mappedBlockCount(262144, 1, 64), 4096u);
  EXPECT_EQ(mappedBlockCount(131072, 2, 8192), 32u);
  EXPECT_EQ(mappedBlockCount(2, 1, 8192), 0u);
  EXPECT_EQ(mappedBlockCount(7, 3, 4), 5u);  // 21 / 4
  EXPECT_EQ(mappedBlockCount(1ULL << 62, 8191, 8192), (1ULL << 62) / 8192 * 8191);
  EXPECT_EQ(mappedBlockCount(100, 4, 4), 100u);
}

NcclTestsOutput program(std::string_view type = "float") {
  NcclTestsOutput o;
  o.nranks = 1;
  NcclTestsRow r;
  r.line = 12;
  r.size_bytes = 1 << 20;
  r.count = 262144;  // all-gather on 1 rank: one block of the whole size
  r.type = type;
  r.redop = "none";
  r.out_of_place = NcclTestsResult{100.0, 10.49, 0.0, -1};
  r.in_place = NcclTestsResult{50.0, 20.97, 0.0, 0};
  o.rows.push_back(r);
  return o;
}

TEST(TargetRows, AllGatherScalesBlockAndUsesTargetN) {
  const auto rows = targetRows(program(), TestOp::AllGather, 1, 64, false, "stdout");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].count, 4096u);
  EXPECT_EQ(rows[0].size_bytes, 4096u * 64 * 4);
  EXPECT_DOUBLE_EQ(rows[0].time_us, 100.0);
  EXPECT_DOUBLE_EQ(rows[0].algbw_GBps, 1048576.0 / 1e3 / 100.0);
  EXPECT_DOUBLE_EQ(rows[0].busbw_GBps, 1048576.0 / 1e3 / 100.0 * 63 / 64);
  EXPECT_DOUBLE_EQ(rows[0].program_busbw_GBps, 0.0);
  EXPECT_EQ(rows[0].wrong, -1);
  const auto in_place = targetRows(program(), TestOp::AllGather, 1, 64, true, "stdout");
  EXPECT_DOUBLE_EQ(in_place[0].time_us, 50.0);
  EXPECT_EQ(in_place[0].wrong, 0);
  EXPECT_TRUE(in_place[0].in_place);
}

TEST(TargetRows, AllReduceKeepsSize) {
  const auto rows = targetRows(program(), TestOp::AllReduce, 1, 8192, false, "stdout");
  EXPECT_EQ(rows[0].count, 262144u);
  EXPECT_EQ(rows[0].size_bytes, 1u << 20);
  EXPECT_DOUBLE_EQ(rows[0].busbw_GBps, rows[0].algbw_GBps * 2 * 8191 / 8192);
  const std::string t = formatSweepTable(rows, 8192, RowSource::Emulated);
  EXPECT_NE(t.find("busbw(program)"), std::string::npos);
  EXPECT_NE(t.find("N/A"), std::string::npos);
}

TEST(TargetRows, BadInputNamesLineOrRanks) {
  try {
    (void)targetRows(program("complex"), TestOp::AllReduce, 1, 8, false, "run.log");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("run.log:12:"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)targetRows(program(), TestOp::AllReduce, 4, 2, false, "x"), InputError);
  EXPECT_THROW((void)targetRows(program(), TestOp::AllReduce, 0, 2, false, "x"), InputError);
}

}  // namespace
}  // namespace crystal::sweep
