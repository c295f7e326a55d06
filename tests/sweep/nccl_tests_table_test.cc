// Parser of NCCL-tests' stdout: a real-shaped table, per-iteration columns, one placement,
// and bad rows that must name their line.
#include "crystal/sweep/nccl_tests_table.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "crystal/base/error.h"

namespace crystal::sweep {
namespace {

// NCCL-tests' printf formats (src/util.cu): "%12li  %12li  %8s  %6s  %6s" then per
// placement "  %7s  %6s  %6s  %6g" (or "    N/A").
constexpr std::string_view kTwoRanks =
    "# nccl-tests version 2.17.6 nccl-headers=22809 nccl-library=22809\n"
    "# Collective test starting: all_gather_perf\n"
    "# nThread 1 nGpus 1 minBytes 8 maxBytes 1024 step: 2(factor) warmup iters: 5 iters: 20\n"
    "#\n"
    "# Using devices\n"
    "#  Rank  0 Group  0 Pid  11 on     node01 device  0 [0000:18:00] NVIDIA H200\n"
    "#  Rank  1 Group  0 Pid  12 on     node01 device  0 [0000:18:00] NVIDIA H200\n"
    "#       size         count      type   redop    root     time   algbw   busbw  #wrong     "
    "time   algbw   busbw  #wrong\n"
    "         256            32     float    none      -1    20.11    0.01    0.01       0    "
    "19.50    0.01    0.01       0\n"
    "        1024           128     float    none      -1  1.2e+03    0.00    0.00       3    "
    "19.90    0.05    0.03       0\n"
    "# Out of bounds values : 3 FAILED\n"
    "# Avg bus bandwidth    : 0.0133 \n";

TEST(NcclTestsTable, ReadsHeaderAndRows) {
  const NcclTestsOutput o = parseNcclTestsOutput(kTwoRanks, "stdout");
  EXPECT_EQ(o.test_name, "all_gather_perf");
  EXPECT_EQ(o.nranks, 2);
  EXPECT_FALSE(o.per_iteration);
  ASSERT_EQ(o.rows.size(), 2u);
  const NcclTestsRow& r = o.rows[1];
  EXPECT_EQ(r.line, 10);
  EXPECT_EQ(r.size_bytes, 1024u);
  EXPECT_EQ(r.count, 128u);
  EXPECT_EQ(r.type, "float");
  EXPECT_EQ(r.redop, "none");
  EXPECT_EQ(r.root, -1);
  ASSERT_TRUE(r.out_of_place && r.in_place);
  EXPECT_DOUBLE_EQ(r.out_of_place->time_us, 1200.0);
  EXPECT_EQ(r.out_of_place->wrong, 3);
  EXPECT_DOUBLE_EQ(r.in_place->time_us, 19.9);
  EXPECT_DOUBLE_EQ(r.in_place->busbw_GBps, 0.03);
  EXPECT_EQ(o.out_of_bounds, 3);
  EXPECT_DOUBLE_EQ(*o.avg_busbw_GBps, 0.0133);
}

TEST(NcclTestsTable, SeedFileWithNcclInfoLinesAndNA) {
  std::ifstream f(std::string(CORPUS_DIR) + "/all_reduce_1rank.txt");
  ASSERT_TRUE(f) << CORPUS_DIR;
  std::stringstream ss;
  ss << f.rdbuf();
  const NcclTestsOutput o = parseNcclTestsOutput(ss.str(), "all_reduce_1rank.txt");
  EXPECT_EQ(o.test_name, "all_reduce_perf");
  EXPECT_EQ(o.nranks, 1);
  ASSERT_EQ(o.rows.size(), 4u);
  EXPECT_EQ(o.rows[3].size_bytes, 1073741824u);
  EXPECT_EQ(o.rows[3].out_of_place->wrong, -1);
  EXPECT_DOUBLE_EQ(o.rows[3].out_of_place->time_us, 7351.3);
  EXPECT_EQ(o.out_of_bounds, 0);
}

TEST(NcclTestsTable, PerIterationColumnsAndSinglePlacement) {
  const std::string per_iter =
      "#       size         count      type   redop    root     time   algbw   busbw  #wrong  "
      "i_min   i_max   i_p99   i_cv%     time ...\n"
      "          64            16     float     sum      -1    10.00    0.01    0.01     N/A  "
      "  9.00   11.00   11.00    1.00    12.00    0.01    0.01     N/A    11.00   13.00   "
      "13.00    1.00\n";
  const NcclTestsOutput o = parseNcclTestsOutput(per_iter, "x");
  EXPECT_TRUE(o.per_iteration);
  ASSERT_EQ(o.rows.size(), 1u);
  EXPECT_DOUBLE_EQ(o.rows[0].out_of_place->time_us, 10.0);
  EXPECT_DOUBLE_EQ(o.rows[0].in_place->time_us, 12.0);

  const NcclTestsOutput one = parseNcclTestsOutput(
      "          64            16     float     sum      -1    10.00    0.01    0.01     N/A\n",
      "x");
  ASSERT_EQ(one.rows.size(), 1u);
  EXPECT_FALSE(one.rows[0].out_of_place);
  EXPECT_DOUBLE_EQ(one.rows[0].in_place->time_us, 10.0);
}

TEST(NcclTestsTable, EmptyAndForeignTextGiveNoRows) {
  EXPECT_TRUE(parseNcclTestsOutput("", "x").rows.empty());
  EXPECT_TRUE(parseNcclTestsOutput("hello world\nNCCL WARN x\n\n\n", "x").rows.empty());
}

std::string errorOf(std::string_view text) {
  try {
    (void)parseNcclTestsOutput(text, "run.log");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(NcclTestsTable, BadRowsNameTheirLine) {
  const std::string header = "# Collective test starting: all_reduce_perf\n";
  EXPECT_NE(errorOf(header + "8 2 float sum -1 1.0 0.0\n").find("run.log:2: a result row"),
            std::string::npos);
  EXPECT_NE(errorOf(header + "8 two float sum -1 1 0 0 N/A\n").find("run.log:2: count 'two'"),
            std::string::npos);
  EXPECT_NE(errorOf("8 2 float sum -7 1 0 0 N/A\n").find("run.log:1: root '-7'"),
            std::string::npos);
  EXPECT_NE(errorOf("8 2 float sum -1 fast 0 0 N/A\n").find("in-place time 'fast'"),
            std::string::npos);
  EXPECT_NE(errorOf("8 2 float sum -1 1 0 0 N/A 1 0 -2 N/A\n").find("in-place busbw '-2'"),
            std::string::npos);
  EXPECT_NE(errorOf("8 2 float sum -1 1 0 0 many 1 0 0 N/A\n").find("out-of-place #wrong"),
            std::string::npos);
  EXPECT_NE(errorOf("99999999999999999999999 2 float sum -1 1 0 0 N/A\n").find("size '"),
            std::string::npos);
  // The message quotes the line, cut to a readable length.
  const std::string long_line = "8 2 float sum -1 x " + std::string(1000, 'y') + " 0 0 N/A\n";
  EXPECT_LT(errorOf(long_line).size(), 300u);
}

}  // namespace
}  // namespace crystal::sweep
