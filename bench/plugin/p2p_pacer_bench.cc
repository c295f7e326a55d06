// The P2P pacing thread's work per pass (plugin/p2p_pacer.h): a pass with nothing new (what
// it costs while R's kernel computes), one slice of one channel (R's send seen, its receive
// released when due, R's head and credit), and one slice of all 28 channels at once (what a
// 1 MiB all-reduce asks every ~2 us: 28 slices per channel in the model's ~60 us). Targets:
// a pass well under the ~2 us the agent kernel takes to bring a counter over PCIe, and the
// 28-channel slice under 1 us, so the CPU never sets the step pace. (One RingChannel per
// channel, before, cost ~900 ns per channel slice on the H200's host.)
#include <benchmark/benchmark.h>

#include <atomic>
#include <memory>
#include <vector>

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

}  // namespace
}  // namespace crystal::plugin
