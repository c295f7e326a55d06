// GPU memory (GDR) must not make a timing run slower: a receive from a virtual peer into a
// Simple buffer in GPU memory under data policy `none` costs the same as one in host memory
// (no driver call; docs/plugin.md "GPU memory (GDR)"). Both are measured in one run,
// interleaved, and reported with their ratio (target: ~1).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "state.h"
#include "virtual_recv.h"

namespace {

using namespace crystal;
using bench::median;
using bench::VirtualRecv;

void BM_VirtualRecvNoneHostVsGpu(benchmark::State& state) {
  const bench::DataPolicyNone none;
  std::vector<double> host_rt, gpu_rt, host_wait, gpu_wait;
  {
    VirtualRecv host(nccl::NCCL_PTR_HOST), gpu(nccl::NCCL_PTR_CUDA);
    int slot = 0;
    for (auto _ : state) {
      const auto h = host.receive(slot);
      const auto g = gpu.receive(slot);
      slot = (slot + 1) % 8;
      host_rt.push_back(h.first);
      gpu_rt.push_back(g.first);
      if (h.second > 0) host_wait.push_back(h.second);
      if (g.second > 0) gpu_wait.push_back(g.second);
    }
  }
  const double hr = median(host_rt), gr = median(gpu_rt);
  state.counters["host_ns_per_request"] = hr;
  state.counters["gpu_ns_per_request"] = gr;
  state.counters["gpu_over_host"] = hr > 0 ? gr / hr : 0;
  state.counters["host_ns_per_pending_test"] = median(host_wait);
  state.counters["gpu_ns_per_pending_test"] = median(gpu_wait);
}
BENCHMARK(BM_VirtualRecvNoneHostVsGpu)->MinTime(0.5);

}  // namespace
