// Data policy mirror through a whole ring all-gather / reduce-scatter, with bytes: registered
// host buffers as NCCL's proxy registers them (LL, LL128, Simple), NCCL's Simple slicing
// (2 slices per ring step, a chunk under two minimum slices leaving the second one empty),
// the operation announced as NCCL's profiler does, and a GPU stand-in that forwards what it
// received. Every receive must carry what a virtual rank contributes in mirror: for an
// all-gather the real rank's own chunk, at every step. A receive that got zeros would be
// forwarded by the real rank and poison every later step of its slice (seen on the H200,
// 2026-12-03: 94 % zeros at 64 MiB), so this checks each receive, not just the last.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <vector>

#include "comm.h"
#include "handle_table.h"
#include "net_api.h"
#include "ring_proxy.h"
#include "state.h"
#include "virtual_comm.h"

namespace crystal::test {
namespace {

using plugin::DataComm;
using plugin::Request;

constexpr int kSlots = 8;       // NCCL_STEPS
constexpr int kPerStep = 2;     // Simple ring slices per step (all-gather, reduce-scatter)
constexpr int kInFlight = 4;    // slices of 2 steps in 8 slots
constexpr std::size_t kStep = 64 << 10;  // stepSize (NCCL's is 512 KiB; smaller keeps it fast)

DataComm& comm(void* token) {
  return static_cast<DataComm&>(*plugin::HandleTable::instance().find(token));
}

// One channel: connections, the three protocol regions on each side, the GPU's bookkeeping.
struct Channel {
  RingConns conns;
  DataComm* send = nullptr;
  DataComm* recv = nullptr;
  std::vector<std::uint8_t> sbuf[3], rbuf[3];
  void* smr[3] = {};
  void* rmr[3] = {};
  std::deque<Request*> sends, recvs;
  long sent = 0, send_done = 0, posted = 0, received = 0, consumed = 0;
  long bad = 0;
  std::vector<live::TimeNs> received_at;

