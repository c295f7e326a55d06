// Hot paths of the NCCL model. Targets (issue 3): choose()+time() under 2 us per call;
// the step-level time of one collective independent of the number of ranks.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "crystal/model/nccl_model.h"

namespace {

using crystal::ClusterConfig;
using crystal::ModelConfig;
using namespace crystal::model;

NcclModel dgx(int nodes) {
  ClusterConfig c;
  c.nodes = nodes;
  return NcclModel(c, ModelConfig{});
}

// What the engine does per collective: NCCL's choice, then the time of that choice.
void BM_ChoosePlusTime(benchmark::State& state) {
  const NcclModel m = dgx(1024);
  const CommShape s{8192, 1024, 8};
  std::uint64_t bytes = 1024;
  for (auto _ : state) {
    const Choice c = m.choose(Func::AllReduce, bytes, s);
    benchmark::DoNotOptimize(m.time(Func::AllReduce, bytes, s, c.algo, c.proto, c.channels));
    bytes = bytes >= (1ULL << 32) ? 1024 : bytes * 4;
  }
  // Seconds per choose()+time() pair (printed with an SI prefix, e.g. 330n).
  state.counters["s_per_call"] = benchmark::Counter(
      1.0, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_ChoosePlusTime)->Unit(benchmark::kMicrosecond);

// What the engine does per p2p op (engine_comm.cc: NcclCostModel::p2pUs): one p2pTime of a
// cross-node pair, beside choose()+time() above (target: the same order, under 2 us).
void BM_P2pTime(benchmark::State& state) {
  const NcclModel m = dgx(1024);
  std::uint64_t bytes = 1024;
  for (auto _ : state) {
    benchmark::DoNotOptimize(m.p2pTime(bytes, false));
    bytes = bytes >= (1ULL << 32) ? 1024 : bytes * 4;
  }
  state.counters["s_per_call"] = benchmark::Counter(
      1.0, benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_P2pTime)->Unit(benchmark::kMicrosecond);

// Closed-form time of a 1 GiB ring all-reduce over range(0) ranks (8 per node).
void BM_RingTimeClosedForm(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const NcclModel m = dgx(n / 8);
  const CommShape s{n, n / 8, 8};
  for (auto _ : state) {
    benchmark::DoNotOptimize(m.time(Func::AllReduce, 1ULL << 30, s, Algo::Ring, Proto::Simple, 16));
  }
  state.counters["ranks"] = n;
}
BENCHMARK(BM_RingTimeClosedForm)->Arg(1024)->Arg(8192)->Arg(16384)->Unit(benchmark::kMicrosecond);

// The step-level recurrence itself: O(ranks per node x steps); steps grow with ranks
// (2(n-1) per loop), nodes do not multiply the work.
void BM_RingRecurrence(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const NcclModel m = dgx(n / 8);
  const CommShape s{n, n / 8, 8};
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        m.timeByRecurrence(Func::AllReduce, 1ULL << 30, s, Algo::Ring, Proto::Simple, 16));
  }
  state.counters["ranks"] = n;
  state.counters["steps"] = 2.0 * (n - 1);
}
BENCHMARK(BM_RingRecurrence)->Arg(1024)->Arg(8192)->Arg(16384)->Unit(benchmark::kMicrosecond);

void BM_TreeRecurrence(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const NcclModel m = dgx(n / 8);
  const CommShape s{n, n / 8, 8};
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        m.timeByRecurrence(Func::AllReduce, 1ULL << 28, s, Algo::Tree, Proto::Simple, 16));
  }
  state.counters["ranks"] = n;
}
BENCHMARK(BM_TreeRecurrence)->Arg(1024)->Arg(8192)->Arg(16384)->Unit(benchmark::kMicrosecond);

// Members arriving in range(0) blocks (e.g. pipeline stages reaching a DP all-reduce at
// different times), 8192 ranks: cost grows with blocks, not ranks.
void BM_RingFinishTimes(benchmark::State& state) {
  const NcclModel m = dgx(1024);
  const CommShape s{8192, 1024, 8};
  std::vector<StartClass> blocks;
  const int k = static_cast<int>(state.range(0));
  for (int i = 0; i < k; ++i) blocks.push_back({10.0 * i, 8192 / k});
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        m.ringFinishTimes(Func::AllReduce, 1ULL << 28, s, Proto::Simple, 16, blocks));
  }
  state.counters["blocks"] = k;
}
BENCHMARK(BM_RingFinishTimes)->Arg(2)->Arg(8)->Arg(32)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
