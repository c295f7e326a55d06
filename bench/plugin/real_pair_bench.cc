// Real<->real bytes between two real ranks of one machine, three routes in one run,
// interleaved: GPU to GPU (CRYSTAL_IPC=1, the default: the receiver maps the sender's cuMem
// allocation), shared memory (CRYSTAL_SHM=1, CRYSTAL_IPC=0) and TCP over loopback (both 0).
// All pairs live in this process and move GPU buffers through the tests' fake CUDA driver,
// which performs each copy at once on the CPU: what the proxies' threads spend per byte. GPU
// to GPU: one copy out of the mapping; shared memory: the staging copy into the segment and
// the copy out of it; TCP: the same two copies plus the socket's two. On a GPU those copies
// are the copy engines' and only TCP's stay on the CPU.
// NCCL's pattern: 8 steps of 128 KiB in flight per connection, every request tested in turn
// as the two proxies do. Reported: GB/s a direction for each route and their ratio. The
// modelled delivery times are those of the plugin's default link (50 GB/s).
// On the GPU the 64 MiB send/recv between two real ranks went from 1.6 GB/s (TCP) to 5-7 GB/s
// (tests/gpu/hybrid/README.md, twenty-seventh session).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <memory>
#include <vector>

#include "crystal/live/clock.h"
#include "crystal/live/handle.h"
#include "fake_cuda_driver.h"
#include "net_api.h"
#include "state.h"

// The plugin's three routes for real peers' GPU bytes.
enum class Route { Tcp, Shm, Ipc };

namespace {

using namespace crystal;
namespace net = crystal::plugin::net;

constexpr std::size_t kStep = 128 << 10, kSteps = 8, kRegion = kStep * kSteps;

struct RealPair {
  void* ctx = nullptr;
  void *listen = nullptr, *send = nullptr, *recv = nullptr;
  void *send_mr = nullptr, *recv_mr = nullptr;
  // The sender's buffer: a (fake) cuMem allocation, as NCCL's are; only Ipc exports it.
  std::byte* src = crystal::test::fakeCuMemAlloc(kRegion);
  std::vector<char> dst = std::vector<char>(kRegion, 0);

