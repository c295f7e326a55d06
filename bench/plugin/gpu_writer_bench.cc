// An LL receive from a virtual peer into GPU memory under data policy none: what NCCL's proxy
// thread spends in irecv + the completing test() when the flags go to the GPU writer
// (gpu_writer.h: a command in a mapped host ring). The CUDA driver is the tests' fake, so
// this is the CPU side only; the driver path it replaces cost 4.1 us per receive on the H200
// (cuMemsetD2D32Async, counted by the plugin's call stats on 2026-12-03). Target: < 1 us.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "crystal/live/clock.h"
#include "device_queue.h"
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

// A real peer's 64 KiB step GPU to GPU (device_queue.h copyAnyOrder + mark, then done() once
// it ran): what NCCL's receiving proxy thread spends on it, by the GPU writer's kernel
// (CRYSTAL_GPU_COPY_MAX, the default) and by the driver on the plugin's stream (0), in one
// run, with the driver calls each made a step. The driver here is the tests' fake, so the
// ns are the CPU side only; on an H100 under MPS each driver call cost ~2.5 us and the
// stream's two a step kept that proxy busy: 503 steps of a 32 MiB all-gather, 4.5 ms
// (2026-12-06). Target: the writer's < 0.5 us a step and no driver call.
void BM_RealStepCopyByWriterAndByStream(benchmark::State& state) {
  constexpr std::size_t kStep = 64 << 10;
  constexpr int kSlots = 8;
  test::FakeGpu& gpu = test::installFakeDriver(/*stream_mem_ops=*/true);  // marks by host word
  plugin::GpuWriter::setImageForTesting(kImage);
  ::unsetenv("CRYSTAL_GPU_WRITER");
  std::vector<char> src(kStep * kSlots, 1), dst(kStep * kSlots, 0);
  std::vector<double> writer_ns, stream_ns;
  double writer_calls = 0, stream_calls = 0;
  {
    plugin::DeviceQueue by_writer(kSlots), by_stream(kSlots);
    by_writer.setGpuWriter(plugin::GpuWriter::forCurrentContext(nullptr));
    (void)by_writer.done(0);  // the writer's first launch, outside the timing
    gpu.kernel_runs = false;  // the kernel keeps running; drained below, outside the timing
    auto step = [&](plugin::DeviceQueue& q, int slot, std::vector<double>& ns, double& calls) {
      const std::size_t before = gpu.calls.size();
      const auto off = static_cast<std::size_t>(slot) * kStep;
      const auto t0 = live::nowNs();
      q.copyAnyOrder(dst.data() + off, src.data() + off, kStep);
      q.mark(slot);
      const auto t1 = live::nowNs();
      (void)test::drainFakeWriterRing();  // the "GPU" runs it
      const auto t2 = live::nowNs();
      if (!q.done(slot)) std::abort();
      ns.push_back(static_cast<double>((t1 - t0) + (live::nowNs() - t2)));
      calls += static_cast<double>(gpu.calls.size() - before);
    };
    int slot = 0;
    for (auto _ : state) {
      step(by_writer, slot, writer_ns, writer_calls);
      step(by_stream, slot, stream_ns, stream_calls);
      slot = (slot + 1) % kSlots;
    }
  }
  gpu.kernel_runs = true;
  test::uninstallFakeDriver();
  plugin::GpuWriter::setImageForTesting(nullptr);
  const auto n = static_cast<double>(state.iterations());
  state.counters["writer_ns"] = bench::median(writer_ns);
  state.counters["stream_ns"] = bench::median(stream_ns);
  state.counters["writer_driver_calls"] = writer_calls / n;
  state.counters["stream_driver_calls"] = stream_calls / n;
  state.counters["target_writer_ns"] = 500;
  state.counters["h100_mps_driver_call_ns"] = 2500;
}
BENCHMARK(BM_RealStepCopyByWriterAndByStream)->Iterations(20000);

}  // namespace
