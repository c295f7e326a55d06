// Replay throughput and its growth with world size (issue 3: events/s and time for
// 1K/8K/16K ranks). Counters: events (unit runs off the queue), events_per_s, ops and
// ops_per_s (ops replayed), units (simulated), ranks.
//   BM_SymmetricLayout  tp8 x pp8 x dp(world/64) test layout, one unit per pipeline stage
//   BM_NaiveLayout      the same, every rank simulated (the growth symmetry avoids)
//   BM_SimulateConfig   the real generator and NCCL model on the Llama-3-70B example with
//                       dp scaled to the world (when crystal_graph and crystal_model exist)
#include <benchmark/benchmark.h>

#include "crystal/replay/replay.h"
#include "tests/engine/test_graphs.h"

#ifdef CRYSTAL_BENCH_WITH_CONFIG
#include "crystal/config/config.h"
#endif

namespace crystal::replay {
namespace {

using testing::FakeCost;
using testing::LayoutGraph;

LayoutGraph::Shape shapeFor(std::int64_t world) {
  LayoutGraph::Shape s;
  s.tp = 8;
  s.pp = 8;
  s.dp = static_cast<int>(world / 64);
  s.micro = 16;
  s.world_barrier = true;
  return s;
}

void report(benchmark::State& state, const ReplayResult& r, std::int64_t world) {
  std::uint64_t ops = 0;
  for (const auto& u : r.units) ops += u.ops;
  state.counters["ops"] = static_cast<double>(ops);  // ops replayed (all simulated units)
  state.counters["ops_per_s"] =
      benchmark::Counter(static_cast<double>(ops) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
  state.counters["events"] = static_cast<double>(r.events);
  state.counters["events_per_s"] =
      benchmark::Counter(static_cast<double>(r.events), benchmark::Counter::kIsRate);
  state.counters["units"] = static_cast<double>(r.units.size());
  state.counters["ranks"] = static_cast<double>(world);
}

void run(benchmark::State& state, ReplayMode mode) {
  const std::int64_t world = state.range(0);
  const LayoutGraph g(shapeFor(world));
  FakeCost cost;
  ReplayOptions o;
  o.mode = mode;
  ReplayResult r;
  std::uint64_t events = 0;
  for (auto _ : state) {
    r = runReplay(g, cost, o);
    events += r.events;
  }
  report(state, r, world);
  state.counters["events_per_s"] =
      benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
}

void BM_SymmetricLayout(benchmark::State& state) { run(state, ReplayMode::Symmetric); }
void BM_NaiveLayout(benchmark::State& state) { run(state, ReplayMode::Naive); }

BENCHMARK(BM_SymmetricLayout)->Arg(1024)->Arg(8192)->Arg(16384)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_NaiveLayout)->Arg(1024)->Arg(8192)->Unit(benchmark::kMillisecond)->Iterations(1);

#ifdef CRYSTAL_BENCH_WITH_CONFIG
void BM_SimulateConfig(benchmark::State& state) {
  Config c = loadConfig(CRYSTAL_BENCH_CONFIG);
  const int world = static_cast<int>(state.range(0));
  const auto& l = c.job.layout;
  const int model_parallel = l.tp * l.cp * l.pp;
  c.job.layout.dp = world / model_parallel;
  c.job.layout.ep = 1;
  c.job.world_size = world;
  c.cluster.nodes = world / c.cluster.gpus_per_node;
  const auto g = graph::buildGraph(c);
  const NcclCostModel cost(c.cluster, c.model);
  ReplayOptions o;
  ReplayResult r;
  std::uint64_t events = 0;
  for (auto _ : state) {
    r = runReplay(*g, cost, o);
    events += r.events;
  }
  report(state, r, world);
  state.counters["events_per_s"] =
      benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
  state.counters["iteration_ms"] = r.units.empty() || r.units[0].iterations.empty()
                                       ? 0.0
                                       : static_cast<double>(r.units[0].iterations[0].time) / 1e6;
}
BENCHMARK(BM_SimulateConfig)->Arg(1024)->Arg(8192)->Arg(16384)->Unit(benchmark::kMillisecond);
#endif

}  // namespace
}  // namespace crystal::replay

BENCHMARK_MAIN();