  std::uint8_t* sendSlot(long v) { return sbuf[2].data() + (v * 2 % kSlots) * kStep; }
  std::uint8_t* recvSlot(long v) { return rbuf[2].data() + (v * 2 % kSlots) * kStep; }
};

struct Stats {
  long receives = 0, bad = 0;
  std::uint64_t holds_ran_out = 0;
  live::TimeNs end = 0;  // when the last receive and send completed
  std::uint64_t rewritten = 0;  // receives left alone for the interposer's rewrite
};

// The real rank's bytes of slice s of its own input in loop l: a pattern no zero fill can fake.
std::uint8_t own(std::size_t i, int s, long l) {
  return static_cast<std::uint8_t>(1 + (i * 7 + s * 13 + l * 31) % 251);
}

// Runs one ring all-gather (or reduce-scatter: the real rank adds 1 to each byte it forwards,
// so step j's bytes are own + j) of `chunk` bytes per rank per channel on `nch` channels of a
// 64-rank communicator whose rank 5 is real; the GPU forwards a received slice `turnaround`
// after its receive completed, and starts each of `loops` loops `loop_gap` after the last
// receive of the previous one. Returns the receives and those whose bytes were wrong.
// `rewritten`: the interposer rewrites the communicator's reduction results
// (PluginState::setResultsRewritten), so a reduce-scatter's receives must be left alone:
// their bytes stay NCCL's zeroed buffer's.
Stats runMirror(bool allgather, std::size_t chunk, int nch, live::TimeNs turnaround = 0,
                int loops = 1, live::TimeNs loop_gap = 0, bool rewritten = false) {
  static std::uint64_t next_comm = 0x9000;
  const std::uint64_t comm_id = next_comm++;
  constexpr int kRanks = 64, kSelf = 5;
  Config cfg;
  cfg.cluster.nodes = kRanks / cfg.cluster.gpus_per_node;
  cfg.emulation.data = DataPolicy::Mirror;
  plugin::PluginState::get().configure(cfg);
  plugin::PluginState::get().setResultsRewritten(comm_id, rewritten);
  void* ctx = nullptr;
  EXPECT_EQ(plugin::net::init(&ctx, comm_id, nullptr, nullptr, nullptr), nccl::ncclSuccess);
  std::vector<Channel> ch(static_cast<std::size_t>(nch));
  const std::size_t sizes[3] = {kSlots * 4096, kSlots * 4096, kSlots * kStep};
  for (int c = 0; c < nch; ++c) {
    Channel& k = ch[static_cast<std::size_t>(c)];
    k.conns.recv = acceptVirtual(ctx, 0, ConnId{comm_id, kSelf, kSelf - 1, kRanks, 1, c, 1},
                                 &k.conns.listen, &k.conns.host_fd);
    k.conns.send = connectVirtual(ctx, 0, ConnId{comm_id, kSelf, kSelf + 1, kRanks, 1, c, 1});
    k.send = &comm(k.conns.send);
    k.received_at.assign(static_cast<std::size_t>(loops) * 63 * kPerStep, 0);
    k.recv = &comm(k.conns.recv);
    for (int p = 0; p < 3; ++p) {  // NCCL's order: LL, LL128, Simple
      k.sbuf[p].assign(sizes[p], 0);
      k.rbuf[p].assign(sizes[p], 0);
      EXPECT_EQ(plugin::net::regMr(k.conns.send, k.sbuf[p].data(), sizes[p], nccl::NCCL_PTR_HOST,
                                   &k.smr[p]),
                nccl::ncclSuccess);
      EXPECT_EQ(plugin::net::regMr(k.conns.recv, k.rbuf[p].data(), sizes[p], nccl::NCCL_PTR_HOST,
                                   &k.rmr[p]),
                nccl::ncclSuccess);
    }
  }
  // NCCL's prims: a slice is half the chunk, at least stepSize * 2 / 32; the second slice
  // gets what is left (possibly nothing: posted all the same, with 0 bytes).
  const std::size_t slice = std::max((chunk + 2 * 16 - 1) / (2 * 16) * 16, 2 * kStep / 32);
  const std::size_t len[2] = {std::min(slice, chunk), chunk - std::min(slice, chunk)};
  const int steps = kRanks - 1;
  const long per_loop = static_cast<long>(steps) * kPerStep;
  const long units = loops * per_loop;
  auto stepOf = [&](long v) { return v % per_loop / kPerStep; };
  auto loopOf = [&](long v) { return v / per_loop; };
  for (int c = 0; c < nch; ++c) {
    for (bool send : {true, false})
      plugin::PluginState::get().proxyOpStarted({.comm = comm_id,
                                                 .channel = c,
                                                 .peer = send ? kSelf + 1 : kSelf - 1,
                                                 .send = send,
                                                 .transfers = static_cast<int>(units),
                                                 .op = 0x100 + comm_id,
                                                 .ring = true,
                                                 .allgather = allgather,
                                                 .rewritable = !allgather});
  }
  // When the GPU may post send v (kUnknown: not yet known).
  auto readyAt = [&](const Channel& k, long v) -> live::TimeNs {
    if (stepOf(v) == 0) {
      if (loopOf(v) == 0) return 0;
      const long last = loopOf(v) * per_loop - 1;  // the previous loop's last receive
      return k.received > last ? k.received_at[static_cast<std::size_t>(last)] + loop_gap
                               : Request::kUnknown;
    }
    return k.received > v - kPerStep
               ? k.received_at[static_cast<std::size_t>(v - kPerStep)] + turnaround
               : Request::kUnknown;
  };
  Stats out;
  live::TimeNs now = 1'000'000'000;
  long unknown = 0;
  for (int finished = 0; finished < nch;) {
    bool progress = true;
    while (progress) {
      progress = false;
      finished = 0;
      for (Channel& k : ch) {
        while (!k.recvs.empty() && k.recv->test(*k.recvs.front(), now, nullptr)) {
          // What a virtual rank sent at this step in mirror: own (all-gather), own + step
          // (reduce-scatter: j+1 copies summed, here one increment per hop).
          const long v = k.received;
          const int s = static_cast<int>(v % kPerStep);
          const auto add = static_cast<std::uint8_t>(allgather ? 0 : stepOf(v));
          const std::uint8_t* got = k.recvSlot(v);
          for (std::size_t i = 0; i < len[s]; ++i)
            if (got[i] != (rewritten && !allgather ? 0 : static_cast<std::uint8_t>(own(i, s, loopOf(v)) + add))) {
              ++k.bad;
              ADD_FAILURE() << (allgather ? "all-gather" : "reduce-scatter") << " chunk " << chunk
                            << ": receive " << v << " byte " << i << " is " << int(got[i]);
              break;
            }
          k.recv->freeRequest(*k.recvs.front());
          k.recvs.pop_front();
          k.received_at[static_cast<std::size_t>(k.received)] = now;
          ++k.received;
          ++out.receives;
          progress = true;
        }
        while (!k.sends.empty() && k.send->test(*k.sends.front(), now, nullptr)) {
          k.send->freeRequest(*k.sends.front());
          k.sends.pop_front();
          ++k.send_done;
          progress = true;
        }
        // The GPU frees a receive slot once it forwarded what it held (last step: at once).
        while (k.consumed < k.received &&
               (stepOf(k.consumed) == steps - 1 || k.sent > k.consumed + kPerStep)) {
          ++k.consumed;
          progress = true;
        }
        while (k.posted < units && k.posted < k.consumed + kInFlight) {
          Request* r = k.recv->allocRequest();
          if (!r) break;
          void* data = k.recvSlot(k.posted);
          const std::size_t cap = 2 * kStep;
          k.recv->irecv(*r, 1, &data, &cap, nullptr, now);
          k.recvs.push_back(r);
          ++k.posted;
          progress = true;
        }
        // Step 0: the rank's own slice; later: what it received a step earlier (+1 when
        // reducing), in a free send slot.
        auto ready = [&](long v) {
          return readyAt(k, v) != Request::kUnknown && now >= readyAt(k, v);
        };
        while (k.sent < units && k.sent < k.send_done + kInFlight && ready(k.sent)) {
          const long v = k.sent;
          const int s = static_cast<int>(v % kPerStep);
          std::uint8_t* dst = k.sendSlot(v);
          if (stepOf(v) == 0) {
            for (std::size_t i = 0; i < len[s]; ++i) dst[i] = own(i, s, loopOf(v));
          } else {
            const std::uint8_t* src = k.recvSlot(v - kPerStep);
            for (std::size_t i = 0; i < len[s]; ++i)
              dst[i] = static_cast<std::uint8_t>(src[i] + (allgather ? 0 : 1));
          }
          Request* r = k.send->allocRequest();
          if (!r) break;
          k.send->isend(*r, dst, len[s], 0, now);
          k.sends.push_back(r);
          ++k.sent;
          progress = true;
        }
        if (k.send_done == units && k.received == units) ++finished;
      }
    }
    if (finished == nch) break;
    live::TimeNs next = Request::kUnknown;
    for (Channel& k : ch) {
      if (!k.recvs.empty()) next = std::min(next, k.recvs.front()->due);
      if (!k.sends.empty()) next = std::min(next, k.sends.front()->due);
      if (k.sent < units && readyAt(k, k.sent) != Request::kUnknown && readyAt(k, k.sent) > now)
        next = std::min(next, readyAt(k, k.sent));
    }
    // A held receive (its send not posted yet) has a due time already passed: step on in
    // 10 us (the proxy polls it), so a hold can run out.
    if (next != Request::kUnknown && next <= now) next = now + 10'000;
    advanceClock(now, next, unknown);
  }
  out.end = now;
  for (Channel& k : ch) {
    out.bad += k.bad;
    out.rewritten += k.recv ? static_cast<plugin::VirtualRecvComm*>(k.recv)->written(
                                  plugin::DataWritten::Rewritten)
                            : 0;
    for (int p = 0; p < 3; ++p) {
      EXPECT_EQ(plugin::net::deregMr(k.conns.send, k.smr[p]), nccl::ncclSuccess);
      EXPECT_EQ(plugin::net::deregMr(k.conns.recv, k.rmr[p]), nccl::ncclSuccess);
    }
  }
  std::vector<RingConns> conns;
  for (Channel& k : ch) conns.push_back(k.conns);
  closeConns(conns);
  EXPECT_EQ(plugin::net::finalize(ctx), nccl::ncclSuccess);
  return out;
}

// Chunks from one under two minimum slices (the second slice posted empty) to two full ones;
// a GPU that forwards at once, and one that takes 300 us per slice (more than the mirror
// wait: were receives paired with the real rank's forwarding sends, their holds would run
// out and the zeros propagate; they mirror the loop's first step, posted at the start).
TEST(RingMirror, AllGatherCarriesTheRealRanksChunkAtEveryStep) {
  for (live::TimeNs turnaround : {0, 300'000})
    for (std::size_t chunk : {std::size_t{2048}, std::size_t{4096}, std::size_t{40000},
                              2 * kStep}) {
      const Stats s = runMirror(/*allgather=*/true, chunk, 2, turnaround);
      EXPECT_EQ(s.receives, 2 * 63 * kPerStep);
      EXPECT_EQ(s.bad, 0) << "chunk " << chunk << ", turnaround " << turnaround << " ns";
    }
}

// Two loops (1 GiB on 4 channels of 64 ranks has two): the second loop's first receives are
// posted and due while the GPU finishes the first loop; they wait for its first sends, which
// on the H200 came 0.5 ms after the last send of loop 0 (longer than a forwarding send's
// wait): here 3 ms.
TEST(RingMirror, AllGatherSecondLoopWaitsForItsFirstSends) {
  const Stats s = runMirror(/*allgather=*/true, 40000, 2, 0, /*loops=*/2, /*loop_gap=*/3'000'000);
  EXPECT_EQ(s.receives, 2 * 2 * 63 * kPerStep);
  EXPECT_EQ(s.bad, 0);
}

// Reduce-scatter: receive k mirrors the real rank's send k (its partial sum), which it posts
// only after receive k - 2 and its turnaround; the receive waits for it (a mirror hold,
// lasting while the real rank's sends keep coming) and carries it.
TEST(RingMirror, ReduceScatterReceivesCarryTheRealRanksPartialSums) {
  for (live::TimeNs turnaround : {0, 50'000})
    for (std::size_t chunk : {std::size_t{4096}, std::size_t{40000}}) {
      const Stats s = runMirror(/*allgather=*/false, chunk, 2, turnaround);
      EXPECT_EQ(s.receives, 2 * 63 * kPerStep);
      EXPECT_EQ(s.bad, 0) << "chunk " << chunk << ", turnaround " << turnaround << " ns";
    }
}

// With the interposer rewriting the reduction's result (data policy mirror, one real rank),
// the same reduce-scatter runs as under none: no receive waits for the real rank's partial
// sum (a hold), none is written, and it ends no later than the mirrored run, which waits a
// GPU turnaround for each partial sum it copies.
TEST(RingMirror, RewrittenReductionsAreNotMirrored) {
  const Stats mirrored = runMirror(/*allgather=*/false, 40000, 2, 50'000);
  const Stats left = runMirror(/*allgather=*/false, 40000, 2, 50'000, 1, 0, /*rewritten=*/true);
  EXPECT_EQ(left.receives, 2 * 63 * kPerStep);
  EXPECT_EQ(left.bad, 0);  // every receive's bytes untouched
  EXPECT_EQ(left.rewritten, static_cast<std::uint64_t>(left.receives));
  EXPECT_EQ(mirrored.rewritten, 0u);
  EXPECT_LE(left.end, mirrored.end);
  // An all-gather on the same communicator is still mirrored (its bytes are read).
  const Stats ag = runMirror(/*allgather=*/true, 40000, 2, 0, 1, 0, /*rewritten=*/true);
  EXPECT_EQ(ag.bad, 0);
  EXPECT_EQ(ag.rewritten, 0u);
}

// A tree connection carries only all-reduces: with the interposer rewriting the
// communicator's reductions its receives are left alone (Simple: not written at all), where
// mirror otherwise clears the slot (a tree's partial sums have no send to copy: zeros).
TEST(RingMirror, TreeReceivesOfARewrittenCommunicatorAreLeftAlone) {
  for (bool rewritten : {false, true}) {
    const std::uint64_t comm_id = rewritten ? 0xa101 : 0xa100;
    Config cfg;
    cfg.cluster.nodes = 8;
    cfg.emulation.data = DataPolicy::Mirror;
    plugin::PluginState::get().configure(cfg);
    plugin::PluginState::get().setResultsRewritten(comm_id, rewritten);
    void* ctx = nullptr;
    ASSERT_EQ(plugin::net::init(&ctx, comm_id, nullptr, nullptr, nullptr), nccl::ncclSuccess);
    RingConns c;
    c.recv = acceptVirtual(ctx, 0, ConnId{comm_id, 5, 4, 64, 1, 0, /*graph=*/2}, &c.listen,
                           &c.host_fd);
    DataComm& recv = comm(c.recv);
    const std::size_t sizes[3] = {kSlots * 4096, kSlots * 4096, kSlots * kStep};
    std::vector<std::uint8_t> buf[3];
    void* mr[3] = {};
    for (int p = 0; p < 3; ++p) {
      buf[p].assign(sizes[p], 0x5a);  // what an earlier step left in the slot
      ASSERT_EQ(plugin::net::regMr(c.recv, buf[p].data(), sizes[p], nccl::NCCL_PTR_HOST, &mr[p]),
                nccl::ncclSuccess);
    }
    Request* r = recv.allocRequest();
    ASSERT_NE(r, nullptr);
    void* data = buf[2].data();
    const std::size_t cap = kStep;
    live::TimeNs now = 1'000'000'000;
    recv.irecv(*r, 1, &data, &cap, nullptr, now);
    bool done = false;
    for (int i = 0; i < 1000 && !done; ++i) done = recv.test(*r, now += 100'000, nullptr);
    ASSERT_TRUE(done);
    const auto& vr = static_cast<plugin::VirtualRecvComm&>(recv);
    EXPECT_EQ(vr.written(plugin::DataWritten::Rewritten), rewritten ? 1u : 0u);
    EXPECT_EQ(buf[2][0], rewritten ? 0x5a : 0) << (rewritten ? "left alone" : "cleared");
    EXPECT_EQ(buf[2][kStep - 1], rewritten ? 0x5a : 0);
    recv.freeRequest(*r);
    for (int p = 0; p < 3; ++p) EXPECT_EQ(plugin::net::deregMr(c.recv, mr[p]), nccl::ncclSuccess);
    std::vector<RingConns> conns{c};
    closeConns(conns);
    EXPECT_EQ(plugin::net::finalize(ctx), nccl::ncclSuccess);
  }
}

}  // namespace
}  // namespace crystal::test
