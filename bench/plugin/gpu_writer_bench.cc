// An LL receive from a virtual peer into GPU memory under data policy none: what NCCL's proxy
// thread spends in irecv + the completing test() when the flags go to the GPU writer
// (gpu_writer.h: a command in a mapped host ring). The CUDA driver is the tests' fake, so
// this is the CPU side only; the driver path it replaces cost 4.1 us per receive on the H200
// (cuMemsetD2D32Async, counted by the plugin's call stats on 2026-12-03). Target: < 1 us.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "fake_cuda_driver.h"
#include "gpu_writer.h"
#include "state.h"
#include "virtual_recv.h"

namespace {

using namespace crystal;

constexpr std::size_t kLLStep = 65536;  // an LL slot (512 KiB buffer / 8)
const unsigned char kImage[16] = {};

void BM_LLReceiveFlagsThroughTheGpuWriter(benchmark::State& state) {
  const bench::DataPolicyNone none;
  ::unsetenv("CRYSTAL_GPU_WRITER");
  test::FakeGpu& gpu = test::installFakeDriver();
  plugin::GpuWriter::setImageForTesting(kImage);
  gpu.kernel_runs = false;  // the kernel keeps running; drained below, outside the timing
  std::vector<double> ns;
  {
    bench::VirtualRecv recv(nccl::NCCL_PTR_CUDA);
    int slot = 0;
    for (auto _ : state) {
      ns.push_back(recv.receive(0, slot, kLLStep).first);
      slot = (slot + 1) % 8;
      state.PauseTiming();
      if (slot == 0) (void)test::drainFakeWriterRing();  // the "GPU" runs what was posted
      state.ResumeTiming();
    }
    state.counters["memsets"] = static_cast<double>(gpu.count("cuMemsetD2D32Async"));
  }
  test::uninstallFakeDriver();
  plugin::GpuWriter::setImageForTesting(nullptr);
  state.counters["ns_per_receive"] = bench::median(ns);
  state.counters["target_ns"] = 1000;
  state.counters["h200_memset_ns"] = 4090;
}
BENCHMARK(BM_LLReceiveFlagsThroughTheGpuWriter)->Iterations(20000);

}  // namespace
