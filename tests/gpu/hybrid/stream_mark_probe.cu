// What does marking a point of a stream cost the calling thread: an event record (what the P2P
// agent does twice a paced call, plugin/p2p_agent.cc before()/after()) or a stream memory
// operation writing a pinned host word (cuStreamWriteValue32, what plugin/device_queue.cc uses
// where the driver has it)? And does a second thread watching the marks (cuEventQuery in a
// loop, as the pacing thread does, or a plain load of the host word) slow the first one down?
//
// Each "call" is what a paced small collective does on the program's thread: mark, launch one
// short kernel (NCCL's), mark. Printed: the median and 90th percentile host ns of a call for
//   launch only | events (2 records) | words (2 writes), each with the watcher idle and busy,
// then events with the watcher asking every 0-5 us, the ns of one cuStreamIsCapturing, and a
// check that a word write lands only after the kernel before it ends (stream order: the whole
// point of a mark).
//
// Build and run (on the GPU machine):
//   nvcc -O2 -std=c++17 -Itests/gpu/common -o /tmp/mark tests/gpu/hybrid/stream_mark_probe.cu \
//     -lcuda && /tmp/mark
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "probe.cuh"

#define CU(x)                                                                      \
  do {                                                                             \
    CUresult r_ = (x);                                                             \
    if (r_ != CUDA_SUCCESS) {                                                      \
      const char* s_ = nullptr;                                                    \
      cuGetErrorString(r_, &s_);                                                   \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_ ? s_ : "?"); \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)

namespace {

using Clock = std::chrono::steady_clock;
long long nsSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t).count();
}

enum class Mark { None, Event, Word };

struct Result {
  long long p50, p90;
};

// `calls` paced calls on `s`, a kernel of `kernel_ns` each; the watcher thread polls the marks
// while `watch` is set. Drains the stream every 64 calls so the queue never fills.
Result run(CUstream s, Mark mark, bool watch, int calls, long long kernel_ns, CUdeviceptr word_dev,
           volatile unsigned* word_host, long long gap_ns = 0) {
  std::vector<CUevent> events(128);
  for (auto& e : events) CU(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
  std::atomic<bool> stop{false};
  std::atomic<CUevent> latest{nullptr};
  std::thread watcher([&] {
    if (!watch) return;
    while (!stop.load(std::memory_order_relaxed)) {
      if (mark == Mark::Word) {
        (void)*word_host;
      } else if (CUevent e = latest.load()) {
        (void)cuEventQuery(e);
      }
      if (gap_ns > 0) {  // a watcher that asks every gap_ns, spinning between (no sleep)
        const auto until = Clock::now() + std::chrono::nanoseconds(gap_ns);
        while (Clock::now() < until) {
        }
      }
    }
  });
  std::vector<long long> ns;
  ns.reserve(calls);
  unsigned seq = 0;
  for (int i = 0; i < calls; ++i) {
    const auto t = Clock::now();
    if (mark == Mark::Event) {
      CU(cuEventRecord(events[(2 * i) % events.size()], s));
    } else if (mark == Mark::Word) {
      CU(cuStreamWriteValue32(s, word_dev, ++seq, CU_STREAM_WRITE_VALUE_DEFAULT));
    }
    spinNs<<<1, 1, 0, s>>>(kernel_ns);
    if (mark == Mark::Event) {
      CUevent e = events[(2 * i + 1) % events.size()];
      CU(cuEventRecord(e, s));
      latest.store(e);
    } else if (mark == Mark::Word) {
      CU(cuStreamWriteValue32(s, word_dev, ++seq, CU_STREAM_WRITE_VALUE_DEFAULT));
    }
    ns.push_back(nsSince(t));
    if (i % 64 == 63) {
      latest.store(nullptr);
      CU(cuStreamSynchronize(s));
    }
  }
  CU(cuStreamSynchronize(s));
  stop = true;
  watcher.join();
  for (auto& e : events) CU(cuEventDestroy(e));
  std::sort(ns.begin(), ns.end());
  return {ns[ns.size() / 2], ns[ns.size() * 9 / 10]};
}

}  // namespace

int main() {
  CU(cuInit(0));
  cudaFree(nullptr);  // the runtime's primary context, current on this thread
  CUcontext ctx;
  CU(cuCtxGetCurrent(&ctx));
  CUdevice dev;
  CU(cuCtxGetDevice(&dev));
  int memops = 0;
  CU(cuDeviceGetAttribute(&memops, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1, dev));
  char name[128];
  CU(cuDeviceGetName(name, sizeof name, dev));
  std::printf("device %s, stream mem ops attribute %d\n", name, memops);
  CUstream s;
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  void* host = nullptr;
  CU(cuMemHostAlloc(&host, 64, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  auto* word_host = static_cast<volatile unsigned*>(host);
  *word_host = 0;
  CUdeviceptr word_dev;
  CU(cuMemHostGetDevicePointer(&word_dev, host, 0));

  // Stream order: the write behind a 200 us kernel lands after it.
  {
    const auto t = Clock::now();
    spinNs<<<1, 1, 0, s>>>(200000);
    CU(cuStreamWriteValue32(s, word_dev, 7, CU_STREAM_WRITE_VALUE_DEFAULT));
    while (*word_host != 7) {
      if (nsSince(t) > 2000000000LL) break;
    }
    const long long seen = nsSince(t);
    std::printf("order: word 7 seen %lld ns after the 200 us kernel's launch (%s)\n", seen,
                *word_host == 7 && seen >= 200000 ? "after it: ok" : "WRONG");
    CU(cuStreamSynchronize(s));
  }

  // One cuStreamIsCapturing.
  {
    CUstreamCaptureStatus st;
    const int n = 20000;
    const auto t = Clock::now();
    for (int i = 0; i < n; ++i) CU(cuStreamIsCapturing(s, &st));
    std::printf("cuStreamIsCapturing: %lld ns a call\n", nsSince(t) / n);
  }

  const int calls = 20000;
  for (long long kernel_ns : {2000LL, 15000LL}) {
    std::printf("kernel %lld ns, %d calls: host ns a call p50 / p90\n", kernel_ns, calls);
    for (Mark m : {Mark::None, Mark::Event, Mark::Word})
      for (bool watch : {false, true}) {
        run(s, m, watch, 2000, kernel_ns, word_dev, word_host);  // warm
        const Result r = run(s, m, watch, calls, kernel_ns, word_dev, word_host);
        std::printf("  %-6s watcher %-4s  %6lld / %6lld\n",
                    m == Mark::None ? "launch" : m == Mark::Event ? "events" : "words",
                    watch ? "busy" : "idle", r.p50, r.p90);
      }
  }
  // The pacing thread's cuEventQuery every pass contends with the program's driver calls:
  // how often may it ask before the program's thread pays for it?
  std::printf("events, kernel 2000 ns: host ns a call p50 / p90 by the watcher's query gap\n");
  for (long long gap : {0LL, 500LL, 1000LL, 2000LL, 5000LL}) {
    run(s, Mark::Event, true, 2000, 2000, word_dev, word_host, gap);
    const Result r = run(s, Mark::Event, true, calls, 2000, word_dev, word_host, gap);
    std::printf("  gap %5lld ns  %6lld / %6lld\n", gap, r.p50, r.p90);
  }
  CU(cuMemFreeHost(host));
  return 0;
}
