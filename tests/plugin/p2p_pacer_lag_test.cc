// P2P pacing of broadcast and reduce chains back to back (plugin/p2p_pacer.h) with the delays
// the device adds between the pacer and R's kernel, on a virtual clock: R's kernel runs an
// operation's units without waiting for the CPU, the pacing thread sees its moves and its
// stream reach an operation some microseconds late, and a release reaches R's tail one agent
// kernel reader pass after (the pacer releases that much early, as P2pAgent does). The chain
// must still bring R each operation at the model's loop: the member before R writes the next
// operation's units into R's free slots before R's stream reaches it (P2pPacer::nextOp).
#include <gtest/gtest.h>

#include <cstdio>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "crystal/model/nccl_model.h"
#include "p2p_agent_abi.h"
#include "p2p_agent_rules.h"
#include "p2p_pacer.h"
#include "pacer_targets.h"
#include "state.h"

namespace crystal::test {
namespace {

using live::TimeNs;
using model::Func;
using plugin::P2pPacer;
namespace rules = plugin::p2p_agent;

// The device's delays (p2p_trace.py's columns; H100 and H200 traces, 2026-12-04/05).
struct Lags {
  TimeNs gpu_ns = 0;      // R's kernel a unit, once its receive and credit are there
  TimeNs store_ns = 0;    // a release to R's tail (the agent kernel's reader pass: `store`)
  TimeNs see_ns = 0;      // R's counter move to the pacer (`to_cpu` and a pass)
  TimeNs start_ns = 0;    // R's stream reaching an operation to the pacer (`start_lag`)
  TimeNs gap_ns = 0;      // R's stream from one operation's kernel to the next's
  bool tell_next = true;  // the pacer knows the operation queued next (nextOp)
  // Preludes (P2pPacer::arm, p2p_agent_abi.h; CRYSTAL_P2P_PRELUDE=1 in the plugin): the pacing
  // thread arms the operation after the one R's stream is in once that one's anchors came in, or
  // `settle_ns` after it saw the last one end, and the agent kernel releases its first
  // receives from R's first send of it (P2pAgent::armFront).
  bool prelude = false;
  TimeNs settle_ns = 10'000;
  // hybrid_nccl's and nccl-tests' start: `warmups` operations, the program waits until they
  // ended, `pause_ns` later it calls the timed ones (timed from their first's call).
  int warmups = 0;
  TimeNs pause_ns = 0;
  // The program calls the operations of a batch (the warm-ups, the timed ones) this far apart
  // (NCCL's host time a call); 0: all at the batch's start. R's stream reaches an operation
  // no sooner than its call.
  TimeNs call_ns = 0;
  std::vector<TimeNs>* ends = nullptr;  // set: each timed operation's end, from the batch's start
};

struct Timed {
  TimeNs at = 0;  // when it reaches the other side
  int conn = -1;  // kAnchor: an anchor to the CPU at `moved`; kArm: the prelude to the GPU
  std::uint64_t value = 0;
  TimeNs moved = 0;  // when R's kernel moved it (the agent's stamp)
};
constexpr int kAnchor = -2, kArm = -3;

// The agent kernel's prelude state of one channel's receive (p2p_agent_kernel.cu).
struct GpuPrelude {
  std::uint64_t base = 0, start = 0, delay = 0;
  bool pending = false;
  std::uint64_t prev = 0;  // R's recv count before its last change
  TimeNs changed_at = 0;
  rules::Prelude p;
  std::vector<std::uint64_t> at;  // the running prelude's schedule
  std::uint32_t steps = 1;
};

// Back to back, all called at the start (nccl-tests' loop): us an operation, -1 if stalled.
// A broadcast or reduce runs its chain's units (one counter step each); an all-reduce,
// all-gather or reduce-scatter its ring slices (ringSlices, 2 steps each). The target runs
// the operation on `target_channels`, R on `channels` (the tuner's count, ring_fold.h; 0:
// the target's).
double laggedLoopUs(Func f, int root, int n, int target_channels, int rank, std::uint64_t bytes,
                    int iters, const Config& cfg, const Lags& lag, int channels = 0) {
  if (channels <= 0) channels = target_channels;
  plugin::PluginState::get().configure(cfg);
  const live::CommLinks links = live::commLinks(plugin::PluginState::get().model(), cfg.cluster, n);
  auto busy = std::make_shared<std::atomic<int>>(0);
  auto connected = std::make_shared<std::atomic<int>>(channels);
  P2pPacer pacer(
      n,
      [=](bool connection) {
        return plugin::makeRingChannel(links, rank, connection ? busy : nullptr, connected);
      },
      rank);
  pacer.setOpBase(
      static_cast<TimeNs>(1e3 * model::NcclModel(cfg.cluster, cfg.model)
                                    .opOverheadUs(model::Algo::Ring, model::Proto::Simple)));
  std::vector<KernelChannel> chans(static_cast<std::size_t>(channels));
  for (int k = 0; k < channels; ++k)
    chans[static_cast<std::size_t>(k)].recv_conn = pacer.add(false, k);
  for (int k = 0; k < channels; ++k)
    chans[static_cast<std::size_t>(k)].send_conn = pacer.add(true, k);
  live::CollectiveEntry e{f, model::Algo::Ring, model::Proto::Simple, bytes, channels};
  e.root = root;
  if (channels != target_channels) e.target_channels = target_channels;
  const plugin::RingOpShape shape = plugin::ringOpShape(e, n, channels);
  const bool chain = f == Func::Broadcast || f == Func::Reduce;
  const std::uint64_t steps = chain ? 1 : static_cast<std::uint64_t>(shape.slice_steps);
  std::vector<std::pair<bool, bool>> slices;
  if (chain) {
    const int head = f == Func::Reduce ? (root + 1) % n : root;
    const int tail = f == Func::Reduce ? root : (root + n - 1) % n;
    slices.assign(shape.units, {rank != head, rank != tail});
  } else {
    slices = ringSlices(f, n, shape.units);
  }
  for (auto& c : chans) c.slices = slices;

  TimeNs start = 1'000'000'000;
  TimeNs issued = start;  // when the program called the first operation of this batch
  int batch_first = 0;    // that operation
  auto issuedOf = [&](int o) { return issued + (o - batch_first) * lag.call_ns; };
  iters += lag.warmups;
  std::deque<Timed> to_cpu, to_gpu;  // constant delays: each stays in time order
  std::vector<plugin::P2pRelease> out;
  int op = 0, told = -1;
  TimeNs k_start = start, now = start;
  // Preludes: the last operation's end as the CPU saw it, the operation armed last, what the
  // GPU holds (its arms in order of to_gpu's kArm entries).
  TimeNs done_seen = 0;
  int armed_op = -1, anchors_in = 0, anchored = 0;
  std::deque<plugin::P2pPrelude> arms;
  plugin::P2pPrelude gpu_arm;
  std::vector<GpuPrelude> pre(chans.size());
  for (long guard = 0; guard < 10'000'000; ++guard) {
    // The pacing thread's pass: the stream, R's moves, the releases.
    TimeNs next = P2pPacer::kNever;
    if (told < op) {
      if (now >= k_start + lag.start_ns) {
        pacer.opStarted(now, e, issuedOf(op));
        told = op;
        // The warm-ups' last has no next: the program waits for it.
        if (lag.tell_next && op + 1 < iters && op + 1 != lag.warmups)
          pacer.nextOp(e, issuedOf(op + 1));
      } else {
        next = k_start + lag.start_ns;
      }
    }
    // P2pAgent::armFront: the first operation the stream has not reached, once the one before
    // ended (settle_ns ago) or, while that one runs, once R is in it on every channel.
    const bool ahead =
        told == op && op + 1 < iters && op + 1 != lag.warmups && pacer.canArmAhead(now);
    if (lag.prelude && armed_op < op + (ahead ? 1 : 0) && (told < op || ahead)) {
      if (ahead || now >= done_seen + lag.settle_ns) {
        armed_op = ahead ? op + 1 : op;
        anchors_in = anchored = 0;
        if (auto p = pacer.arm(e, plugin::p2p_agent::kPreUnits, issuedOf(armed_op))) {
          arms.push_back(std::move(*p));
          to_gpu.push_back({now + lag.store_ns, kArm, 0, now});
        }
      } else {
        next = std::min(next, done_seen + lag.settle_ns);
      }
    }
    while (!to_cpu.empty() && to_cpu.front().at <= now) {
      if (to_cpu.front().conn == kAnchor) {
        if (to_cpu.front().value > rules::kAnchorMissed) {
          pacer.anchored(to_cpu.front().moved);
          ++anchored;
        }
        // P2pAgent::readAnchors: every one missed.
        if (++anchors_in == static_cast<int>(chans.size()) && anchored == 0) pacer.anchorsMissed();
      } else
        pacer.observe(to_cpu.front().conn, to_cpu.front().value, to_cpu.front().moved);
      to_cpu.pop_front();
    }
    out.clear();
    if (const TimeNs due = pacer.release(now + lag.store_ns, out); due != P2pPacer::kNever)
      next = std::min(next, due - lag.store_ns);
    for (const auto& r : out) to_gpu.push_back({now + lag.store_ns, r.conn, r.value, now});
    while (!to_gpu.empty() && to_gpu.front().at <= now) {
      if (to_gpu.front().conn == kArm) {
        gpu_arm = std::move(arms.front());
        arms.pop_front();
        for (std::size_t k = 0; k < chans.size(); ++k)
          for (const auto& r : gpu_arm.recvs)
            if (r.conn == chans[k].recv_conn) {
              pre[k].base = r.base;
              pre[k].start = static_cast<std::uint64_t>(std::max<TimeNs>(0, gpu_arm.start));
              pre[k].delay = static_cast<std::uint64_t>(gpu_arm.delay);
              pre[k].pending = true;
            }
      }
      for (auto& c : chans)
        if (c.recv_conn == to_gpu.front().conn) c.released = to_gpu.front().value;
      to_gpu.pop_front();
    }
    // R's kernel, and the agent kernel's rules on the GPU.
    bool moved = false;
    if (now >= k_start) {
      bool all = true;
      for (std::size_t k = 0; k < chans.size(); ++k) {
        KernelChannel& c = chans[k];
        GpuPrelude& g = pre[k];
        if (g.pending) {
          const std::uint64_t a =
              rules::anchorOf(g.base, g.prev, c.recv_step, static_cast<std::uint64_t>(g.changed_at),
                              g.start, g.delay);
          if (a != rules::kAnchorPending) {
            g.pending = false;
            if (a != rules::kAnchorMissed) {
              g.p = {a, g.base, 0};
              g.at.assign(gpu_arm.at.begin(), gpu_arm.at.end());
              g.steps = static_cast<std::uint32_t>(gpu_arm.steps);
            }
            to_cpu.push_back({now + lag.see_ns, kAnchor, a, static_cast<TimeNs>(a)});
          }
        }
        const auto units = static_cast<std::uint32_t>(g.at.size());
        const std::uint64_t prelude =
            rules::preludeTail(g.p, g.at.data(), units, g.steps, static_cast<std::uint64_t>(now));
        const std::uint64_t due = rules::preludeNext(g.p, g.at.data(), units);
        if (due != ~std::uint64_t{0}) next = std::min(next, static_cast<TimeNs>(due));
        c.tail = std::max(c.tail, rules::gatedTail(std::max(c.released, prelude), c.recv_step));
        c.head = std::max(c.head, rules::creditsDue(c.credits, static_cast<std::uint64_t>(now)));
        const std::uint64_t credit = rules::creditsNext(c.credits);
        if (credit != ~std::uint64_t{0}) next = std::min(next, static_cast<TimeNs>(credit));
        const bool more = c.next < c.slices.size();
        const bool recv = more && c.slices[c.next].first, send = more && c.slices[c.next].second;
        if (more && (!recv || c.tail >= c.recv_step + steps) &&
            (!send || c.head + plugin::kNcclSteps >= c.send_step + steps)) {
          if (c.ready_since < 0) c.ready_since = now;
          if (now >= c.ready_since + lag.gpu_ns) {
            c.ready_since = -1;
            if (recv) {
              g.prev = c.recv_step;
              g.changed_at = now;
              c.recv_step += steps;
              to_cpu.push_back({now + lag.see_ns, c.recv_conn, c.recv_step, now});
            }
            if (send) {
              c.send_step += steps;
              to_cpu.push_back({now + lag.see_ns, c.send_conn, c.send_step, now});
              rules::creditsSent(c.credits, c.send_step, static_cast<std::uint64_t>(now),
                                 static_cast<std::uint64_t>(pacer.sendOccupancy()),
                                 static_cast<std::uint32_t>(pacer.sendUnitSteps()));
            }
            ++c.next;
            moved = true;
          } else {
            next = std::min(next, c.ready_since + lag.gpu_ns);
          }
        }
        all = all && c.next >= c.slices.size();
      }
      if (all) {
        if (lag.ends && op >= lag.warmups) lag.ends->push_back(now - start);
        if (++op == iters) return static_cast<double>(now - start) / 1e3 / (iters - lag.warmups);
        for (auto& c : chans) c.next = 0;
        k_start = std::max(now + lag.gap_ns, issuedOf(op));
        done_seen = now + lag.see_ns;
        if (lag.warmups > 0 && op == lag.warmups) {
          pacer.opsDone();  // the stream went idle
          start = issued = now + lag.pause_ns;
          batch_first = op;
          k_start = start + lag.gap_ns;
        }
        moved = true;
      }
    } else {
      next = std::min(next, k_start);
    }
    if (moved) continue;  // R's kernel goes on at this time
    if (!to_cpu.empty()) next = std::min(next, to_cpu.front().at);
    if (!to_gpu.empty()) next = std::min(next, to_gpu.front().at);
    if (next == P2pPacer::kNever) return -1;  // R waits on what nothing will release
    now = std::max(now + 1, next);
  }
  return -1;
}

struct Case {
  Func f;
  int root, rank;
  std::uint64_t bytes;
  TimeNs gpu_ns;   // R's kernel a unit: below the chain's pace
  double gain_us;  // at least this much an operation from knowing the next one
};

// The H100's delays (twenty-fifth session: `store` 8 us, `start_lag` 3-4, `to_cpu` 0.4 and
// a pass), R's stream 3 us from one kernel to the next; R's kernel a unit: the case's.
Lags deviceLags() {
  return Lags{.store_ns = 8'000, .see_ns = 2'000, .start_ns = 4'000, .gap_ns = 3'000};
}

// `iters` of case `k` back to back with `lag`, and the same with the next operation unknown:
// the model's loop within `tolerance`, and knowing the next operation at least `gain_us`
// faster an operation.
void expectLoop(const Case& k, Lags lag, int iters, double tolerance) {
  const Config cfg = targetNodes(8);
  lag.gpu_ns = k.gpu_ns;
  lag.tell_next = true;
  const double paced = laggedLoopUs(k.f, k.root, 64, 16, k.rank, k.bytes, iters, cfg, lag);
  lag.tell_next = false;
  const double unknown = laggedLoopUs(k.f, k.root, 64, 16, k.rank, k.bytes, iters, cfg, lag);
  const double want = modelLoopUs(k.f, k.root, 64, 16, k.rank, k.bytes, iters, cfg);
  const std::string what = std::string(model::toString(k.f)) + " root " + std::to_string(k.root) +
                           ", rank " + std::to_string(k.rank) + " of 64, " +
                           std::to_string(k.bytes / MiB) + " MiB";
  std::printf("%-34s: %d warm-ups, %2d timed: paced %6.1f us, next unknown %6.1f, model %6.1f\n",
              what.c_str(), lag.warmups, iters, paced, unknown, want);
  EXPECT_NEAR(paced, want, tolerance * want) << what;
  EXPECT_GE(unknown, paced + k.gain_us - 1e-3) << what;
}

// A member (rank 5 of a broadcast from 0, of a reduce to 7) and the reduce's root (rank 0),
// 1-64 MiB on 16 channels, 50 back to back: the model's loop, the chain's pace. Where the
// pacer does not know the next operation it releases that one's first unit only once R
// consumed the last one's (one ahead), which a 1 MiB reduce pays each operation (+2.2 us, as
// on the H100: rank 5 paced 14.9 us an operation against the model's 12.8). Knowing the next
// operation is never slower.
TEST(P2pPacerLag, NextOperationsUnitsWaitInRsSlots) {
  for (const Case k :
       {Case{Func::Broadcast, 0, 5, MiB, 5'000, 0.5},
        Case{Func::Broadcast, 0, 5, 4 * MiB, 10'000, 0},
        Case{Func::Broadcast, 0, 5, 16 * MiB, 10'000, 0}, Case{Func::Reduce, 7, 5, MiB, 5'000, 2.0},
        Case{Func::Reduce, 0, 0, MiB, 5'000, 2.0}, Case{Func::Reduce, 0, 0, 4 * MiB, 10'000, 0.5},
        Case{Func::Reduce, 0, 0, 16 * MiB, 10'000, 0},
        Case{Func::Reduce, 0, 0, 64 * MiB, 10'000, 0}})
    expectLoop(k, deviceLags(), 50, 0.02);
}

// hybrid_nccl's start: 2 warm-ups, a wait until they ended (the stream idle, the chain
// drained), 50 us, then 20 timed back to back: the model's 20-iteration loop, the chain's
// fill from the first timed call included. The H100's `all` read rank 5's 1 MiB reduce at +46 %
// over 20 (twenty-fifth session) where the program's host time set the pace (host_us 18-23,
// NCCL's own 9-12 of it, run to run), not this logic; and the reduce root's 64 / 256 MiB at
// +14.4 / +5.4 % (the H200 alike, twenty-fourth) where this stand-in is within 0.2 %: the
// extra ~700 us over the 20 is the GPU's, not found here.
TEST(P2pPacerLag, WarmUpsThenAPauseThenTheTimedLoop) {
  Lags lag = deviceLags();
  lag.warmups = 2;
  lag.pause_ns = 50'000;
  for (const Case k :
       {Case{Func::Reduce, 0, 5, MiB, 5'000, 1.0}, Case{Func::Reduce, 0, 5, 4 * MiB, 10'000, 0},
        Case{Func::Broadcast, 0, 5, MiB, 5'000, 0}, Case{Func::Reduce, 0, 0, MiB, 5'000, 1.0},
        Case{Func::Reduce, 0, 0, 64 * MiB, 10'000, 0},
        Case{Func::Reduce, 0, 0, 256 * MiB, 10'000, 0},
        Case{Func::Broadcast, 0, 5, 64 * MiB, 10'000, 0}})
    expectLoop(k, lag, 20, 0.03);
}

// The same start, each operation's own time, the program calling one every 9.2 us (NCCL's
// host time a call on the H100) or all at once: the reduce root's first timed operation pays
// the chain's fill (one operation alone, the model's -n 1, and the device's lags), every later
// one the chain's pace, the model's time_after_first (what hybrid_nccl's after_first_us is
// compared with). The H100 read the first ~440-465 us and the mean of the rest 14.2-16.1
// (model 13.2), the second 19-28 of it (forty-first session): the device's, not this logic's.
TEST(P2pPacerLag, AfterAWaitTheFirstOperationPaysTheFillTheRestThePace) {
  const Config cfg = targetNodes(8);
  const double alone = modelLoopUs(Func::Reduce, 0, 64, 16, 0, MiB, 1, cfg);
  const double rest = (20 * modelLoopUs(Func::Reduce, 0, 64, 16, 0, MiB, 20, cfg) - alone) / 19;
  for (const TimeNs call : {TimeNs{0}, TimeNs{9'200}}) {
    Lags lag = deviceLags();
    lag.warmups = 2;
    lag.pause_ns = 50'000;
    lag.gpu_ns = 5'000;
    lag.call_ns = call;
    std::vector<TimeNs> ends;
    lag.ends = &ends;
    ASSERT_GT(laggedLoopUs(Func::Reduce, 0, 64, 16, 0, MiB, 20, cfg, lag), 0);
    ASSERT_EQ(ends.size(), 20u);
    EXPECT_NEAR(ends[0] / 1e3, alone, 0.03 * alone) << "a call every " << call << " ns";
    for (std::size_t i = 1; i < ends.size(); ++i)
      EXPECT_NEAR((ends[i] - ends[i - 1]) / 1e3, rest, 0.01 * rest)
          << "operation " << i << ", a call every " << call << " ns";
  }
}

// The tuner runs R's chains on more channels than the target's where its GPU needs them
// to keep the target's pace (ring_fold.h onNodeRingChannels: the 64 MiB reduce on 26 of the
// H100's channels against the target's 16, 2026-12-05). Each of R's channels then carries
// fewer units, each on a link shared by more channels; the units still come at the target's
// aggregate pace, and the first after the target's fill, not after a fill of the shared
// links' slower units: timed with R's count, the reduce root's first operation after the
// warm-ups took 2.2 ms where the model's fill is 1.5 (the H100 and the H200 read the 64 MiB
// root at +14.4 % over 20, 183.5 against 181.1 us over 300). And the members before R take
// the target's time for an operation (their kernel's goes with their bytes a channel): with
// R's count rank 5's 16 MiB broadcast ran 10 % under the model.
TEST(P2pPacerLag, MoreRealChannelsThanTheTargetsKeepItsFill) {
  Lags lag = deviceLags();
  lag.warmups = 2;
  lag.pause_ns = 50'000;
  lag.gpu_ns = 10'000;
  struct Wide {
    Func f;
    int root, rank, channels;
    std::uint64_t bytes;
  };
  const Config cfg = targetNodes(8);
  for (const Wide k :
       {Wide{Func::Reduce, 0, 0, 26, 64 * MiB}, Wide{Func::Reduce, 0, 0, 32, 256 * MiB},
        Wide{Func::Reduce, 0, 5, 26, 64 * MiB}, Wide{Func::Broadcast, 0, 5, 26, 64 * MiB},
        Wide{Func::Reduce, 0, 0, 19, 16 * MiB}, Wide{Func::Reduce, 0, 5, 19, 16 * MiB},
        Wide{Func::Broadcast, 0, 5, 19, 16 * MiB}, Wide{Func::Reduce, 0, 5, 16, 16 * MiB}}) {
    const double paced =
        laggedLoopUs(k.f, k.root, 64, 16, k.rank, k.bytes, 20, cfg, lag, k.channels);
    const double want = modelLoopUs(k.f, k.root, 64, 16, k.rank, k.bytes, 20, cfg);
    const std::string what = std::string(model::toString(k.f)) + " root " + std::to_string(k.root) +
                             ", rank " + std::to_string(k.rank) + " of 64, " +
                             std::to_string(k.bytes / MiB) + " MiB on " +
                             std::to_string(k.channels) + " channels";
    std::printf("%-48s: 2 warm-ups, 20 timed: paced %6.1f us, model (16 channels) %6.1f\n",
                what.c_str(), paced, want);
    EXPECT_NEAR(paced, want, 0.02 * want) << what;
  }
}

// R's kernel sends its first slices the moment it starts an operation (an instantaneous GPU
// here), before the pacing thread sees its stream reach it (start lag 4 us, R's moves seen
// 2 us after). Those sends open the operation's receives on their channel: counted for the
// operation before and dropped at its start, R waited on a receive nothing released (the
// H100's split groups, 8 ranks on 28 channels, stalled 10 s on their first timed 1 KiB
// all-reduce, 2026-12-05; here every case stalled). The loop keeps the model's time, within
// 2 us an operation, armed or not: each operation's schedule starts the model's base cost
// after the last one's end as the model has it, however soon R's kernel starts it, and the
// next one's first units, released past this one's as R's sends of it come (64 ranks, 64 MiB:
// before the pacing thread sees its stream), count as the next one's.
TEST(P2pPacerLag, FirstSendsSeenBeforeTheStreamStartOpenItsReceives) {
  Lags lag = deviceLags();
  lag.warmups = 2;
  lag.pause_ns = 50'000;
  struct Ring {
    Func f;
    int n, channels, rank;
    std::uint64_t bytes;
  };
  for (const Ring k :
       {Ring{Func::AllReduce, 8, 28, 0, 1024}, Ring{Func::AllReduce, 8, 28, 0, 4 * MiB},
        Ring{Func::AllGather, 8, 28, 0, 64 * 1024}, Ring{Func::AllGather, 64, 16, 0, 64 * MiB},
        Ring{Func::ReduceScatter, 64, 16, 5, 16 * MiB}}) {
    const Config cfg = targetNodes(k.n / 8);
    const model::NcclModel m(cfg.cluster, cfg.model);
    const double model_us =
        m.timeAtRank(k.f, k.bytes, live::blockShape(cfg.cluster, k.n), model::Algo::Ring,
                     model::Proto::Simple, k.channels, k.rank, -1);
    // Not armed (the plugin's default) and armed (CRYSTAL_P2P_PRELUDE=1) alike.
    for (const bool prelude : {false, true}) {
      lag.prelude = prelude;
      const double paced = laggedLoopUs(k.f, -1, k.n, k.channels, k.rank, k.bytes, 20, cfg, lag);
      const double want = model_us;
      const std::string what = std::string(model::toString(k.f)) + " rank " +
                               std::to_string(k.rank) + " of " + std::to_string(k.n) + ", " +
                               std::to_string(k.bytes) + " B" + (prelude ? ", armed" : "");
      std::printf("%-46s: 2 warm-ups, 20 timed: paced %6.1f us, model %6.1f\n", what.c_str(), paced,
                  want);
      EXPECT_GT(paced, 0) << what << ": stalled";
      EXPECT_NEAR(paced, want, 2.0) << what;
    }
  }
}

// Preludes (P2pPacer::arm): the split case's groups, 8 ranks on 28 channels, 20 ~40 us
// operations back to back. Each is armed while the one before runs, and the agent kernel
// starts it on the GPU, the model's base cost after R took the last one's receives: the loop
// takes the model's time (its base cost included) and a unit of R's kernel (its last), the
// device's lags or none. Without the prelude the 1 MiB all-gather ran +42 % over the ring's
// time here, without lags +17, both from R's first send (the H100's groups +31 to +45 % over
// the model, 2026-12-06).
TEST(P2pPacerLag, APreludeStartsAGroupsOperationWithoutTheCpu) {
  struct Group {
    Func f;
    std::uint64_t bytes;
    TimeNs gpu_ns;
  };
  const Config cfg = targetNodes(1);
  const model::NcclModel m(cfg.cluster, cfg.model);
  for (const Group k :
       {Group{Func::AllGather, MiB, 1'000}, Group{Func::AllGather, MiB, 2'000},
        Group{Func::ReduceScatter, MiB, 2'000}, Group{Func::AllReduce, 4 * MiB, 1'000}}) {
    Lags lag = deviceLags();
    lag.warmups = 2;
    lag.pause_ns = 50'000;
    lag.gpu_ns = k.gpu_ns;
    lag.prelude = false;
    const double off = laggedLoopUs(k.f, -1, 8, 28, 0, k.bytes, 20, cfg, lag);
    lag.prelude = true;
    const double armed = laggedLoopUs(k.f, -1, 8, 28, 0, k.bytes, 20, cfg, lag);
    lag.store_ns = lag.see_ns = lag.start_ns = 0;
    const double no_lags = laggedLoopUs(k.f, -1, 8, 28, 0, k.bytes, 20, cfg, lag);
    const double want = m.timeAtRank(k.f, k.bytes, live::blockShape(cfg.cluster, 8),
                                     model::Algo::Ring, model::Proto::Simple, 28, 0, -1);
    const double unit_us = static_cast<double>(k.gpu_ns) / 1e3;
    const std::string what = std::string(model::toString(k.f)) + " of 8, " +
                             std::to_string(k.bytes / MiB) + " MiB, R " + std::to_string(k.gpu_ns) +
                             " ns a unit";
    std::printf("%-40s: prelude %5.1f us (no lags %5.1f), none %5.1f, model %5.1f\n", what.c_str(),
                armed, no_lags, off, want);
    EXPECT_NEAR(armed, no_lags, 0.1) << what;
    EXPECT_GE(armed, want - 0.1) << what;
    EXPECT_LE(armed, want + unit_us + 0.1) << what;
  }
}

}  // namespace
}  // namespace crystal::test
