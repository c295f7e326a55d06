// The P2P pacing thread's work per pass (plugin/p2p_pacer.h): a pass with nothing new (what
// it costs while R's kernel computes), one slice of one channel (R's send seen, its receive
// released when due, R's head and credit), and one slice of all 28 channels at once (what a
// 1 MiB all-reduce asks every ~2 us: 28 slices per channel in the model's ~60 us). Targets:
// a pass well under the ~2 us the agent kernel takes to bring a counter over PCIe, and the
// 28-channel slice under 1 us, so the CPU never sets the step pace. (One RingChannel per
// channel, before, cost ~900 ns per channel slice on the H200's host.) And one unit of a tree
// all-reduce on all 16 channels of a rank in the middle of its node (R's sends up and down,
// both receives). A tree unit is a whole 512 KiB step, which a channel's share of NVLink
// (450 GB/s / 16) moves in ~19 us at best: target 5 us, a quarter of it. And one unit of a
// broadcast on all 16 channels of a chain member (rank 5 of 64, root 0: its receive released
// on the chain's clock, its forward seen): also a 512 KiB step, target 5 us. And arming the
// next operation (preludes, P2pPacer::arm): 2 us a pass while one runs; a new shape's first,
// 10 us.
#include <benchmark/benchmark.h>

#include <atomic>
#include <memory>
#include <vector>

#include "crystal/live/tree_timing.h"
#include "p2p_pacer.h"

