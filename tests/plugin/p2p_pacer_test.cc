// P2P pacing (plugin/p2p_pacer.h): a real rank whose ring neighbours are virtual GPUs of its
// node, driven by a stand-in for NCCL's Simple ring kernel on a virtual clock, takes the time
// `crystal simulate`'s model predicts; its counters never run ahead of what the operation
// uses.
#include <gtest/gtest.h>

#include <cmath>
#include <deque>
#include <cstdio>
#include <vector>

#include "crystal/model/nccl_model.h"
#include "nccl_constants.h"
#include "p2p_agent_abi.h"
#include "p2p_pacer.h"
#include "state.h"

namespace crystal::test {
namespace {

using live::TimeNs;
using model::Func;
using plugin::P2pPacer;

constexpr std::uint64_t MiB = 1u << 20;

Config oneNode() {
  Config cfg;  // built-in target: H200 nodes of 8 GPUs
  cfg.cluster.nodes = 1;
  return cfg;
}

// One ring channel of the real rank as NCCL 2.28.9's Simple ring kernel runs it with an
// instantaneous GPU: per slice, wait for the receive (R's recv tail) and the send credit (R's
// send head), then post both (V's recv tail, V's send head). The slice program is
// device/all_reduce.h's (step 0 sends, 2n-3 steps receive and send, the last receives) or
// all_gather.h's / reduce_scatter.h's (n-1 sends, n-1 receives). Beside it, the agent
// kernel's part (p2p_agent_abi.h): credits one slice occupancy apart, receive entries once
// due and their slot is free.
struct KernelChannel {
  int send_conn = -1, recv_conn = -1;
  std::vector<std::pair<bool, bool>> slices;  // per slice: receives, sends
  std::size_t next = 0;
  std::uint64_t send_step = 0, recv_step = 0;  // R's own step counters
  std::uint64_t head = 0, tail = 0;            // R's send head, recv tail (what the agent stored)
  std::deque<std::pair<TimeNs, std::uint64_t>> credits;  // agent: (due, head value)
  TimeNs last_credit = 0;
  std::deque<plugin::P2pEntry> entries;  // agent: receive entries
};

std::vector<std::pair<bool, bool>> program(Func f, int n, std::uint64_t units) {
  // units = sends per channel; a loop has `steps` sends of 2 slices each.
  const int sends_per_loop = f == Func::AllReduce ? 2 * (n - 1) : n - 1;
  const std::uint64_t loops = units / (2 * static_cast<std::uint64_t>(sends_per_loop));
  std::vector<std::pair<bool, bool>> out;
  for (std::uint64_t l = 0; l < loops; ++l) {
    for (int s = 0; s <= sends_per_loop; ++s)
      for (int j = 0; j < 2; ++j) out.emplace_back(s > 0, s < sends_per_loop);
  }
  return out;
}

struct Result {
  double us = 0;
  bool stalled = false;
  bool over_released = false;
};

Result runOp(P2pPacer& pacer, std::vector<KernelChannel>& chans, const live::CollectiveEntry& e,
             TimeNs start) {
  pacer.opStarted(start, e);
  const auto step = static_cast<std::uint64_t>(pacer.sliceSteps());
  const TimeNs occ = pacer.sliceOccupancyNs();
  TimeNs now = start, end = start;
  std::vector<plugin::P2pEntry> out;
  Result r;
  auto find = [&](int conn) -> KernelChannel& {
    for (auto& c : chans)
      if (c.send_conn == conn || c.recv_conn == conn) return c;
    return chans.front();
  };
  for (int guard = 0; guard < 10'000'000; ++guard) {
    bool moved = false;
    for (auto& c : chans) {  // the real kernel, as far as it can go now
      while (c.next < c.slices.size()) {
        const auto [recv, send] = c.slices[c.next];
        if (recv && c.tail < c.recv_step + step) break;
        if (send && c.head + plugin::kNcclSteps < c.send_step + step) break;
        if (send) {
          c.send_step += step;
          pacer.observe(c.send_conn, c.send_step, now);
          c.last_credit = std::max(now, c.last_credit) + occ;
          c.credits.emplace_back(c.last_credit, c.send_step);
        }
        if (recv) {
          c.recv_step += step;
          pacer.observe(c.recv_conn, c.recv_step, now);
        }
        ++c.next;
        end = now;
        moved = true;
      }
    }
    TimeNs due = pacer.schedule(now, out, [&](int conn) {
      return plugin::p2p_agent::kDepth - find(conn).entries.size();
    });
    for (const auto& x : out) find(x.conn).entries.push_back(x);
    if (!out.empty()) moved = true;
    out.clear();
    for (auto& c : chans) {  // the agent
      while (!c.credits.empty() && c.credits.front().first <= now) {
        c.head = c.credits.front().second;
        c.credits.pop_front();
        moved = true;
      }
      while (!c.entries.empty() && c.entries.front().due <= now &&
             c.entries.front().value <= c.recv_step + plugin::kNcclSteps) {
        c.tail = c.entries.front().value;
        c.entries.pop_front();
        moved = true;
      }
      if (!c.credits.empty()) due = std::min(due, c.credits.front().first);
      if (!c.entries.empty() && c.entries.front().value <= c.recv_step + plugin::kNcclSteps)
        due = std::min(due, c.entries.front().due);
    }
    if (moved) continue;
    bool done = true;
    for (const auto& c : chans) done = done && c.next >= c.slices.size();
    if (done) {
      pacer.opsDone();
      for (auto& c : chans) {
        r.over_released |= !c.entries.empty() || c.tail > c.recv_step;
        c.head = c.send_step;  // a leaving agent returns the credits
        c.credits.clear();
      }
      r.us = static_cast<double>(end - start) / 1e3;
      return r;
    }
    if (due == P2pPacer::kNever) {
      r.stalled = true;
      return r;
    }
    now = std::max(now + 1, due);
  }
  r.stalled = true;
  return r;
}

struct Setup {
  P2pPacer pacer;
  std::vector<KernelChannel> chans;
};

std::unique_ptr<Setup> connect(int nranks, int channels) {
  const Config cfg = oneNode();
  plugin::PluginState::get().configure(cfg);
  const live::CommLinks links = live::commLinks(plugin::PluginState::get().model(), cfg.cluster,
                                                nranks);
  auto busy = std::make_shared<std::atomic<int>>(0);
  auto connected = std::make_shared<std::atomic<int>>(channels);
  auto s = std::make_unique<Setup>(Setup{
      P2pPacer(nranks, [=] { return plugin::makeRingChannel(links, 0, busy, connected); },
               links.ring_nvl),
      {}});
  // NCCL's exchange: receive entries, then send entries, by channel ordinal.
  s->chans.resize(static_cast<std::size_t>(channels));
  for (int k = 0; k < channels; ++k) s->chans[static_cast<std::size_t>(k)].recv_conn = s->pacer.add(false, k);
  for (int k = 0; k < channels; ++k) s->chans[static_cast<std::size_t>(k)].send_conn = s->pacer.add(true, k);
  return s;
}

double modelUs(Func f, std::uint64_t bytes, int nranks, int channels) {
  const Config cfg = oneNode();
  const model::NcclModel m(cfg.cluster, cfg.model);
  const model::CommShape shape = live::blockShape(cfg.cluster, nranks);
  const double base_us = model::nccl::kBaseLat[static_cast<int>(model::Algo::Ring)]
                                              [static_cast<int>(model::Proto::Simple)] +
                         cfg.model.kernel_launch_us.value_or(0.0);
  return m.time(f, bytes, shape, model::Algo::Ring, model::Proto::Simple, channels) - base_us;
}

TEST(P2pPacer, RingOpShapeFollowsNcclChunking) {
  // 1 GiB all-reduce, 8 ranks, 28 channels: loops of 28 * 8 * 2 MiB = 448 MiB -> 3; each has
  // 2 * 7 sends of 2 slices.
  const auto s = plugin::ringOpShape(
      live::CollectiveEntry{Func::AllReduce, model::Algo::Ring, model::Proto::Simple, 1024 * MiB, 28},
      8, 28);
  EXPECT_TRUE(s.symmetric);
  EXPECT_EQ(s.slice_steps, 2);
  EXPECT_EQ(s.slices_per_step, 2);
  EXPECT_EQ(s.units, 84u);
  EXPECT_EQ(s.unit_bytes, static_cast<std::uint64_t>(1024.0 * MiB * 14 / 8 / 28 / 84 + 0.5));
  const auto ag = plugin::ringOpShape(
      live::CollectiveEntry{Func::AllGather, model::Algo::Ring, model::Proto::Simple, 64 * MiB, 0},
      8, 16);  // channels 0: the connected ones
  EXPECT_EQ(ag.units, 7u * 1 * 2);  // 64 MiB < one loop of 16 * 8 * 2 MiB
  const auto bc = plugin::ringOpShape(
      live::CollectiveEntry{Func::Broadcast, model::Algo::Ring, model::Proto::Simple, 8 * MiB, 4},
      8, 16);
  EXPECT_FALSE(bc.symmetric);
  EXPECT_EQ(bc.slice_steps, 1);
  EXPECT_EQ(bc.units, 4u);  // loops of 4 * 512 KiB
  EXPECT_FALSE(plugin::ringOpShape(std::nullopt, 8, 16).symmetric);
}

TEST(P2pPacer, OneNodeRingCollectivesTakeTheModelsTime) {
  constexpr int n = 8, channels = 16;
  auto s = connect(n, channels);
  TimeNs start = 1'000'000'000;
  for (Func f : {Func::AllReduce, Func::AllGather, Func::ReduceScatter})
    for (std::uint64_t b = MiB; b <= 1024 * MiB; b *= 16) {
      const live::CollectiveEntry e{f, model::Algo::Ring, model::Proto::Simple, b, channels};
      const auto shape = plugin::ringOpShape(e, n, channels);
      for (auto& c : s->chans) {
        c.slices = program(f, n, shape.units);
        c.next = 0;
      }
      const Result r = runOp(s->pacer, s->chans, e, start);
      ASSERT_FALSE(r.stalled) << model::toString(f) << " " << b;
      EXPECT_FALSE(r.over_released) << model::toString(f) << " " << b;
      const double want = modelUs(f, b, n, channels);
      std::printf("%-13s %6llu MiB: paced %10.1f us, model %10.1f us, %+6.2f %%\n",
                  std::string(model::toString(f)).c_str(),
                  static_cast<unsigned long long>(b / MiB), r.us, want,
                  100 * (r.us - want) / want);
      EXPECT_NEAR(r.us, want, 0.02 * want) << model::toString(f) << " " << b;
      start += static_cast<TimeNs>(r.us * 1e3) + 1'000'000'000;
    }
}

// Receives are scheduled ahead once R's kernel is in the operation on a channel, never past
// the operation's slices (the agent's ring bounds how far); a channel without a send of R's
// gets none; past the estimate they follow R's sends.
TEST(P2pPacer, ReceivesStayWithinTheOperation) {
  auto s = connect(8, 2);
  // 8 MiB all-reduce on 2 channels: one loop of 2 * 7 sends of 2 slices = 28 slices each.
  s->pacer.opStarted(0, live::CollectiveEntry{Func::AllReduce, model::Algo::Ring,
                                              model::Proto::Simple, 8 * MiB, 2});
  EXPECT_EQ(s->pacer.sliceSteps(), 2);
  // A slice of 8 MiB * 14/8 / 2 channels / 28 over a channel's half of NVLink.
  EXPECT_GT(s->pacer.sliceOccupancyNs(), 100);
  EXPECT_LT(s->pacer.sliceOccupancyNs(), 10'000);
  std::vector<plugin::P2pEntry> out;
  const auto room = [](int) { return std::size_t{100}; };
  EXPECT_EQ(s->pacer.schedule(1'000'000, out, room), P2pPacer::kNever);  // nothing sent yet
  EXPECT_TRUE(out.empty());
  const int send = s->chans[0].send_conn, recv = s->chans[0].recv_conn;
  s->pacer.observe(send, 2, 1'000);  // R's first slice on channel 0
  (void)s->pacer.schedule(1'000, out, room);
  ASSERT_EQ(out.size(), 28u);
  TimeNs last = 0;
  for (std::size_t k = 0; k < out.size(); ++k) {
    EXPECT_EQ(out[k].conn, recv);
    EXPECT_EQ(out[k].value, 2 * (k + 1));
    EXPECT_GE(out[k].due, last);  // in order, a slice apart
    last = out[k].due;
  }
  EXPECT_GT(out.back().due, out.front().due + 26 * s->pacer.sliceOccupancyNs() / 2);
  out.clear();
  EXPECT_EQ(s->pacer.schedule(2'000'000, out, room), P2pPacer::kNever);
  EXPECT_TRUE(out.empty());
  // R goes on past the estimate (NCCL gave this channel more): receives follow its sends.
  for (std::uint64_t v = 4; v <= 60; v += 2) s->pacer.observe(send, v, 3'000'000);
  (void)s->pacer.schedule(3'000'000, out, room);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].value, 60u);
  // The room the agent has bounds a round.
  auto t = connect(8, 1);
  t->pacer.opStarted(0, live::CollectiveEntry{Func::AllReduce, model::Algo::Ring,
                                              model::Proto::Simple, 8 * MiB, 1});
  t->pacer.observe(t->chans[0].send_conn, 2, 1'000);
  out.clear();
  (void)t->pacer.schedule(1'000, out, [](int) { return std::size_t{5}; });
  EXPECT_EQ(out.size(), 5u);
}

}  // namespace
}  // namespace crystal::test