  explicit RealPair(Route route) {
    ::setenv("CRYSTAL_SHM", route == Route::Tcp ? "0" : "1", 1);
    ::setenv("CRYSTAL_IPC", route == Route::Ipc ? "1" : "0", 1);
    if (net::init(&ctx, 7, nullptr, nullptr, nullptr) != nccl::ncclSuccess) std::abort();
    char handle[live::kNcclHandleSize] = {};
    if (net::listen(ctx, 0, handle, &listen) != nccl::ncclSuccess) std::abort();
    for (int i = 0; i < 1'000'000 && (!send || !recv); ++i) {
      if (!send && net::connect(ctx, 0, handle, &send, nullptr) != nccl::ncclSuccess) std::abort();
      if (!recv && net::accept(listen, &recv, nullptr) != nccl::ncclSuccess) std::abort();
    }
    if (!send || !recv) std::abort();
    if (net::regMr(send, src, kRegion, nccl::NCCL_PTR_CUDA, &send_mr) !=
            nccl::ncclSuccess ||
        net::regMr(recv, dst.data(), dst.size(), nccl::NCCL_PTR_CUDA, &recv_mr) !=
            nccl::ncclSuccess)
      std::abort();
  }
  ~RealPair() {
    (void)net::closeSend(send);
    (void)net::closeRecv(recv);
    (void)net::closeListen(listen);
    (void)net::finalize(ctx);
    crystal::test::fakeCuMemFree(src);
  }
  // `steps` steps through the 8-slot window; returns the seconds it took.
  double move(std::size_t steps) {
    std::vector<void*> sreq(kSteps), rreq(kSteps);
    const live::TimeNs t0 = live::nowNs();
    std::size_t posted = 0, done = 0;
    while (done < steps) {
      for (std::size_t k = 0; k < kSteps; ++k) {
        if (!sreq[k] && !rreq[k] && posted < steps) {
          char* d = dst.data() + k * kStep;
          std::size_t size = kStep;
          int tag = 0;
          if (net::irecv(recv, 1, reinterpret_cast<void**>(&d), &size, &tag, &recv_mr, nullptr,
                         &rreq[k]) != nccl::ncclSuccess ||
              net::isend(send, src + k * kStep, kStep, 0, send_mr, nullptr, &sreq[k]) !=
                  nccl::ncclSuccess)
            std::abort();
          ++posted;
        }
        for (void** req : {&sreq[k], &rreq[k]}) {
          int d = 0;
          if (*req && net::test(*req, &d, nullptr) != nccl::ncclSuccess) std::abort();
          if (d) *req = nullptr;
        }
      }
      std::size_t busy = 0;  // slots with a send or a receive still out
      for (std::size_t k = 0; k < kSteps; ++k) busy += sreq[k] || rreq[k];
      done = posted - busy;
    }
    return static_cast<double>(live::nowNs() - t0) * 1e-9;
  }
  // `steps` small steps one at a time: post both sides, test until both are done. What one
  // ring step of a small all-gather costs the two proxies' threads, the GPU aside.
  double pingSteps(std::size_t steps, std::size_t bytes) {
    const live::TimeNs t0 = live::nowNs();
    for (std::size_t i = 0; i < steps; ++i) {
      void *sreq = nullptr, *rreq = nullptr;
      char* d = dst.data();
      std::size_t size = bytes;
      int tag = 0;
      if (net::irecv(recv, 1, reinterpret_cast<void**>(&d), &size, &tag, &recv_mr, nullptr,
                     &rreq) != nccl::ncclSuccess ||
          net::isend(send, src, bytes, 0, send_mr, nullptr, &sreq) != nccl::ncclSuccess)
        std::abort();
      while (sreq || rreq) {
        for (void** req : {&sreq, &rreq}) {
          int done = 0;
          if (*req && net::test(*req, &done, nullptr) != nccl::ncclSuccess) std::abort();
          if (done) *req = nullptr;
        }
      }
    }
    return static_cast<double>(live::nowNs() - t0) * 1e-9;
  }
};

void BM_RealPairRoutes(benchmark::State& state) {
  const std::size_t steps = 256;  // 32 MiB a round
  double ipc_s = 0, shm_s = 0, tcp_s = 0;
  test::installFakeDriver();
  {
    RealPair tcp(Route::Tcp), shm(Route::Shm), ipc(Route::Ipc);
    // The receivers read CRYSTAL_IPC when an offer comes: only the Ipc pair's sender offered.
    ::setenv("CRYSTAL_IPC", "1", 1);
    for (RealPair* p : {&tcp, &shm, &ipc}) (void)p->move(64);  // offers answered, routes settled
    for (auto _ : state) {
      ipc_s += ipc.move(steps);
      shm_s += shm.move(steps);
      tcp_s += tcp.move(steps);
    }
  }
  ::unsetenv("CRYSTAL_SHM");
  ::unsetenv("CRYSTAL_IPC");
  test::uninstallFakeDriver();
  const double bytes = static_cast<double>(steps * kStep) * static_cast<double>(state.iterations());
  state.counters["ipc_GBps"] = bytes / ipc_s / 1e9;
  state.counters["shm_GBps"] = bytes / shm_s / 1e9;
  state.counters["tcp_GBps"] = bytes / tcp_s / 1e9;
  state.counters["ipc_over_shm"] = shm_s / ipc_s;
  state.counters["shm_over_tcp"] = tcp_s / shm_s;
}
BENCHMARK(BM_RealPairRoutes)->Iterations(20)->Unit(benchmark::kMillisecond);

// One small step at a time (1 KiB), the routes interleaved: the plugin's CPU time for a
// real<->real hop, posted to done on both sides, on top of the modelled link latency
// (`link_us`, the plugin's default link; a step cannot complete before it). GPU to GPU with the
// stream of frames and acks in shared memory (the default, plugin/shm_stream.h) and on TCP
// (CRYSTAL_SHM_STREAM=0, as before it), shared memory, TCP. On the GPU such a hop took ~25 us
// through the two proxies (tests/gpu/hybrid/README.md, twenty-eighth session).
void BM_RealPairSmallStep(benchmark::State& state) {
  const std::size_t steps = 2000, bytes = 1024;
  double ipc_s = 0, ipc_tcp_s = 0, shm_s = 0, tcp_s = 0;
  test::installFakeDriver();
  {
    ::setenv("CRYSTAL_SHM_STREAM", "0", 1);
    RealPair ipc_tcp(Route::Ipc);
    ::unsetenv("CRYSTAL_SHM_STREAM");
    RealPair tcp(Route::Tcp), shm(Route::Shm), ipc(Route::Ipc);
    ::setenv("CRYSTAL_IPC", "1", 1);
    for (RealPair* p : {&tcp, &shm, &ipc, &ipc_tcp}) (void)p->move(64);
    for (auto _ : state) {
      ipc_s += ipc.pingSteps(steps, bytes);
      ipc_tcp_s += ipc_tcp.pingSteps(steps, bytes);
      shm_s += shm.pingSteps(steps, bytes);
      tcp_s += tcp.pingSteps(steps, bytes);
    }
  }
  ::unsetenv("CRYSTAL_SHM");
  ::unsetenv("CRYSTAL_IPC");
  test::uninstallFakeDriver();
  const double n = static_cast<double>(steps) * static_cast<double>(state.iterations());
  const double link_us = static_cast<double>(plugin::PluginState::get().link().latency_ns) * 1e-3;
  state.counters["link_us"] = link_us;
  state.counters["ipc_us"] = ipc_s / n * 1e6;
  state.counters["ipc_tcpstream_us"] = ipc_tcp_s / n * 1e6;
  state.counters["shm_us"] = shm_s / n * 1e6;
  state.counters["tcp_us"] = tcp_s / n * 1e6;
  // Ours beyond the link: TCP stream over shared-memory stream.
  state.counters["stream_gain"] = (ipc_tcp_s / n * 1e6 - link_us) / (ipc_s / n * 1e6 - link_us);
}
BENCHMARK(BM_RealPairSmallStep)->Iterations(10)->Unit(benchmark::kMillisecond);

}  // namespace
