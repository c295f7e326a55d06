// The P2P pacing thread's work per pass (plugin/p2p_pacer.h): a pass with nothing new (what
// it costs while R's kernel computes), and one slice of one channel (R's send seen, its
// receive released when due, R's head and credit). Target: a pass well under the ~2 us the
// agent kernel takes to bring a counter over PCIe, so the CPU never sets the step pace.
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
  auto p = std::make_unique<P2pPacer>(8, [=] {
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

}  // namespace
}  // namespace crystal::plugin
