// The plugin's GPU writer: a small kernel (gpu_writer_kernel.cu) that runs the commands the
// proxy thread posts into a ring in mapped host memory (protocol: gpu_writer_ring.h): virtual
// senders' LL/LL128 flags stored into GPU receive buffers, and real peers' steps copied GPU
// to GPU.
//
// Why: with GDR, NCCL's LL/LL128 receive buffers are in GPU memory, and a flag write through
// the driver (cuMemsetD2D32Async) took 4.1 us of NCCL's proxy thread per receive on the H200
// (2026-12-03: 56 % of the proxy's busy time inside the plugin, one step per connection per
// round). Likewise a real receive's copy (cuMemcpyDtoDAsync and its completion word, ~2.5 us
// a driver call under MPS) kept the receiving proxy busy: 503 steps of 64 KiB an all-gather
// of 32 MiB took 4.5 ms, one real rank's 0.96 (2026-12-06, H100). Posting a command is a few
// stores; the kernel polls it within ~1-2 us.
//
// One writer per CUDA context, on its own non-blocking stream, shared by the receive comms of
// that context; its kernel's first block runs the ring and the others
// (CRYSTAL_GPU_WRITER_BLOCKS) share the copies; the kernel exits after CRYSTAL_GPU_WRITER_IDLE_US
// (100 us by default) without commands (so the program's cudaDeviceSynchronize returns) and the
// next post launches it again. Flags only where nothing else is ordered against them (data policy
// none), copies only of real peers' steps (DeviceQueue::copyAnyOrder); everything else stays on
// the DeviceQueue's stream. Unavailable (nullptr) when the plugin
// was built without nvcc or the kernel image does not load on this GPU: the caller keeps the driver
// memsets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "cuda_driver.h"
#include "gpu_writer_ring.h"

namespace crystal::plugin {

class GpuWriter {
 public:
  // Threads a block: 8 x 16 bytes of a copy in flight each (gpu_writer_kernel.cu kInFlight).
  static constexpr int kThreads = 512;
  // Blocks at most (CRYSTAL_GPU_WRITER_BLOCKS): block 0 runs the ring, the others help copy.
  static constexpr int kMaxBlocks = 64;

  // The writer of the calling thread's current CUDA context (created on first use), or
  // nullptr with `why` set when there is none: no context, no kernel image, a kernel that does
  // not load or whose first launch does not finish, another CUDA error while making it (a
  // context that failed once is not tried again), or no CUDA driver at all; each reason is
  // logged once (INFO). Throws only what allocation may (std::bad_alloc).
  [[nodiscard]] static std::shared_ptr<GpuWriter> forCurrentContext(std::string* why);

  ~GpuWriter();  // stops the kernel; frees the ring once every launch finished (bounded)
  GpuWriter(const GpuWriter&) = delete;
  GpuWriter& operator=(const GpuWriter&) = delete;

  // Queues `count` 32-bit words of `value` at dst, dst + pitch, ... (device memory). False
  // when the ring is full: the caller writes them another way. Commands for one address
  // never overlap in practice (NCCL reposts a slot only after its GPU consumed the flags).
  [[nodiscard]] bool post(void* dst, std::size_t pitch, std::uint32_t value, std::size_t count);
  // Queues a copy of `bytes` (< 4 GiB) from src to dst, both device addresses of this
  // context. Returns the command's number (done() reaches it once the bytes are there), or 0
  // when the ring is full or the writer failed: the caller copies another way.
  // With `release` (a device address of host memory) it then queues a kRelease of
  // `release_value` there, run once the copy (and everything before it) is done, and returns
  // that command's number; *released says whether it did (only the copy: its number).
  [[nodiscard]] std::uint64_t postCopy(void* dst, const void* src, std::size_t bytes,
                                       cuda::DevicePtr release = 0, std::uint64_t release_value = 0,
                                       bool* released = nullptr);

  struct Counts {
    std::uint64_t posted = 0, copies = 0, releases = 0, launches = 0, ring_full = 0;
  };
  [[nodiscard]] Counts counts() const;
  // Commands the kernel has run (read from the ring).
  [[nodiscard]] std::uint64_t done() const noexcept;

  // Tests: the kernel image to load (nullptr: the one built into the plugin, if any); also
  // forgets the contexts where making a writer failed.
  static void setImageForTesting(const void* image);

  // A command the kernel has not run this long after it was posted gets one WARN with the
  // writer's state (a hang then shows in NCCL's log: e.g. the kernel never started because
  // its stream shares a hardware queue with NCCL's spinning kernel).
  static constexpr std::int64_t kStallWarnNs = 5'000'000'000;
  // Tests: the watchdog's threshold for writers made from now on (0: kStallWarnNs).
  static void setStallWarnNsForTesting(std::int64_t ns);

 private:
  GpuWriter(const cuda::DriverApi& d, cuda::Context ctx);
  // forCurrentContext without its INFO line for a reason not said before.
  [[nodiscard]] static std::shared_ptr<GpuWriter> find(std::string* why);
  // Loads the kernel, makes the stream and the ring, runs one warm-up launch; nullptr with
  // `why` when the image does not load or the warm-up does not finish. Throws PluginError on
  // other CUDA errors.
  [[nodiscard]] static std::shared_ptr<GpuWriter> make(const cuda::DriverApi& d,
                                                        cuda::Context ctx, const void* image,
                                                        std::string* why);
  // Queues one command; its number, or 0 (ring full, or the writer failed: `what` names the
  // caller's fallback in the WARN of a failed launch). Under mu_.
  [[nodiscard]] std::uint64_t enqueue(std::uint64_t dst, std::uint64_t arg, std::uint32_t count,
                                      writer_ring::Kind kind, const char* what);
  // Under mu_. `copy`: launched for a copy (helpers come from the first copy on).
  void launch(bool copy = false);
  void watch();   // the watchdog thread's loop
  [[nodiscard]] std::string stateLine() const;  // under mu_
  const cuda::DriverApi& d_;
  cuda::Context ctx_;
  cuda::Module module_ = nullptr;
  cuda::Function fn_ = nullptr;
  cuda::Stream stream_ = nullptr;
  writer_ring::Ring* ring_ = nullptr;  // host view
  cuda::DevicePtr ring_dev_ = 0;     // the kernel's view of the same memory
  mutable std::mutex mu_;
  std::uint64_t next_ = 1;
  Counts counts_;
  std::int64_t stall_warn_ns_ = kStallWarnNs;
  std::uint64_t idle_ns_;  // the kernel's idle exit (CRYSTAL_GPU_WRITER_IDLE_US)
  unsigned blocks_;        // CRYSTAL_GPU_WRITER_BLOCKS, launched once a copy was posted
  unsigned chunk_;         // CRYSTAL_GPU_COPY_CHUNK: bytes a block copies at a time
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread watchdog_;
};

}  // namespace crystal::plugin
