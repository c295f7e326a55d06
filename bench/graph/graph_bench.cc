// Expansion (materialise every rank's stream) and validation throughput, in ops per second
// of the whole target, for Llama-3-70B-like jobs on 1K, 8K and 16K ranks (TP8 PP8, DP fills).
#include <benchmark/benchmark.h>
#include <fmt/core.h>

#include "crystal/config/config.h"
#include "crystal/graph/graph.h"
#include "graph/validate.h"

namespace {

crystal::Config job(int world) {
  return crystal::parseConfig(fmt::format(R"(
job: {{world_size: {}, layout: {{tp: 8, pp: 8}}}}
workload: {{kind: dense, layers: 80, hidden: 8192, ffn_hidden: 28672, heads: 64, kv_heads: 8,
            vocab: 128256, seq_len: 8192, micro_batches: 16}}
)", world), "bench.yaml");
}

void BM_Build(benchmark::State& st) {
  const auto c = job(static_cast<int>(st.range(0)));
  std::uint64_t ops = 0;
  for (auto _ : st) {
    auto g = crystal::graph::buildGraph(c);
    ops += g->totalOps();
    benchmark::DoNotOptimize(g);
  }
  st.counters["target_ops_per_s"] = benchmark::Counter(static_cast<double>(ops), benchmark::Counter::kIsRate);
}

void BM_ExpandAllRanks(benchmark::State& st) {
  auto g = crystal::graph::buildGraph(job(static_cast<int>(st.range(0))));
  std::vector<crystal::graph::Op> ops;
  std::uint64_t n = 0;
  for (auto _ : st) {
    for (int r = 0; r < g->worldSize(); ++r) {
      g->materialize(r, ops);
      n += ops.size();
    }
    benchmark::DoNotOptimize(ops.data());
  }
  st.counters["ops_per_s"] = benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsRate);
  st.counters["total_ops"] = static_cast<double>(g->totalOps());
}

void BM_ValidateSymmetric(benchmark::State& st) {
  auto g = crystal::graph::buildGraph(job(static_cast<int>(st.range(0))));
  std::uint64_t n = 0;
  for (auto _ : st) {
    const auto rep = crystal::graph::validateGraph(*g);
    n += rep.total_ops;
  }
  st.counters["target_ops_per_s"] = benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsRate);
}

void BM_ValidateNaive(benchmark::State& st) {
  auto g = crystal::graph::buildGraph(job(static_cast<int>(st.range(0))));
  std::uint64_t n = 0;
  for (auto _ : st) n += crystal::graph::validateNaive(*g).total_ops;
  st.counters["target_ops_per_s"] = benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsRate);
}

}  // namespace

BENCHMARK(BM_Build)->Arg(1024)->Arg(8192)->Arg(16384)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ExpandAllRanks)->Arg(1024)->Arg(8192)->Arg(16384)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_ValidateSymmetric)->Arg(1024)->Arg(8192)->Arg(16384)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ValidateNaive)->Arg(1024)->Unit(benchmark::kMillisecond)->Iterations(1);
