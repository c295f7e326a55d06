// Targets (issue 4): isend + test round trip against a virtual peer < 1 us median per request
// (the plugin's own cost: the call to isend plus the test() call that reports completion,
// not the modelled wait in between); test() on a not-yet-due request < 100 ns.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <vector>

#include "crystal/live/clock.h"
#include "crystal/live/handle.h"
#include "net_api.h"

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

}  // namespace

BENCHMARK_MAIN();
