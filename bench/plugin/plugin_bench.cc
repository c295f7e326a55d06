// Targets (issue 4): isend + test round trip against a virtual peer < 1 us median per request
// (the plugin's own cost: the call to isend plus the test() call that reports completion,
// not the modelled wait in between); test() on a not-yet-due request < 100 ns.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <vector>

#include "crystal/live/clock.h"
#include "crystal/live/handle.h"
#include "crystal/live/ring_timing.h"
#include "crystal/live/tree_timing.h"
#include "net_api.h"
#include "state.h"
#include "tuner.h"

namespace {

using namespace crystal;
namespace net = crystal::plugin::net;

struct VirtualSend {
  void* ctx = nullptr;
  void* comm = nullptr;
  void* mr = nullptr;
  std::vector<char> buf = std::vector<char>(64 << 20);
  VirtualSend() {
    if (net::init(&ctx, 1, nullptr, nullptr, nullptr) != nccl::ncclSuccess) std::abort();
    live::NetHandle h;
    h.kind = live::HandleKind::VirtualPeer;
    h.rank = 1;
    h.nranks = 2;
    if (net::connect(ctx, 0, &h, &comm, nullptr) != nccl::ncclSuccess || !comm) std::abort();
    if (net::regMr(comm, buf.data(), buf.size(), nccl::NCCL_PTR_HOST, &mr) != nccl::ncclSuccess)
      std::abort();
  }
  ~VirtualSend() {
    (void)net::closeSend(comm);
    (void)net::finalize(ctx);
  }
};

double median(std::vector<double>& v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

void BM_IsendTestRoundTrip(benchmark::State& state) {
  VirtualSend vs;
  std::vector<double> samples;
  samples.reserve(1 << 20);
  for (auto _ : state) {
    void* req = nullptr;
    const live::TimeNs t0 = live::nowNs();
    (void)net::isend(vs.comm, vs.buf.data(), 4096, 0, vs.mr, nullptr, &req);
    const live::TimeNs t1 = live::nowNs();
    int done = 0;
    live::TimeNs t2 = 0, t3 = 0;
    while (!done) {
      t2 = live::nowNs();
      (void)net::test(req, &done, nullptr);
      t3 = live::nowNs();
    }
    const double ns = static_cast<double>((t1 - t0) + (t3 - t2));
    samples.push_back(ns);
    state.SetIterationTime(ns * 1e-9);
  }
  state.counters["median_ns_per_request"] = median(samples);
  state.counters["target_ns"] = 1000;
}
BENCHMARK(BM_IsendTestRoundTrip)->UseManualTime()->MinTime(0.5);

void BM_TestNotYetDue(benchmark::State& state) {
  VirtualSend vs;
  void* req = nullptr;
  // 255 posts of 64 MiB on one port: the last is due about 0.3 s later (at 50 GB/s).
  for (int i = 0; i < 255; ++i) {
    void* r = nullptr;
    (void)net::isend(vs.comm, vs.buf.data(), 64 << 20, 0, vs.mr, nullptr, &r);
    req = r;
  }
  std::vector<double> samples;
  int done = 0;
  constexpr int kBatch = 256;
  for (auto _ : state) {
    const live::TimeNs t0 = live::nowNs();
    for (int i = 0; i < kBatch; ++i) (void)net::test(req, &done, nullptr);
    const live::TimeNs t1 = live::nowNs();
    benchmark::DoNotOptimize(done);
    samples.push_back(static_cast<double>(t1 - t0) / kBatch);
  }
  state.counters["median_ns_per_test"] = median(samples);
  state.counters["target_ns"] = 100;
  state.counters["still_pending"] = done ? 0 : 1;
}
BENCHMARK(BM_TestNotYetDue)->Iterations(2000);

// A ring channel of a 64-rank communicator on 16 channels: the real rank's node positions
// over NVLink, the last one's over the NET.
std::unique_ptr<live::RingChannel> ringOf64() {
  const live::RingHop nvl{3500, 1.0 / 450, 0.0, 1}, netw{14000, 1.0 / 400, 1.0 / 50, 8};
  std::vector<live::RingHop> chain(7, nvl);
  chain.push_back(netw);
  return std::make_unique<live::RingChannel>(chain, netw, 2, std::make_shared<std::atomic<int>>(16),
                                             std::make_shared<std::atomic<int>>(16));
}

// One unit of a ring channel of a 64-rank communicator (8 per node: 6 virtual members
// between next and prev): the real rank's send, the receive's post and its arrival, which
// runs the model's recurrence for the virtual members. Virtual clock: no waiting.
void BM_RingUnitSendRecv(benchmark::State& state) {
  const auto owned = ringOf64();
  live::RingChannel& ring = *owned;
  live::TimeNs now = 0;
  std::uint64_t u = 0;
  ring.postRecv(u, now, true);
  for (auto _ : state) {
    ring.postRecv(u + 4, now, false);
    benchmark::DoNotOptimize(ring.postSend(now, 512 << 10));
    benchmark::DoNotOptimize(ring.recvArrival(u, now, 512 << 10, now));
    now += 2000;
    ++u;
  }
  state.counters["target_ns"] = 1000;
}
BENCHMARK(BM_RingUnitSendRecv);

// test() of a ring receive whose unit the real rank has not sent yet: a lock, a compare
// and the stall check (the proxy polls this while the GPU works on the previous step).
void BM_RingRecvNotYetKnown(benchmark::State& state) {
  const live::RingHop nvl{3500, 1.0 / 450, 0.0, 1};
  live::RingChannel ring({nvl}, nvl, 2, nullptr, nullptr);
  ring.postRecv(0, 0, true);
  (void)ring.postSend(0, 4096);
  for (auto _ : state) benchmark::DoNotOptimize(ring.recvArrival(1, 0, 4096, 100));
  state.counters["target_ns"] = 100;
}
BENCHMARK(BM_RingRecvNotYetKnown);

// A broadcast's chain at a member `hops` from its head (5; 63, a reduce's root of 64; 8191, of
// 8192), back to back (one operation of one transfer per iteration): the operation's first
// receive (placed: startChain, which prices the fill over the hops and the slowest member's
// operation) and its arrival, as NCCL's proxy posts and tests it, on every channel of every
// operation.
void BM_RingChainOperation(benchmark::State& state) {
  const auto owned = ringOf64();
  live::RingChannel& ring = *owned;
  const model::ChainKernel kernel{{0, 12.0}, {65536, 14.3}, {262144, 22.1}, {1 << 20, 55.1}};
  ring.setChainOpCost(2, {8400, kernel, kernel});
  const auto hops = static_cast<int>(state.range(0));
  live::TimeNs now = 0;
  std::uint64_t u = 0;
  for (auto _ : state) {
    ring.postRecv(u, now, true, 1, -1, 16, /*first=*/1);
    ring.startChain(u, now, {hops, 64 << 10, now, 1}, 16);
    benchmark::DoNotOptimize(ring.recvArrival(u, now, 512 << 10, now));
    ring.recvDone(true);
    now += 2000;
    ++u;
  }
  state.counters["target_ns"] = 1000;
}
BENCHMARK(BM_RingChainOperation)->Arg(5)->Arg(63)->Arg(8191);

// One unit of a tree channel (Simple, 512 KiB steps): a receive from a child (the arrival
// from below), the real rank's send up, the receive from its parent (down the loop to the
// root and back). Args: communicator size, real rank, whose place in the target's tree 0 sets
// the hops run per unit: 64/13 (2 NVLink below; 5 NVLink + 2 x 1 NET + 5 NVLink around),
// 8192/8191 (the deepest leaf: 7 NVLink + 2 x 10 NET + 7 NVLink around).
void BM_TreeUnitUpDown(benchmark::State& state) {
  const live::TreePosition pos = live::targetTreePosition(static_cast<int>(state.range(1)),
                                                          static_cast<int>(state.range(0)), 8, 0);
  live::TreeOpPlan plan;
  plan.units = std::uint64_t{1} << 40;  // one long operation
  plan.unit_bytes = 512 << 10;
  plan.nvl = {3500, 1.0 / 28};
  plan.net = {14000, 1.0 / 25};
  live::TreeChannel tree(pos, true, [plan](std::uint64_t) { return plan; });
  live::TimeNs now = 0;
  std::uint64_t u = 0;
  for (auto _ : state) {
    tree.postRecv(u, now, 512 << 10);
    benchmark::DoNotOptimize(tree.recvArrival(live::TreeRole::FromChild, u, now, now));
    benchmark::DoNotOptimize(tree.postUpSend(u, now, 512 << 10));
    benchmark::DoNotOptimize(tree.recvArrival(live::TreeRole::FromParent, u, now, now));
    now += 2000;
    ++u;
  }
  state.counters["hops_per_unit"] = static_cast<double>(pos.below.size() + pos.loop.size());
  state.counters["target_ns"] = 1000;
}
BENCHMARK(BM_TreeUnitUpDown)->Args({64, 13})->Args({8192, 8191});

}  // namespace

BENCHMARK_MAIN();

// The tuner's getCollInfo, once per collective on the application's thread: the model's
// cost table for the call, plus (ring) the folded channel count (plugin/ring_fold.h), which
// for an entry NCCL forced asks the model for that entry's channels. Arg 1: fold on, Arg 0:
// off; both with the table NCCL_PROTO=Simple leaves (Tree/Ring x Simple usable), a 64-rank
// 1 MiB all-gather. Arg 2 (second): 1 = every call a size not asked before, so the model is
// evaluated each time (plugin/tuner_memo.h remembers answers per size: a training job asks
// the same few sizes). Target: under 10 us per call (a collective's launch costs ~5-10 us);
// the remembered answer should cost a tenth of the computed one.
void BM_TunerGetCollInfoRing(benchmark::State& state) {
  Config cfg;
  cfg.source = "bench";
  cfg.cluster.nodes = 8;
  cfg.emulation.fold_rings = state.range(0) != 0;
  plugin::PluginState::get().configure(cfg);
  void* ctx = nullptr;
  if (plugin::tuner::init(&ctx, 3, 64, 64, nullptr, nullptr, nullptr) != nccl::ncclSuccess)
    std::abort();
  const bool new_sizes = state.range(1) != 0;
  std::size_t bytes = 1 << 20;
  int ch = 0;
  for (auto _ : state) {
    float table[7][3];
    for (int a = 0; a < 7; ++a)
      for (int p = 0; p < 3; ++p) table[a][p] = p == 2 && a < 2 ? 0.0f : -1.0f;
    ch = 0;
    if (new_sizes) bytes = (bytes + 128) & ((std::size_t{1} << 24) - 1);  // 131072 sizes
    benchmark::DoNotOptimize(plugin::tuner::getCollInfo(
        ctx, nccl::ncclFuncAllGather, bytes, 1, reinterpret_cast<float**>(table), 7, 3, 0, &ch));
  }
  state.counters["channels"] = ch;
  state.counters["target_us"] = 10;
  (void)plugin::tuner::finalize(ctx);
}
BENCHMARK(BM_TunerGetCollInfoRing)
    ->ArgsProduct({{0, 1}, {0, 1}})
    ->ArgNames({"fold", "new_sizes"})
    ->Unit(benchmark::kMicrosecond);
