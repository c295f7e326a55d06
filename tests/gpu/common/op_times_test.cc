// op_times.h on the CPU: the loop's spread and its slowest operations, exactly.
#include "op_times.h"

#include <gtest/gtest.h>

namespace {

TEST(OpTimes, NamesTheSlowestAndTheRestsMean) {
  // 20 operations of 10 us, two stalled: #0 at 50 and #7 at 30 (the mean reads 13.0).
  std::vector<double> us(20, 10.0);
  us[0] = 50;
  us[7] = 30;
  const auto s = gpu_check::summarizeOpTimes(us, 2);
  EXPECT_DOUBLE_EQ(s.mean, 13.0);
  EXPECT_DOUBLE_EQ(s.min, 10.0);
  EXPECT_DOUBLE_EQ(s.median, 10.0);
  EXPECT_DOUBLE_EQ(s.max, 50.0);
  EXPECT_EQ(s.slowest, (std::vector<std::size_t>{0, 7}));
  EXPECT_DOUBLE_EQ(s.rest_mean, 10.0);
  EXPECT_EQ(gpu_check::formatOpTimes(us, 2),
            "min 10.0 median 10.0 max 50.0; without the 2 slowest (#0 50.0, #7 30.0) 10.0");
}

TEST(OpTimes, EvenCountsTakeTheMiddlePairsMeanAndTiesKeepLoopOrder) {
  const std::vector<double> us = {4, 1, 4, 2};
  const auto s = gpu_check::summarizeOpTimes(us, 2);
  EXPECT_DOUBLE_EQ(s.median, 3.0);
  EXPECT_EQ(s.slowest, (std::vector<std::size_t>{0, 2}));
  EXPECT_DOUBLE_EQ(s.rest_mean, 1.5);
}

TEST(OpTimes, ShortLoopsKeepAtLeastOneOperationInTheRest) {
  const auto one = gpu_check::summarizeOpTimes({7.0}, 3);
  EXPECT_TRUE(one.slowest.empty());
  EXPECT_DOUBLE_EQ(one.rest_mean, 7.0);
  EXPECT_EQ(gpu_check::formatOpTimes({7.0}, 3), "min 7.0 median 7.0 max 7.0");
  const auto two = gpu_check::summarizeOpTimes({3.0, 9.0}, 3);
  EXPECT_EQ(two.slowest, (std::vector<std::size_t>{1}));
  EXPECT_DOUBLE_EQ(two.rest_mean, 3.0);
  EXPECT_EQ(gpu_check::formatOpTimes({}, 3), "no operations");
}

}  // namespace
