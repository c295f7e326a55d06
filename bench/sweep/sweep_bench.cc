// `crystal simulate --sweep` hot path: one model question per (op, size). Target (issue 10):
// thousands of sizes x ops in well under a second for N = 8192.
#include <benchmark/benchmark.h>

#include "crystal/model/nccl_model.h"
#include "crystal/sweep/sweep.h"

namespace {

using namespace crystal::sweep;

// The six ops over range(0) sizes (8 B upwards in steps of 8 B x 1.01), N = 8192 on 1024
// DGX H200 nodes.
void BM_Sweep8192(benchmark::State& state) {
  crystal::ClusterConfig cluster;
  cluster.nodes = 1024;
  const crystal::model::NcclModel model(cluster, crystal::ModelConfig{});
  SweepOptions o;
  o.nranks = 8192;
  for (std::uint64_t s = 8; o.steps.size() < static_cast<std::size_t>(state.range(0));
       s = s * 101 / 100 + 8)
    o.steps.push_back(s);
  std::size_t rows = 0;
  for (auto _ : state) {
    const auto r = runSweep(model, o);
    rows = r.size();
    benchmark::DoNotOptimize(r.data());
  }
  state.counters["rows"] = static_cast<double>(rows);
  state.counters["rows_per_s"] =
      benchmark::Counter(static_cast<double>(rows), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Sweep8192)->Arg(28)->Arg(1000)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