namespace crystal::plugin {
namespace {

constexpr int kChannels = 28;

std::unique_ptr<P2pPacer> pacer(std::vector<int>* send, std::vector<int>* recv) {
  const live::RingHop nvl{3500, 1.0 / 450, 0.0, 1};
  auto busy = std::make_shared<std::atomic<int>>(0);
  auto connected = std::make_shared<std::atomic<int>>(kChannels);
  auto p = std::make_unique<P2pPacer>(8, [=](bool) {
    return std::make_shared<live::RingChannel>(std::vector<live::RingHop>{nvl}, nvl, 2, busy,
                                               connected);
  });
  for (int k = 0; k < kChannels; ++k) recv->push_back(p->add(false, k));
  for (int k = 0; k < kChannels; ++k) send->push_back(p->add(true, k));
  return p;
}

void startAllReduce(P2pPacer& p, std::uint64_t bytes) {
  p.opStarted(0, live::CollectiveEntry{model::Func::AllReduce, model::Algo::Ring,
                                       model::Proto::Simple, bytes, kChannels});
}

void BM_P2pPacerIdlePass(benchmark::State& state) {
  std::vector<int> send, recv;
  auto p = pacer(&send, &recv);
  startAllReduce(*p, std::uint64_t{1} << 30);
  std::vector<plugin::P2pRelease> out;
  live::TimeNs now = 1000;
  for (auto _ : state) {
    out.clear();
    benchmark::DoNotOptimize(p->release(now, out));
    ++now;
  }
  state.counters["target_ns"] = 2000;
}
BENCHMARK(BM_P2pPacerIdlePass);

void BM_P2pPacerSlice(benchmark::State& state) {
  std::vector<int> send, recv;
  auto p = pacer(&send, &recv);
  startAllReduce(*p, std::uint64_t{1} << 40);
  std::vector<plugin::P2pRelease> out;
  live::TimeNs now = 0;
  std::uint64_t step = 0;
  for (auto _ : state) {
    step += 2;
    p->observe(send[0], step, now);
    p->observe(recv[0], step > 8 ? step - 8 : 0, now);
    out.clear();
    benchmark::DoNotOptimize(p->release(now, out));
    now += 50'000;  // a slice of 1 GiB on 28 channels of NVLink
  }
  state.counters["target_ns"] = 2000;
}
BENCHMARK(BM_P2pPacerSlice);

void BM_P2pPacerSliceAllChannels(benchmark::State& state) {
  std::vector<int> send, recv;
  auto p = pacer(&send, &recv);
  // 1 GiB all-reduces back to back: 84 slices per channel each (ringOpShape).
  constexpr int kSlicesPerOp = 84;
  std::vector<plugin::P2pRelease> out;
  live::TimeNs now = 0;
  std::uint64_t step = 0;
  int slice = 0;
  for (auto _ : state) {
    if (slice++ % kSlicesPerOp == 0) {
      p->opsDone();
      p->opStarted(now, live::CollectiveEntry{model::Func::AllReduce, model::Algo::Ring,
                                              model::Proto::Simple, std::uint64_t{1} << 30,
                                              kChannels});
    }
    step += 2;
    for (int k = 0; k < kChannels; ++k) {
      p->observe(send[static_cast<std::size_t>(k)], step, now);
      p->observe(recv[static_cast<std::size_t>(k)], step > 8 ? step - 8 : 0, now);
    }
    out.clear();
    benchmark::DoNotOptimize(p->release(now, out));
    now += 50'000;
  }
  state.counters["per_channel_ns"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * kChannels,
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["target_ns"] = 1000;
}
BENCHMARK(BM_P2pPacerSliceAllChannels);

void BM_P2pPacerTreeUnitAllChannels(benchmark::State& state) {
  constexpr int kTreeChannels = 16, kRank = 13, kRanks = 64;
  const live::RingHop nvl{3500, 1.0 / 450, 0.0, 1};
  auto busy = std::make_shared<std::atomic<int>>(0);
  auto connected = std::make_shared<std::atomic<int>>(kTreeChannels);
  P2pPacer p(kRanks, [=](bool) {
    return std::make_shared<live::RingChannel>(std::vector<live::RingHop>{nvl}, nvl, 2, busy,
                                               connected);
  });
  // 1 GiB on 16 channels: 128 units of 512 KiB each (NCCL's Simple tree chunks).
  live::TreeOpPlan plan;
  plan.units = 128;
  plan.unit_bytes = 512.0 * 1024;
  plan.nvl = {3500, 1.0 / 450 * kTreeChannels};
  plan.net = {14000, 1.0 / 50 * kTreeChannels};
  p.setTrees(
      [](int tree, std::function<live::TreeOpPlan(std::uint64_t)> next_op) {
        live::TreePosition pos = live::targetTreePosition(kRank, kRanks, 8, tree);
        return std::make_shared<live::TreeChannel>(std::move(pos), true, std::move(next_op));
      },
      [plan](const live::CollectiveEntry&, int) { return plan; });
  std::vector<int> down_recv, down_send, up_send, up_recv;
  for (int k = 0; k < kTreeChannels; ++k) {
    down_recv.push_back(p.add(false, k));
    down_send.push_back(p.add(true, k));
    up_send.push_back(p.add(true, k, true));
    up_recv.push_back(p.add(false, k, true));
  }
  std::vector<plugin::P2pRelease> out;
  live::TimeNs now = 0;
  std::uint64_t step = 0;
  for (auto _ : state) {
    if (step % plan.units == 0) {
      p.opsDone();
      p.opStarted(now, live::CollectiveEntry{model::Func::AllReduce, model::Algo::Tree,
                                             model::Proto::Simple, std::uint64_t{1} << 30,
                                             kTreeChannels});
    }
    ++step;
    for (std::size_t k = 0; k < kTreeChannels; ++k) {
      p.observe(up_send[k], step, now);
      p.observe(up_recv[k], step, now);
      p.observe(down_send[k], step, now);
      p.observe(down_recv[k], step, now);
    }
    out.clear();
    benchmark::DoNotOptimize(p.release(now, out));
    now += 40'000;  // a 512 KiB unit on a 16th of the NIC
  }
  state.counters["per_channel_ns"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * kTreeChannels,
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["target_ns"] = 5000;
}
BENCHMARK(BM_P2pPacerTreeUnitAllChannels);

void BM_P2pPacerChainUnitAllChannels(benchmark::State& state) {
  constexpr int kChainChannels = 16, kRank = 5, kRanks = 64;
  const live::RingHop nvl{3500, 1.0 / 450, 0.0, 1};
  auto busy = std::make_shared<std::atomic<int>>(0);
  auto connected = std::make_shared<std::atomic<int>>(kChainChannels);
  P2pPacer p(
      kRanks,
      [=](bool) {
        return std::make_shared<live::RingChannel>(std::vector<live::RingHop>{nvl}, nvl, 2, busy,
                                                   connected);
      },
      kRank);
  std::vector<int> send, recv;
  for (int k = 0; k < kChainChannels; ++k) recv.push_back(p.add(false, k));
  for (int k = 0; k < kChainChannels; ++k) send.push_back(p.add(true, k));
  // 1 GiB broadcasts back to back from rank 0: 128 one-step units of 512 KiB per channel.
  constexpr std::uint64_t kUnits = 128;
  live::CollectiveEntry op{model::Func::Broadcast, model::Algo::Ring, model::Proto::Simple,
                           std::uint64_t{1} << 30, kChainChannels};
  op.root = 0;
  std::vector<plugin::P2pRelease> out;
  live::TimeNs now = 0;
  std::uint64_t step = 0;
  for (auto _ : state) {
    if (step % kUnits == 0) {
      p.opsDone();
      p.opStarted(now, op, 0);
    }
    ++step;
    for (std::size_t k = 0; k < kChainChannels; ++k) {
      p.observe(recv[k], step, now);  // R consumed the unit...
      p.observe(send[k], step, now);  // ... and forwarded it
    }
    out.clear();
    benchmark::DoNotOptimize(p.release(now, out));
    now += 40'000;
  }
  state.counters["per_channel_ns"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * kChainChannels,
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["target_ns"] = 5000;
}
BENCHMARK(BM_P2pPacerChainUnitAllChannels);

// Preludes (P2pPacer::arm): arming the next all-reduce while one runs, every pass that may
// (the pacing thread's pass: target 2 us), the operation's schedule kept from the first of
// its shape; and the first of a new shape, which computes its first 32 units' schedule once
// (target: well under a group's 40 us operation, which it delays).
void BM_P2pPacerArmAhead(benchmark::State& state) {
  std::vector<int> send, recv;
  auto p = pacer(&send, &recv);
  const live::CollectiveEntry e{model::Func::AllReduce, model::Algo::Ring, model::Proto::Simple,
                                std::uint64_t{4} << 20, kChannels};
  p->opStarted(0, e);
  for (int k = 0; k < kChannels; ++k) p->observe(send[static_cast<std::size_t>(k)], 2, 100);
  for (auto _ : state) benchmark::DoNotOptimize(p->arm(e, 32, 0));
  state.counters["target_ns"] = 2000;
}
BENCHMARK(BM_P2pPacerArmAhead);

void BM_P2pPacerArmNewShape(benchmark::State& state) {
  std::vector<int> send, recv;
  auto p = pacer(&send, &recv);
  std::uint64_t bytes = std::uint64_t{4} << 20;
  for (auto _ : state) {
    bytes += 4096;  // another shape each time
    benchmark::DoNotOptimize(p->arm(live::CollectiveEntry{model::Func::AllReduce, model::Algo::Ring,
                                                          model::Proto::Simple, bytes, kChannels},
                                    32, 0));
  }
  state.counters["target_ns"] = 10'000;
}
BENCHMARK(BM_P2pPacerArmNewShape);

}  // namespace
}  // namespace crystal::plugin
