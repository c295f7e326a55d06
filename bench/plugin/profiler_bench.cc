// What NCCL's per-task profiler calls cost the thread that enqueues them (ncclGroupEnd: one
// startEvent per p2p task, its stopEvent when the plan is reclaimed). In emulation the
// profiler only feeds proxy operations to the net plugin and gives p2p tasks no handle; in
// record mode every event becomes a JSON line. An all-to-all on 64 ranks is 128 tasks each
// time: before emulation skipped them, the real rank spent ~1.7 us a task more than real NCCL
// (the H200's host, 2026-12-04). Target: emulation < 50 ns a task, and the ratio to record
// mode printed.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>

#include "plugin/profiler/proxy_ops.h"
#include "plugin/profiler/recorder.h"

namespace {

using namespace crystal;
using namespace crystal::nccl;

double taskNs(const ncclProfiler_v5_t& p, void* ctx, int n) {
  ncclProfilerEventDescr_v5_t d{};
  d.type = ncclProfileP2p;
  d.p2p.func = "Send";
  d.p2p.count = 4096;
  d.p2p.datatype = "ncclFloat32";
  d.p2p.nChannels = 1;
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    d.p2p.peer = i % 64;
    void* h = nullptr;
    (void)p.startEvent(ctx, &h, &d);
    benchmark::DoNotOptimize(h);
    (void)p.stopEvent(h);
  }
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
         n;
}

// The two contexts, made once: once open, the record file stays open for the process (and
// Google Benchmark calls the function several times), so the emulation context comes first.
struct Contexts {
  void* emu = nullptr;
  void* rec = nullptr;
  Contexts() {
    profiler::setProxyOpObserver({[] { return true; }, [](const profiler::ProxyOpStart&) {}});
    const ncclProfiler_v5_t& p = profiler::profilerV5();
    int mask = 0;
    ::unsetenv("CRYSTAL_RECORD");
    (void)p.init(&emu, 1, &mask, "emulation", 8, 64, 0, nullptr);
    ::setenv("CRYSTAL_RECORD", "/dev/null", 1);
    (void)p.init(&rec, 2, &mask, "record", 8, 64, 0, nullptr);
    ::unsetenv("CRYSTAL_RECORD");
  }
};

void BM_ProfilerP2pTaskEmulationVsRecord(benchmark::State& state) {
  static const Contexts c;
  const ncclProfiler_v5_t& p = profiler::profilerV5();
  double emu_ns = 0, rec_ns = 0;
  long rounds = 0;
  for (auto _ : state) {
    emu_ns += taskNs(p, c.emu, 128);
    rec_ns += taskNs(p, c.rec, 128);
    ++rounds;
  }
  state.counters["emulation_ns_per_task"] = emu_ns / rounds;
  state.counters["record_ns_per_task"] = rec_ns / rounds;
  state.counters["record_over_emulation"] = rec_ns / emu_ns;
  state.counters["emulation_under_50ns"] = emu_ns / rounds < 50 ? 1 : 0;
}
BENCHMARK(BM_ProfilerP2pTaskEmulationVsRecord);

}  // namespace
