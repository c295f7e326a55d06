// The live timing model: port serialisation, latency overlap, the ring recurrence of
// RingChannel (crystal/live/ring_timing.h) on small hand-checked cases.
#include "crystal/live/link_timing.h"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string_view>
#include <vector>

#include "crystal/live/ring_timing.h"
#include "crystal/live/target_model.h"

namespace crystal::live {
namespace {

TEST(LinkTiming, SendsSerialiseOnThePortAndOverlapLatency) {
  auto port = std::make_shared<PortQueue>();
  VirtualLink l(LinkParams{1000, 0.02}, port);      // 1 us, 50 GB/s
  EXPECT_EQ(l.postSend(0, 50'000), 1000 + 1000);    // occupies [0, 1000)
  // Posted before the first was delivered: the same burst, done when it left the port.
  EXPECT_EQ(l.postSend(100, 50'000), 2000);
  EXPECT_EQ(l.postSend(10'000, 0), 10'000 + 1000);  // idle port: latency only
}

// Reservations fill the first gap at or after their ready time, and touching ones merge.
TEST(LinkTiming, PortReservationsFillGaps) {
  PortQueue port;
  EXPECT_EQ(port.reserve(0, 10), 10);
  EXPECT_EQ(port.reserve(100, 10), 110);
  EXPECT_EQ(port.reserve(20, 10), 30) << "between the two";
  EXPECT_EQ(port.reserve(5, 100), 210) << "no gap of 100 before 110";
  EXPECT_EQ(port.reserve(30, 70), 100) << "exactly the gap [30, 100)";
  EXPECT_EQ(port.reserve(0, 5), 15) << "first gap: [10, 20)";
  EXPECT_EQ(port.freeAt(), 210);
  EXPECT_EQ(port.reserve(0, 0), 0);
}

// Spread reservations take the free time from `ready` on, across gaps, and leave the
// queue merged.
TEST(LinkTiming, SpreadReservationsUseEveryGap) {
  PortQueue q;
  EXPECT_EQ(q.reserve(0, 10), 10);
  EXPECT_EQ(q.reserve(14, 10), 24);
  EXPECT_EQ(q.reserve(27, 10), 37);
  // 4 in [10, 14), 3 in [24, 27), 3 after 37: ends at 40, one interval [0, 40).
  EXPECT_EQ(q.reserveSpread(5, 10), 40);
  EXPECT_EQ(q.reserve(0, 1), 41) << "no gap left before 40";
  EXPECT_EQ(q.reserveSpread(100, 5), 105) << "free: from ready";
  EXPECT_EQ(q.reserveSpread(99, 1), 100) << "exactly the gap before [100, 105)";
  EXPECT_EQ(q.reserveSpread(98, 1), 99);
  EXPECT_EQ(q.reserveSpread(95, 5), 107) << "3 in [95, 98), 2 after [98, 105)";
  EXPECT_EQ(q.reserveSpread(41, 54), 95) << "the gap [41, 95) to the end";
  EXPECT_EQ(q.reserve(0, 1), 108) << "one interval [0, 107)";
  EXPECT_EQ(q.freeAt(), 108);
  EXPECT_EQ(q.reserveSpread(7, 0), 7);
}

// Both kinds of reservation against a slot-by-slot timeline, mixed at random: reserve takes
// the first run of free slots long enough, reserveSpread the first free slots.
TEST(LinkTiming, ReservationsMatchASlotBySlotTimeline) {
  std::mt19937 rng(7);
  PortQueue q;
  std::vector<bool> busy(1 << 14, false);
  for (int i = 0; i < 2000; ++i) {
    const auto ready = static_cast<TimeNs>(rng() % 6000);
    const auto occ = static_cast<TimeNs>(rng() % 12);
    const bool spread = rng() % 2 == 0;
    TimeNs want = ready;
    if (spread) {
      TimeNs left = occ;
      for (TimeNs t = ready; left > 0; ++t)
        if (!busy[static_cast<std::size_t>(t)]) {
          busy[static_cast<std::size_t>(t)] = true;
          want = t + 1;
          --left;
        }
    } else if (occ > 0) {
      TimeNs t = ready;
      for (;; ++t) {
        TimeNs k = 0;
        while (k < occ && !busy[static_cast<std::size_t>(t + k)]) ++k;
        if (k == occ) break;
      }
      for (TimeNs k = 0; k < occ; ++k) busy[static_cast<std::size_t>(t + k)] = true;
      want = t + occ;
    }
    ASSERT_EQ(spread ? q.reserveSpread(ready, occ) : q.reserve(ready, occ), want)
        << i << (spread ? " spread " : " whole ") << ready << " + " << occ;
  }
}

// A p2p connection's virtual sender writes a unit per chunk / pace (its GPU), then the unit
// crosses the port and the latency: 10 kB at 0.1 ns/B written every 1000 ns, 200 ns on the
// wire, 1000 ns latency.
TEST(LinkTiming, GpuPacedSenderWritesEachUnitAfterTheOneBefore) {
  LinkParams p{1000, 0.02};
  p.sender_ns_per_byte = 0.1;
  VirtualLink link(p, std::make_shared<PortQueue>());
  for (std::uint64_t k = 0; k < 4; ++k) link.postRecv(k, 0, k == 0, 0, false);
  for (std::uint64_t k = 0; k < 4; ++k)
    EXPECT_EQ(link.recvArrival(k, 0, 10'000, 0, false),
              static_cast<TimeNs>(1000 * (k + 1) + 200 + 1000))
        << k;
}

TEST(LinkTiming, SendBurstPaysTheLatencyOnce) {
  // 1 us latency, 1000 ns per unit: the burst's first send completes at delivery, the next
  // ones when they left the link (never before the first's delivery), serial on the port.
  VirtualLink l(LinkParams{1000, 0.02}, std::make_shared<PortQueue>());
  EXPECT_EQ(l.postSend(0, 50'000, true), 2000);
  EXPECT_EQ(l.postSend(0, 50'000, false), 2000);    // left at 2000 = first delivery
  EXPECT_EQ(l.postSend(0, 50'000, false), 3000);    // left at 3000: no latency added
  EXPECT_EQ(l.postSend(5000, 50'000, false), 6000); // posted late (a full window): 5000 + 1000
  EXPECT_EQ(l.postSend(9000, 50'000, true), 11'000);  // idle, last delivered: latency again
  // Idle but posted within a latency of the last send leaving: a GPU slower than the link
  // between chunks of one burst: no latency.
  EXPECT_EQ(l.postSend(10'500, 50'000, true), 11'500);
}

TEST(LinkTiming, UnpairedReceiveBurstStreamsFromItsFirstPost) {
  // Tree, PAT and p2p peers are taken as ready: the virtual sender streams the burst from
  // its first receive's post, queued on the inbound port; latency once per burst.
  VirtualLink lone(LinkParams{1000, 0.02}, std::make_shared<PortQueue>());
  lone.postRecv(0, 300, true);
  EXPECT_EQ(lone.recvArrival(0, 300, 50'000, 300), 300 + 1000 + 1000);
  lone.postRecv(1, 300, false);
  EXPECT_EQ(lone.recvArrival(1, 300, 50'000, 300), 1300 + 1000 + 1000);
  // Posted later (NCCL's window was full until a receive completed): the unit left up to one
  // latency before the post (4000 -> 5000 on the port), arriving one occupancy after the post
  // instead of occupancy + latency.
  lone.postRecv(2, 5000, false);
  EXPECT_EQ(lone.recvArrival(2, 5000, 50'000, 5000), 6000);
  lone.postRecv(3, 5100, false);
  EXPECT_EQ(lone.recvArrival(3, 5100, 50'000, 5100), 7000);  // leaves behind unit 2
  // A new burst (none outstanding): from its post, latency again.
  lone.postRecv(4, 20'000, true);
  EXPECT_EQ(lone.recvArrival(4, 20'000, 50'000, 20'000), 22'000);
}

// One proxy thread posts and tests every NET transfer of a rank: 16 NET peers (one send and
// one receive each, 1 kB, 1 us latency) whose transfers the link alone would finish at once
// complete one proxy turn (600 ns) apart, sends and receives on one queue; the first at the
// link's time (a lone transfer pays nothing). NVLink peers (no proxy queue) do not wait.
TEST(LinkTiming, NetTransfersTakeTurnsOfTheRanksProxy) {
  LinkParams net{1000, 0.001};  // 1 kB: 1 ns on the port
  net.request_ns = 600;
  auto proxy = std::make_shared<PortQueue>();
  auto out = std::make_shared<PortQueue>();
  auto in = std::make_shared<PortQueue>();
  std::vector<std::unique_ptr<VirtualLink>> sends, recvs;
  std::vector<TimeNs> done;
  for (int peer = 0; peer < 16; ++peer) {
    sends.push_back(std::make_unique<VirtualLink>(net, out, proxy));
    recvs.push_back(std::make_unique<VirtualLink>(net, in, proxy));
    done.push_back(sends.back()->postSend(0, 1000));
    recvs.back()->postRecv(0, 0, true);
    done.push_back(*recvs.back()->recvArrival(0, 0, 1000, 0));
  }
  std::sort(done.begin(), done.end());
  EXPECT_EQ(done.front(), 1001) << "the first at the link's own time";
  for (std::size_t i = 1; i < done.size(); ++i) EXPECT_GE(done[i] - done[i - 1], 600) << i;
  EXPECT_EQ(done.back(), 1001 + 31 * 600) << "32 transfers: 31 turns after the first";
  // Transfers the link finishes 650 ns apart, a turn of 600 each: the proxy keeps up; the
  // 50 ns slivers between turns are not lost: one more, done by the link with the first,
  // takes 9 x 50 of them and 150 after the last turn.
  auto spaced = std::make_shared<PortQueue>();
  std::vector<std::unique_ptr<VirtualLink>> keep;
  for (int k = 0; k < 10; ++k) {
    keep.push_back(std::make_unique<VirtualLink>(net, std::make_shared<PortQueue>(), spaced));
    EXPECT_EQ(keep.back()->postSend(650 * k, 1000), 650 * k + 1001) << k;
  }
  VirtualLink extra(net, std::make_shared<PortQueue>(), spaced);
  EXPECT_EQ(extra.postSend(0, 1000), 9 * 650 + 1001 + 150);

  // The same without a proxy queue (NVLink), or with request_ns 0: the link's times only.
  LinkParams free_net = net;
  free_net.request_ns = 0;
  VirtualLink nvl(net, std::make_shared<PortQueue>());
  VirtualLink unpaced(free_net, std::make_shared<PortQueue>(), proxy);
  EXPECT_EQ(nvl.postSend(0, 1000), 1001);
  EXPECT_EQ(unpaced.postSend(0, 1000), 1001);

  // A transfer done long after the proxy's last turn is not held back; one done within a
  // turn of another waits for the gap.
  VirtualLink late(net, std::make_shared<PortQueue>(), proxy);
  EXPECT_EQ(late.postSend(100'000, 1000), 101'001);
  VirtualLink close(net, std::make_shared<PortQueue>(), proxy);
  EXPECT_EQ(close.postSend(100'100, 1000), 101'601);
}

// The closed-form and NcclModel targets give NET links the model's proxy turn.
TEST(LinkTiming, CommLinksCarryTheProxysTurnOnNetLinksOnly) {
  Config cfg;
  cfg.cluster.nodes = 8;
  cfg.cluster.gpus_per_node = 8;
  const auto m = makeTargetModel(cfg);
  const CommLinks links = commLinks(*m, cfg.cluster, 64);
  const auto want = static_cast<TimeNs>(m->netRequestUs() * 1e3 + 0.5);
  if (std::string_view(m->name()) == "NcclModel") {
    EXPECT_EQ(want, 610) << "net_request_us 0.61";
  }
  EXPECT_EQ(links.net.request_ns, want);
  EXPECT_EQ(links.net_p2p.request_ns, want);
  EXPECT_EQ(links.nvl.request_ns, 0);
  EXPECT_EQ(linkParams(*m, cfg.cluster).request_ns, want);
}

// 1 us hops of 50 GB/s (50'000 B: 1000 ns), no cap, so that numbers are easy to follow.
constexpr RingHop kHop{1000, 0.02, 0.0};

TEST(RingTiming, PeriodOneCopyRunsAtTheModelsPaceFromTheOperationsStart) {
  // One member per node: the previous member is a copy of the real rank's position, a target
  // rank: it sends unit 0 at the operation's start (the receive's post), not when the real
  // rank's (slow) proxy did.
  RingChannel ring({kHop}, kHop, 2, nullptr);
  ring.postRecv(0, 0, true);
  EXPECT_FALSE(ring.recvArrival(0, 0, 50'000, 0).has_value());  // no size known yet: wait
  EXPECT_EQ(ring.postSend(500, 50'000), 500 + 1000);            // done when it left
  EXPECT_EQ(ring.recvArrival(0, 0, 50'000, 600), 0 + 1000 + 1000);
  EXPECT_EQ(ring.recvArrival(1, 0, 50'000, 600), 3000);  // serial behind unit 0
  // Unit 2 forwards unit 0 (arrived 2000; the link is free from 2000 on): 2000 + 2000. The
  // real rank has not sent units 1..2 (a slow GPU): the copy does not wait for it.
  EXPECT_EQ(ring.recvArrival(2, 0, 50'000, 700), 4000);
  // A receive posted after its modelled arrival completes when posted.
  EXPECT_EQ(ring.recvArrival(3, 90'000, 50'000, 90'000), 90'000);
}

TEST(RingTiming, SendBeforeTheFirstReceiveStartsTheOperation) {
  RingChannel ring({kHop}, kHop, 2, nullptr);
  (void)ring.postSend(200, 50'000);
  ring.postRecv(0, 900, true);  // the proxy posted its receives late
  // Started at the send (200): arrival 200 + 2000, completed no earlier than posted.
  EXPECT_EQ(ring.recvArrival(0, 900, 50'000, 900), 2200);
}

TEST(RingTiming, OneUnitPerStepForLlProtocols) {
  // LL/LL128: every request is a ring step; unit 1 forwards unit 0 (no two-slice overlap).
  RingChannel ring({kHop}, kHop, 2, nullptr);
  ring.postRecv(0, 0, true, 1);
  (void)ring.postSend(0, 50'000);
  EXPECT_EQ(ring.recvArrival(0, 0, 50'000, 0), 2000);
  EXPECT_EQ(ring.recvArrival(1, 0, 50'000, 0), 4000);  // waits for unit 0's arrival
}

TEST(RingTiming, AnOperationRunsOnItsProtocolsHops) {
  // LL hops: 200 ns latency, 500 ns per 50 KB unit (the target's LL NVLink hop is far
  // shorter than Simple's NET hop); an LL operation's units use them, a Simple one's not.
  constexpr RingHop kLl{200, 0.01, 0.0};
  RingChannel ring({kHop}, kHop, 2, nullptr);
  ring.setProtocolHops(0, {kLl}, kLl);
  ring.postRecv(0, 0, true, 1, /*proto=*/0);
  (void)ring.postSend(0, 50'000);
  (void)ring.postSend(0, 50'000);
  EXPECT_EQ(ring.recvArrival(0, 0, 50'000, 0), 500 + 200);
  EXPECT_EQ(ring.recvArrival(1, 0, 50'000, 0), 700 + 700);  // forwards unit 0: one LL hop later
  ring.recvDone(true);
  ring.postRecv(2, 10'000, true, 2, /*proto=*/2);  // a Simple operation: kHop again
  (void)ring.postSend(10'000, 50'000);
  (void)ring.postSend(10'000, 50'000);
  EXPECT_EQ(ring.recvArrival(2, 10'000, 50'000, 10'000), 10'000 + 1000 + 1000);
  EXPECT_THROW(ring.setProtocolHops(1, {kLl, kLl}, kLl), std::invalid_argument);
}

// commLinks: the per-protocol ring hops follow the model's hop latencies and convert its
// per-data-byte bandwidth to wire bytes (LL lines: 8 data bytes in 16).
TEST(RingTiming, CommLinksGiveEachProtocolItsHop) {
  Config cfg;
  auto m = makeTargetModel(cfg);
  const CommLinks c = commLinks(*m, cfg.cluster, 64);
  const auto ll = static_cast<std::size_t>(model::Proto::LL);
  const auto simple = static_cast<std::size_t>(model::Proto::Simple);
  EXPECT_EQ(c.ring_net.latency_ns, c.ring_net_by[simple].latency_ns);
  EXPECT_LT(c.ring_net_by[ll].latency_ns, c.ring_net_by[simple].latency_ns)
      << "NCCL's LL NET latency is below Simple's";
  const double bw = m->netStep(model::Proto::LL, 1, c.shape).bandwidth_GBps;
  const double line = cfg.cluster.fabric.nic.bandwidth_GBps;  // commLinks caps at the NIC
  const double per_data_byte = 1.0 / (line > 0 && bw > line ? line : bw);
  EXPECT_NEAR(c.ring_net_by[ll].one_ns_per_byte, per_data_byte / 2.0, per_data_byte * 1e-9);
}

TEST(RingTiming, ChainOfVirtualMembersRunsTheRecurrence) {
  // Period 3 (real, v1, v2), 2 slices per step, 4 units: unit u of v1 waits for the real
  // rank's unit u-2, v2's for v1's u-2; the real rank receives v2's unit u.
  auto busy = std::make_shared<std::atomic<int>>(0);
  RingChannel ring({kHop, kHop, kHop}, kHop, 2, busy);
  ring.postRecv(0, 0, true);
  EXPECT_EQ(busy->load(), 1);
  for (int u = 0; u < 4; ++u) (void)ring.postSend(0, 50'000);  // real: 0..1000..4000 busy
  // v2 unit 0: no dependency, starts at the op start (0): 0 + 1000 + 1000.
  EXPECT_EQ(ring.recvArrival(0, 0, 50'000, 0), 2000);
  EXPECT_EQ(ring.recvArrival(1, 0, 50'000, 0), 3000);  // serial behind unit 0
  // v2 unit 2 waits for v1 unit 0 (delivered at 2000): 2000 + 2000.
  EXPECT_EQ(ring.recvArrival(2, 0, 50'000, 0), 4000);
  // v2 unit 3 waits for v1 unit 1: v1 serial 1000..2000 -> delivered 3000, +2000.
  EXPECT_EQ(ring.recvArrival(3, 0, 50'000, 0), 5000);
  ring.recvDone(true);
  EXPECT_EQ(busy->load(), 0);
}

TEST(RingTiming, ChannelsShareTheLinkWhileBusy) {
  auto busy = std::make_shared<std::atomic<int>>(0);
  RingChannel a({kHop}, kHop, 2, busy), b({kHop}, kHop, 2, busy);
  a.postRecv(0, 0, true);
  b.postRecv(0, 0, true);
  EXPECT_EQ(a.postSend(0, 50'000), 2000);  // half of the link: 2000 ns
  b.recvDone(true);
  EXPECT_EQ(b.postSend(0, 50'000), 1000);  // alone again: the whole link
}

// A broadcast root only sends: no receive marks its channels busy. The collective's own
// channel count (NCCL's profiler) shares the link all the same, so 32 channels carry what
// 16 would, not twice as much (on the H200 the root ran 30 % under the model on 32).
TEST(RingTiming, SendOnlyChannelsShareTheLinkByTheCollectivesCount) {
  auto busy = std::make_shared<std::atomic<int>>(0);
  for (int running : {1, 2, 4}) {
    RingChannel root({kHop}, kHop, 2, busy);
    EXPECT_EQ(root.postSend(0, 50'000, running), 1000 * running) << running << " running";
  }
  RingChannel unknown({kHop}, kHop, 2, busy);
  EXPECT_EQ(unknown.postSend(0, 50'000), 1000) << "count unknown: the whole link";
  // The root's pace is the chain's slowest link (NCCL's window keeps it near the slowest hop
  // downstream); once it receives in an operation (a ring), its own link's.
  constexpr RingHop kSlow{1000, 0.04, 0.0};
  RingChannel chain({kHop, kHop, kSlow}, kHop, 2, busy);
  EXPECT_EQ(chain.postSend(0, 50'000, 1), 2000) << "root: the slow hop's 50 kB";
  chain.postRecv(0, 10'000, true);
  EXPECT_EQ(chain.postSend(10'000, 50'000, 1), 11'000) << "in a ring: its own link";
}

// The GPU's time per ring slice (RingHop::unit_ns, out of the latency): a Simple ring's
// slices (2 a step) keep a virtual member's link that much longer each and cross it in the
// same step time; the real rank's GPU spends it for real; a chain's steps (1 a step:
// broadcast, reduce) and a root's sends have the model's chain timing, latency and bytes only.
TEST(RingTiming, RingSlicesPayTheGpusTimeChainsDoNot) {
  RingHop sliced = kHop;
  sliced.unit_ns = 300;
  sliced.latency_ns = kHop.latency_ns - 300;
  RingChannel root({sliced}, sliced, 2, nullptr);
  EXPECT_EQ(root.postSend(0, 50'000, 1), 1000) << "a root: bytes only";
  RingChannel ring({sliced}, sliced, 2, nullptr);
  ring.postRecv(0, 0, true);
  // The real rank's own send: its GPU spent the slice time before posting; the link takes
  // the bytes (and the credit comes after them).
  EXPECT_EQ(ring.postSend(0, 50'000), 1000) << "the real rank's slice: bytes only";
  EXPECT_EQ(ring.sendOccupancy(50'000), 1000);
  // The virtual members' slices: unit 0 crosses in the step latency (300 + 1000 + 700);
  // unit 1 waits for the link, busy 1300 a slice.
  EXPECT_EQ(ring.recvArrival(0, 0, 50'000, 0), 2000);
  EXPECT_EQ(ring.recvArrival(1, 0, 50'000, 0), 3300);
  RingChannel chain({sliced}, sliced, 2, nullptr);
  chain.postRecv(0, 0, true, /*units_per_step=*/1);
  EXPECT_EQ(chain.postSend(0, 50'000), 1000);
  EXPECT_EQ(chain.postSend(0, 50'000), 2000) << "a chain: serial behind its bytes";
  EXPECT_EQ(chain.recvArrival(0, 0, 50'000, 0), 2000);
}

TEST(RingTiming, ReceiveWithoutAnySendIsBoundedByTheStallRule) {
  // A chain broadcast's end only receives: no send says a unit's size. It waits for one
  // kStallSteps steps + slack from the operation's start, then takes its own size.
  RingChannel ring({kHop}, kHop, 2, nullptr);
  ring.postRecv(0, 100, true);
  const TimeNs step = 1000 + 1000;
  const TimeNs silence = RingChannel::kStallSteps * step + RingChannel::kStallSlackNs;
  EXPECT_FALSE(ring.recvArrival(0, 100, 50'000, 100 + silence).has_value());
  EXPECT_EQ(ring.recvArrival(0, 100, 50'000, 100 + silence + 1), 100 + step);
  ring.recvDone(true);
  // The next operation of a receive-only connection waits one step, not the whole bound.
  ring.postRecv(1, 500'000, true);
  EXPECT_FALSE(ring.recvArrival(1, 500'000, 50'000, 500'000 + step - 1).has_value());
  EXPECT_EQ(ring.recvArrival(1, 500'000, 50'000, 500'000 + step), 500'000 + step);
}

// A broadcast member or a reduce's root (NCCL's profiler named the chain and its head): its
// receives come down the chain from the head, the first a fill after the operation's first
// post, the rest one pace apart; no wait for a send to size them (the stall rule above cost
// rank 5 of 64 ~220 us per small broadcast on the H200, 2026-12-05). Back to back, the same
// chain streams on: the fill is paid once.
TEST(RingTiming, ChainReceivesComeDownTheChainFromItsHead) {
  constexpr RingHop kSlow{1000, 0.04, 0.0};  // the third position's link: half the bandwidth
  RingChannel ring({kHop, kHop, kSlow}, kHop, 2, nullptr);
  // 5 hops from the head (period 3, R at position 0): the members 1..5 places before R send
  // over chain[2], chain[1], chain[0], chain[2], chain[1]: 3 x (1000 + 1000) + 2 x (2000 +
  // 1000) = 12'000.
  const RingChannel::ChainTiming t = ring.chainTo(5, 50'000);
  ASSERT_EQ(t.fill, 12'000);
  ASSERT_EQ(t.pace, 2000);  // the slowest hop's crossing
  ring.postRecv(0, 100, true, 1, -1, 0, /*first=*/1);
  ring.startChain(0, 100, {5, 50'000});
  EXPECT_EQ(ring.recvArrival(0, 100, 4 << 20, 100), 100 + 12'000) << "no wait for a send";
  EXPECT_EQ(ring.recvArrival(1, 100, 4 << 20, 100), 100 + 14'000);
  EXPECT_EQ(ring.recvArrival(1, 100, 4 << 20, 100), 100 + 14'000) << "asked again: the same";
  EXPECT_EQ(ring.recvArrival(2, 20'000, 4 << 20, 20'000), 20'000) << "not before its post";
  ring.recvDone(true);
  // The next one, same chain, posted early (the proxy is ahead): it follows unit 2's pace.
  ring.postRecv(3, 200, true, 1, -1, 0, 1);
  ring.startChain(3, 200, {5, 50'000});
  EXPECT_EQ(ring.recvArrival(3, 200, 4 << 20, 200), 100 + 12'000 + 3 * 2000);
  ring.recvDone(true);
  // Posted late (the proxy frees a slot only once the last unit was consumed) but enqueued
  // by the program long before: the head started it when it ended the last, so it streams.
  ring.postRecv(4, 20'000, true, 1, -1, 0, 1);
  ring.startChain(4, 20'000, {5, 50'000, /*issued=*/300});
  EXPECT_EQ(ring.recvArrival(4, 20'000, 4 << 20, 20'000), 20'100) << "its unit is due at 20'100";
  ring.recvDone(true);
  // Enqueued long after: a new fill from its issue.
  ring.postRecv(5, 900'000, true, 1, -1, 0, 1);
  ring.startChain(5, 900'000, {5, 50'000, 899'000});
  EXPECT_EQ(ring.recvArrival(5, 900'000, 4 << 20, 900'000), 911'000) << "from its issue";
  ring.recvDone(true);
  // Another chain (other head): no streaming from the last.
  ring.postRecv(6, 0, true, 1, -1, 0, 1);
  ring.startChain(6, 0, {2, 50'000});
  EXPECT_EQ(ring.recvArrival(6, 0, 4 << 20, 0), 3000 + 2000) << "chain[2], chain[1]";
  ring.recvDone(true);
  // A placed operation that is no chain goes back to the ring's rules (here: no send yet,
  // so no arrival known).
  ring.postRecv(7, 50'000, true, 2, -1, 0, 1);
  ring.startChain(7, 50'000, {});
  EXPECT_FALSE(ring.recvArrival(7, 50'000, 50'000, 50'000).has_value());
}

// Back to back, each member runs its operations one after the other: the chain brings the
// real rank an operation no sooner after the last than the slowest member before it takes for
// one (its fixed cost and its units over its link, or its kernel: ChainOpCost). A reduce's
// root on the H200 (rank 0 of 64, 20 back to back, 1 MiB, 2026-12-05) took 41.1 us an
// operation where the chain's pace alone gave 25.6.
TEST(RingTiming, ChainStreamsNoFasterThanItsSlowestMembersOperation) {
  // 20 us and 10 GB/s (10'000 bytes a us) a channel.
  const model::ChainKernel kKernel20us10GBps{{0, 20.0}, {100'000, 30.0}};
  constexpr RingHop kSlow{1000, 0.04, 0.0};
  RingChannel ring({kHop, kHop, kSlow}, kHop, 2, nullptr);
  constexpr int kSimple = 2;
  // Links: 5000 + 2 units x 2000 (kSlow's crossing) = 9000 ns; kernel: 20 us + 2 x 50'000 B at
  // 10 GB/s = 30'000 ns.
  ring.setChainOpCost(kSimple, {5000, kKernel20us10GBps, kKernel20us10GBps});
  EXPECT_EQ(ring.chainTo(5, 50'000, 0, /*units=*/2).op, 30'000);
  EXPECT_EQ(ring.chainTo(5, 50'000).op, 0) << "units unknown";
  // A reduce's members run their own kernel (here 10 us and 10 GB/s: 20'000 ns).
  ring.setChainOpCost(kSimple, {5000, kKernel20us10GBps, {{0, 10.0}, {100'000, 20.0}}});
  EXPECT_EQ(ring.chainTo(5, 50'000, 0, 2, /*reduce=*/true).op, 20'000);
  EXPECT_EQ(ring.chainTo(5, 50'000, 0, 2).op, 30'000) << "a broadcast's";
  ring.setChainOpCost(kSimple, {5000, {}, {}});
  EXPECT_EQ(ring.chainTo(5, 50'000, 0, 2).op, 9000) << "no kernel: the links";
  // kSlow as the real rank's own link: the members before it send over kHop.
  RingChannel own_slow({kSlow, kHop, kHop}, kHop, 2, nullptr);
  own_slow.setChainOpCost(kSimple, {5000, {}, {}});
  EXPECT_EQ(own_slow.chainTo(2, 50'000, 0, 2).op, 7000);
  EXPECT_EQ(own_slow.chainTo(2, 50'000, 0, 2).pace, 2000) << "the chain's pace: its slowest";
  ring.setChainOpCost(kSimple, {5000, kKernel20us10GBps, kKernel20us10GBps});
  ring.postRecv(0, 100, true, 1, -1, 0, 1);
  ring.startChain(0, 100, {5, 50'000, 0, 2});
  EXPECT_EQ(ring.recvArrival(1, 100, 4 << 20, 100), 100 + 12'000 + 2000);
  ring.recvDone(true);
  // The next, enqueued at once: one operation of the slowest member after the last one's
  // first unit, not two units' pace (16'100).
  ring.postRecv(2, 200, true, 1, -1, 0, 1);
  ring.startChain(2, 200, {5, 50'000, 0, 2});
  EXPECT_EQ(ring.recvArrival(2, 200, 4 << 20, 200), 12'100 + 30'000);
  EXPECT_EQ(ring.recvArrival(3, 200, 4 << 20, 200), 12'100 + 30'000 + 2000);
  ring.recvDone(true);
  // Enqueued later than that: its own fill from its issue.
  ring.postRecv(4, 100'000, true, 1, -1, 0, 1);
  ring.startChain(4, 100'000, {5, 50'000, 90'000, 2});
  EXPECT_EQ(ring.recvArrival(4, 100'000, 4 << 20, 100'000), 102'000);
}

// The one rule both chains follow (RingChannel::startChain, P2pPacer::startChainOp).
TEST(RingTiming, ChainFirstArrivalStreamsOnFromTheLastOperation) {
  // Not streaming: the fill after the head started, whatever came before.
  static_assert(chainFirstArrival(1000, 500, false, 99'000, 90'000, 50'000) == 1500);
  // Streaming: the last one's units at the chain's pace came later.
  static_assert(chainFirstArrival(1000, 500, true, 9000, 2000, 3000) == 9000);
  // ... or one operation of the slowest member after the last one's first unit.
  static_assert(chainFirstArrival(1000, 500, true, 4000, 2000, 3000) == 5000);
  // ... or the program enqueued it later than both: its own fill.
  EXPECT_EQ(chainFirstArrival(10'000, 500, true, 4000, 2000, 3000), 10'500);
}

TEST(LinkTiming, HostStreamEofMeansTheVirtualSenderIsGone) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  VirtualLink l(LinkParams{1000, 0.02}, std::make_shared<PortQueue>());
  l.watchHost(sv[0]);  // owned by the link from now on
  EXPECT_TRUE(l.hostAlive(0));
  ::close(sv[1]);                                           // the host dies
  EXPECT_TRUE(l.hostAlive(VirtualLink::kHostCheckNs - 1));  // not looked at yet
  EXPECT_FALSE(l.hostAlive(VirtualLink::kHostCheckNs));
  EXPECT_FALSE(l.hostAlive(10 * VirtualLink::kHostCheckNs));  // and stays gone
  VirtualLink unwatched(LinkParams{1000, 0.02}, std::make_shared<PortQueue>());
  EXPECT_TRUE(unwatched.hostAlive(0));
}

TEST(LinkTiming, BuiltInTargetLinkOfTheClosedFormModel) {
  Config cfg;
  auto m = makeClusterTargetModel(cfg);
  const LinkParams lp = linkParams(*m, cfg.cluster);
  EXPECT_EQ(lp.latency_ns, 2750);  // 2 us NIC + 3 hops x 0.25 us
  EXPECT_DOUBLE_EQ(lp.ns_per_byte, 1.0 / 50.0);
  cfg.cluster.fabric.nic.bandwidth_GBps = 25.0;  // the port's line rate caps the model
  EXPECT_DOUBLE_EQ(linkParams(*makeTargetModel(cfg), cfg.cluster).ns_per_byte, 1.0 / 25.0);
}

}  // namespace
}  // namespace crystal::live
