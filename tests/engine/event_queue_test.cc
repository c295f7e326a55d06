#include "crystal/replay/event_queue.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

namespace crystal::replay {
namespace {

TEST(EventQueue, PopsByTimeThenPushOrder) {
  EventQueue<int> q;
  q.push(30, 1);
  q.push(10, 2);
  q.push(30, 3);
  q.push(10, 4);
  q.push(20, 5);
  std::vector<int> got;
  std::vector<TimeNs> times;
  while (!q.empty()) {
    auto e = q.pop();
    got.push_back(e.payload);
    times.push_back(e.time);
  }
  EXPECT_EQ(got, (std::vector<int>{2, 4, 5, 1, 3}));
  EXPECT_EQ(times, (std::vector<TimeNs>{10, 10, 20, 30, 30}));
  EXPECT_EQ(q.pushed(), 5u);
}

// Many ties at few distinct times: pop order is exactly (time, push order), every run.
TEST(EventQueue, DeterministicUnderManyTies) {
  std::mt19937 rng(7);
  std::vector<std::pair<TimeNs, int>> pushed;
  EventQueue<int> q;
  for (int i = 0; i < 5000; ++i) {
    const TimeNs t = static_cast<TimeNs>(rng() % 16);
    pushed.emplace_back(t, i);
    q.push(t, i);
  }
  std::stable_sort(pushed.begin(), pushed.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& [t, i] : pushed) {
    ASSERT_EQ(q.nextTime(), t);
    const auto e = q.pop();
    ASSERT_EQ(e.payload, i);
  }
  EXPECT_TRUE(q.empty());
}

TEST(EventQueue, InterleavedPushPopKeepsOrder) {
  EventQueue<int> q;
  q.push(5, 0);
  q.push(1, 1);
  EXPECT_EQ(q.pop().payload, 1);
  q.push(5, 2);
  q.push(3, 3);
  EXPECT_EQ(q.pop().payload, 3);
  EXPECT_EQ(q.pop().payload, 0);
  EXPECT_EQ(q.pop().payload, 2);
}

TEST(Clock, ManualClockNeverGoesBack) {
  ManualClock c;
  c.advanceTo(100);
  EXPECT_EQ(c.now(), 100);
  EXPECT_THROW(c.advanceTo(99), std::logic_error);
}

TEST(Clock, WallClockAdvances) {
  WallClock c;
  const TimeNs a = c.now();
  const TimeNs b = c.now();
  EXPECT_GE(a, 0);
  EXPECT_GE(b, a);
}

TEST(Units, MicrosecondsToNanosecondsRoundsToNearest) {
  EXPECT_EQ(usToNs(1.0), 1000);
  EXPECT_EQ(usToNs(0.0004), 0);
  EXPECT_EQ(usToNs(0.0006), 1);
  EXPECT_DOUBLE_EQ(nsToUs(1500), 1.5);
}

}  // namespace
}  // namespace crystal::replay
