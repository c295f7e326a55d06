#include "crystal/replay/live_scheduler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace crystal::replay {
namespace {

// 1 us latency; occupancy 1 ns per byte.
LiveCost linkCost(const LivePost& p) { return LiveCost{static_cast<TimeNs>(p.bytes), 1000}; }

LivePost send(std::uint64_t conn, std::uint64_t bytes, TimeNs at, TimeNs peer_ready = 0) {
  return LivePost{0, conn, LiveOpKind::Send, bytes, at, peer_ready};
}

TEST(LiveScheduler, ReleasesAtModelledTimeNotBefore) {
  ManualClock clock;
  LiveScheduler s(clock, linkCost);
  const auto t = s.post(send(1, 5000, 0));
  EXPECT_EQ(s.releaseTime(t), 6000);
  clock.advanceTo(5999);
  EXPECT_FALSE(s.test(t));
  EXPECT_TRUE(s.releaseDue().empty());
  clock.advanceTo(6000);
  EXPECT_TRUE(s.test(t));
  EXPECT_TRUE(s.test(t));  // completed tickets stay completed
  EXPECT_EQ(s.pending(), 0u);
  EXPECT_THROW((void)s.test(99), std::out_of_range);
}

// One connection carries one transfer at a time; latency overlaps the next transfer.
TEST(LiveScheduler, SerialisesOccupancyPerConnection) {
  ManualClock clock;
  LiveScheduler s(clock, linkCost);
  const auto a = s.post(send(1, 1000, 0));
  const auto b = s.post(send(1, 1000, 0));
  const auto c = s.post(send(2, 1000, 0));     // other connection: independent
  const auto d = s.post(send(1, 1000, 5000));  // link idle again by then
  EXPECT_EQ(s.releaseTime(a), 2000);
  EXPECT_EQ(s.releaseTime(b), 3000);
  EXPECT_EQ(s.releaseTime(c), 2000);
  EXPECT_EQ(s.releaseTime(d), 7000);
}

TEST(LiveScheduler, WaitsForPeerReadiness) {
  ManualClock clock;
  LiveScheduler s(clock, linkCost);
  const auto a = s.post(send(1, 0, 100, 10'000));
  EXPECT_EQ(s.releaseTime(a), 11'000);
}

TEST(LiveScheduler, ReleaseDueInReleaseOrder) {
  ManualClock clock;
  LiveScheduler s(clock, linkCost);
  const auto a = s.post(send(1, 3000, 0));  // 4000
  const auto b = s.post(send(2, 1000, 0));  // 2000
  const auto c = s.post(send(3, 2000, 0));  // 3000
  clock.advanceTo(3500);
  auto due = s.releaseDue();
  ASSERT_EQ(due.size(), 2u);
  EXPECT_EQ(due[0].ticket, b);
  EXPECT_EQ(due[1].ticket, c);
  EXPECT_EQ(due[1].release_ns, 3000);
  clock.advanceTo(4000);
  due = s.releaseDue();
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].ticket, a);
}

// Wall clock, several posting threads (as proxy threads would): every completion comes out
// once, never before its release time, and not absurdly late (generous bound for CI).
TEST(LiveScheduler, WallClockThreadsNeverReleaseEarly) {
  WallClock clock;
  LiveScheduler s(clock, [](const LivePost& p) {
    return LiveCost{0, static_cast<TimeNs>(p.bytes)};  // bytes = delay in ns
  });
  constexpr int kThreads = 4, kPerThread = 25;
  std::vector<std::thread> posters;
  for (int t = 0; t < kThreads; ++t)
    posters.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const std::uint64_t delay = 1'000'000u + static_cast<std::uint64_t>(i % 5) * 2'000'000u;
        (void)s.post(LivePost{t, static_cast<std::uint64_t>(t * 1000 + i), LiveOpKind::Send, delay,
                              clock.now(), 0});
      }
    });
  int got = 0;
  TimeNs worst_late = 0;
  while (got < kThreads * kPerThread) {
    auto c = s.waitNext(2'000'000'000);
    ASSERT_TRUE(c.has_value()) << "completion lost after " << got;
    const TimeNs now = clock.now();
    EXPECT_GE(now, c->release_ns);
    worst_late = std::max(worst_late, now - c->release_ns);
    ++got;
  }
  for (auto& th : posters) th.join();
  EXPECT_EQ(s.pending(), 0u);
  EXPECT_LT(worst_late, 500'000'000);  // 0.5 s: only a very loaded machine is that late
}

TEST(LiveScheduler, WaitNextTimesOutWhenNothingIsDue) {
  WallClock clock;
  LiveScheduler s(clock, linkCost);
  const TimeNs t0 = clock.now();
  EXPECT_FALSE(s.waitNext(2'000'000).has_value());
  EXPECT_GE(clock.now() - t0, 2'000'000);
}

}  // namespace
}  // namespace crystal::replay
