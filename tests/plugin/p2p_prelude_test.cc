// Preludes (plugin/p2p_pacer.h P2pPacer::arm; p2p_agent_rules.h): the first receives of a ring
// operation R's stream has not reached yet, which the agent kernel releases by itself from R's
// first send of it on the channel. They come when the pacer's own releases would; the armed
// operation's later receives count on from them; only operations with a ring schedule are
// armed, and a send seen past the last operation is the armed one's first.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <vector>

#include "p2p_agent_abi.h"
#include "p2p_pacer.h"
#include "pacer_targets.h"

namespace crystal::test {
namespace {

using live::TimeNs;
using model::Func;
using plugin::P2pPacer;

live::CollectiveEntry ring(Func f, std::uint64_t bytes, int channels) {
  return {f, model::Algo::Ring, model::Proto::Simple, bytes, channels};
}

// Receive connection `conn`'s releases by value, with the time each became due, stepping the
// clock to each next due time from `now` on.
std::map<std::uint64_t, TimeNs> releasesOf(P2pPacer& pacer, int conn, TimeNs now) {
  std::map<std::uint64_t, TimeNs> due;
  std::vector<plugin::P2pRelease> out;
  for (int guard = 0; guard < 100'000 && now != P2pPacer::kNever; ++guard) {
    out.clear();
    const TimeNs next = pacer.release(now, out);
    for (const auto& r : out)
      if (r.conn == conn) due[r.value] = r.due;
    now = next;
  }
  return due;
}

TEST(P2pPrelude, UnitsComeWhenThePacersOwnReleasesWould) {
  // An 8-rank group's 1 MiB all-gather and 4 MiB all-reduce on 2 channels: 14 and 28 slices
  // a channel, all within a prelude; a 64-rank all-gather's 126, its first 32.
  struct Case {
    int n;
    live::CollectiveEntry e;
    std::size_t units;
  };
  for (const Case& k :
       {Case{8, ring(Func::AllGather, MiB, 2), 14}, Case{8, ring(Func::AllReduce, 4 * MiB, 2), 28},
        Case{64, ring(Func::AllGather, MiB, 2), 32}}) {
    auto armed = connect(k.n, 2, 0, targetNodes(k.n / 8));
    const std::optional<plugin::P2pPrelude> pre =
        armed->pacer.arm(k.e, plugin::p2p_agent::kPreUnits);
    ASSERT_TRUE(pre);
    ASSERT_EQ(pre->at.size(), k.units);
    EXPECT_EQ(pre->steps, 2);
    EXPECT_GT(pre->send_occupancy, 0);
    ASSERT_EQ(pre->recvs.size(), 2u);
    for (std::size_t c = 0; c < 2; ++c) {
      EXPECT_EQ(pre->recvs[c].conn, armed->chans[c].recv_conn);
      EXPECT_EQ(pre->recvs[c].base, 0u);
    }
    for (std::size_t u = 1; u < pre->at.size(); ++u) EXPECT_GT(pre->at[u], pre->at[u - 1]);

    // The same operation, not armed, R's first send at 0 on channel 0: unit u's receive
    // becomes due at pre->at[u], its value 2 (u + 1).
    auto plain = connect(k.n, 2, 0, targetNodes(k.n / 8));
    plain->pacer.opStarted(0, k.e);
    plain->pacer.observe(plain->chans[0].send_conn, 2, 0);
    const auto due = releasesOf(plain->pacer, plain->chans[0].recv_conn, 0);
    std::size_t compared = 0;
    for (std::size_t u = 0; u < pre->at.size(); ++u)
      if (const auto it = due.find(2 * (u + 1)); it != due.end()) {
        EXPECT_EQ(it->second, pre->at[u]) << "unit " << u << " of " << k.n << " ranks";
        ++compared;
      }
    EXPECT_GE(compared, pre->at.size() / 2) << "releases coalesced";
  }
}

TEST(P2pPrelude, TheArmedOperationCountsOnFromItsBase) {
  const live::CollectiveEntry e = ring(Func::AllGather, MiB, 1);  // 14 slices, 28 steps
  auto s = connect(8, 1);
  ASSERT_TRUE(s->pacer.arm(e, plugin::p2p_agent::kPreUnits));
  // R's kernel started it before the CPU saw its stream reach it: its first send at 1 us, and
  // it consumed 3 units the prelude released.
  s->pacer.observe(s->chans[0].send_conn, 2, 1'000);
  s->pacer.observe(s->chans[0].recv_conn, 6, 9'000);
  s->pacer.opStarted(20'000, e);
  EXPECT_TRUE(s->pacer.preludeOp());
  const auto due = releasesOf(s->pacer, s->chans[0].recv_conn, 20'000);
  ASSERT_FALSE(due.empty());
  // All 14 from the base at the arm (not from R's head at the start: 6 more), timed from the
  // first send (not from when the CPU saw the stream).
  EXPECT_EQ(due.rbegin()->first, 28u);
  auto plain = connect(8, 1);
  plain->pacer.opStarted(1'000, e);
  plain->pacer.observe(plain->chans[0].send_conn, 2, 1'000);
  const auto want = releasesOf(plain->pacer, plain->chans[0].recv_conn, 1'000);
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(due.rbegin()->second, want.rbegin()->second);

  // The kernel's anchor, earlier than any send the CPU saw, starts the next one.
  s->pacer.observe(s->chans[0].recv_conn, 28, 400'000);
  s->pacer.observe(s->chans[0].send_conn, 28, 400'000);
  ASSERT_TRUE(s->pacer.arm(e, plugin::p2p_agent::kPreUnits));
  s->pacer.anchored(500'000);
  s->pacer.observe(s->chans[0].send_conn, 30, 503'000);
  s->pacer.opStarted(510'000, e);
  const auto next = releasesOf(s->pacer, s->chans[0].recv_conn, 510'000);
  ASSERT_FALSE(next.empty());
  EXPECT_EQ(next.rbegin()->first, 56u);
  EXPECT_EQ(next.rbegin()->second, 500'000 + want.rbegin()->second - 1'000);
}

TEST(P2pPrelude, OnlyOperationsWithARingScheduleAreArmed) {
  auto s = connect(8, 2);
  live::CollectiveEntry tree = ring(Func::AllReduce, MiB, 2);
  tree.algo = model::Algo::Tree;
  EXPECT_FALSE(s->pacer.arm(tree, plugin::p2p_agent::kPreUnits));
  live::CollectiveEntry bcast = ring(Func::Broadcast, MiB, 2);
  bcast.root = 3;
  EXPECT_FALSE(s->pacer.arm(bcast, plugin::p2p_agent::kPreUnits));
  EXPECT_FALSE(s->pacer.arm(std::nullopt, plugin::p2p_agent::kPreUnits));
  EXPECT_FALSE(s->pacer.arm(ring(Func::AllGather, MiB, 2), 0));
  // Armed, then another operation starts: not taken for the armed one.
  ASSERT_TRUE(s->pacer.arm(ring(Func::AllGather, MiB, 2), plugin::p2p_agent::kPreUnits));
  s->pacer.opStarted(1'000, ring(Func::AllGather, 4 * MiB, 2));
  EXPECT_FALSE(s->pacer.preludeOp());
  // A channel with no paced receive (R receives over the NET) has nothing to release.
  auto send_only = connect(8, 0);
  (void)send_only->pacer.add(true, 0);
  EXPECT_FALSE(send_only->pacer.arm(ring(Func::AllGather, MiB, 1), plugin::p2p_agent::kPreUnits));
}

// Armed while one runs, an operation counts from where that one ends (R's head then); armed
// after the last one ended, from R's head as seen.
TEST(P2pPrelude, TheBaseIsWhereTheOperationBeforeEnds) {
  const live::CollectiveEntry e = ring(Func::AllGather, MiB, 1);  // 14 slices, 28 steps
  auto s = connect(8, 1);
  s->pacer.opStarted(0, e);
  s->pacer.observe(s->chans[0].send_conn, 2, 1'000);
  std::vector<plugin::P2pRelease> out;
  (void)s->pacer.release(12'000, out);                 // its first ones
  s->pacer.observe(s->chans[0].recv_conn, 4, 12'000);  // R took 2 of its 14 so far
  const auto pre = s->pacer.arm(e, plugin::p2p_agent::kPreUnits, 7'000);
  ASSERT_TRUE(pre);
  ASSERT_EQ(pre->recvs.size(), 1u);
  EXPECT_EQ(pre->recvs[0].conn, s->chans[0].recv_conn);
  EXPECT_EQ(pre->recvs[0].base, 28u);
  EXPECT_EQ(pre->start, 7'000);
  // The running one's receives go past its 14 as far as R's sends, armed next or not (a
  // count the CPU gave the operation before may have been short).
  for (std::uint64_t v = 4; v <= 30; v += 2) s->pacer.observe(s->chans[0].send_conn, v, 13'000);
  out.clear();
  (void)s->pacer.release(100'000'000, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].value, 30u);

  auto idle = connect(8, 1);
  idle->pacer.observe(idle->chans[0].recv_conn, 6, 1'000);
  const auto later = idle->pacer.arm(e, plugin::p2p_agent::kPreUnits);
  ASSERT_TRUE(later);
  EXPECT_EQ(later->recvs[0].base, 6u);
  EXPECT_EQ(later->start, -1);
}

// Armed while one runs on 2 of 3 channels: the third (no send of R's there yet: NCCL ran
// the operation on fewer channels than the log's) is not armed, and when the armed one starts
// its receives there count from R's head, not from a base of an arm before.
TEST(P2pPrelude, AChannelTheRunningOperationLeftIdleIsNotArmed) {
  const live::CollectiveEntry e = ring(Func::AllGather, MiB, 3);  // 14 slices, 28 steps
  auto s = connect(8, 3);
  // An earlier arm gave channel 2 a base; R has since gone past it there.
  ASSERT_TRUE(s->pacer.arm(e, plugin::p2p_agent::kPreUnits, 0));
  s->pacer.observe(s->chans[2].recv_conn, 100, 1'000);
  s->pacer.opStarted(2'000, e);
  s->pacer.anchored(2'000);
  for (int c = 0; c < 2; ++c) s->pacer.observe(s->chans[c].send_conn, 2, 3'000);
  ASSERT_TRUE(s->pacer.canArmAhead(10'000));
  const auto pre = s->pacer.arm(e, plugin::p2p_agent::kPreUnits, 0);
  ASSERT_TRUE(pre);
  ASSERT_EQ(pre->recvs.size(), 2u);
  EXPECT_EQ(pre->recvs[0].conn, s->chans[0].recv_conn);
  EXPECT_EQ(pre->recvs[1].conn, s->chans[1].recv_conn);
  s->pacer.opStarted(500'000, e);
  s->pacer.anchored(500'000);
  s->pacer.observe(s->chans[2].send_conn, 2, 501'000);
  const auto due = releasesOf(s->pacer, s->chans[2].recv_conn, 501'000);
  ASSERT_FALSE(due.empty());
  EXPECT_EQ(due.begin()->first, 102u);   // R's head 100, the first unit
  EXPECT_EQ(due.rbegin()->first, 128u);  // and its 14
}

// The same, but R takes the last operation's last receive on the channel left out of the arm
// only after the pacing thread saw its stream reach the armed one (the H100's split groups,
// 2026-12-06: R's head 26 at the start, 28 just after): that channel counts from where R's
// head went, as an unarmed operation's channels do, not from the head at the start (a unit
// short: R waited 10 s for its last receive).
TEST(P2pPrelude, AChannelLeftOutOfTheArmCountsFromRsHeadSeenLate) {
  const live::CollectiveEntry e = ring(Func::AllGather, MiB, 3);  // 14 slices, 28 steps
  auto s = connect(8, 3);
  s->pacer.opStarted(2'000, e);
  for (int c = 0; c < 2; ++c) s->pacer.observe(s->chans[c].send_conn, 2, 3'000);
  ASSERT_TRUE(s->pacer.canArmAhead(10'000));
  const auto pre = s->pacer.arm(e, plugin::p2p_agent::kPreUnits, 0);
  ASSERT_TRUE(pre);
  ASSERT_EQ(pre->recvs.size(), 2u) << "channel 2 had no send of R's: not armed";
  s->pacer.observe(s->chans[2].recv_conn, 98, 400'000);
  s->pacer.opStarted(500'000, e);
  s->pacer.anchored(500'000);
  s->pacer.observe(s->chans[2].recv_conn, 100, 500'100);  // the last one's, seen late
  for (std::uint64_t v = 2; v <= 28; v += 2) s->pacer.observe(s->chans[2].send_conn, v, 501'000);
  const auto due = releasesOf(s->pacer, s->chans[2].recv_conn, 501'000);
  ASSERT_FALSE(due.empty());
  EXPECT_EQ(due.begin()->first, 102u);
  EXPECT_EQ(due.rbegin()->first, 128u) << "all 14 from R's head 100";
}

// An armed operation whose anchors never come (R's head never reached a base: a count not as
// estimated) and whose first sends the CPU counted for the operation before: its receives
// still start, P2pPacer::kAnchorWaitNs (50 us) after it did, on every channel; R never waits
// for the pacing's stall bound (the H100's split groups, 10 s each, before).
TEST(P2pPrelude, AnArmedOperationWithoutAnchorsStillStarts) {
  const live::CollectiveEntry e = ring(Func::AllGather, MiB, 1);  // 14 slices, 28 steps
  auto s = connect(8, 1);
  s->pacer.opStarted(0, e);
  for (std::uint64_t v = 2; v <= 28; v += 2) s->pacer.observe(s->chans[0].send_conn, v, 1'000);
  std::vector<plugin::P2pRelease> out;
  (void)s->pacer.release(1'000'000, out);
  s->pacer.observe(s->chans[0].recv_conn, 28, 1'000'000);
  ASSERT_TRUE(s->pacer.canArmAhead(1'000'000));
  ASSERT_TRUE(s->pacer.arm(e, plugin::p2p_agent::kPreUnits, 0));
  s->pacer.opStarted(2'000'000, e);
  out.clear();
  EXPECT_EQ(s->pacer.release(2'049'000, out), 2'050'000);
  EXPECT_TRUE(out.empty());
  out.clear();
  (void)s->pacer.release(2'050'000, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].conn, s->chans[0].recv_conn);
  EXPECT_GT(out[0].value, 28u);
}

}  // namespace
}  // namespace crystal::test
