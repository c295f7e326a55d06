// A CUDA driver for CPU tests (plugin/cuda_driver.h's DriverApi): every call is recorded and
// performed at once on host memory (the "device" buffers are host buffers), while events
// report "not ready" until the test declares the stream's work done (FakeGpu::complete).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "cuda_driver.h"
#include "gpu_writer_ring.h"

namespace crystal::test {

struct FakeCall {
  std::string name;  // the libcuda function, e.g. "cuMemsetD8Async"
  std::uintptr_t dst = 0, src = 0;
  std::size_t bytes = 0;  // copies/memsets: bytes; 2D: width in bytes (copy) or words (memset)
  std::size_t pitch = 0, rows = 0;
  std::uint32_t value = 0;
};

struct FakeGpu {
  std::vector<FakeCall> calls;
  // Events recorded so far report done. Tests flip it while the P2P pacing thread queries.
  std::atomic<bool> complete{true};
  std::uint64_t done_through = 0;  // and so do those of the first N records (cuEventRecord)
  int done_after_queries = 0;      // N > 0: the N-th cuEventQuery from now sets `complete`
  std::atomic<std::uint64_t> event_queries{0};  // cuEventQuery calls since install
  bool has_context = true;  // cuCtxGetCurrent returns a context
  // cuLaunchKernel of the mirror-result kernel runs at once (recorded as
  // "cuLaunchKernel:crystal_mirror_reduce", dst, src, count in bytes' place, n in value).
  // cuLaunchKernel of the GPU writer runs its ring at once (what the kernel does, on the
  // CPU, then "exits"; recorded as "cuLaunchKernel" with the grid's blocks in rows, the
  // launch number in value and the chunk bytes in bytes); false: the launch is recorded and runs
  // nothing (a kernel that has not started yet).
  bool kernel_runs = true;
  bool module_loads = true;  // cuModuleLoadData succeeds
  bool capturing = false;    // cuStreamIsCapturing says the stream is under graph capture
  bool register_ok = true;   // cuMemHostRegister succeeds
  bool export_ok = true;     // cuMemExportToShareableHandle succeeds
  bool import_ok = true;     // cuMemImportFromShareableHandle succeeds
  bool write_value_ok = true;  // cuStreamWriteValue32 succeeds (with installFakeDriver(true))
  // cuLaunchKernel of the P2P agent (plugin/p2p_agent_abi.h) is recorded as
  // "cuLaunchKernel:crystal_p2p_agent"; the "kernel" then runs while the table's `want` is 1
  // (p2pAgentPass) and leaves at once otherwise. The thread that launched it last:
  std::thread::id agent_launcher;
  int live_events = 0, live_streams = 0, live_host_allocs = 0, live_device_allocs = 0,
      live_host_registers = 0, live_mem_handles = 0, live_reservations = 0, live_mappings = 0;
  [[nodiscard]] std::vector<FakeCall> named(const std::string& name) const;
  [[nodiscard]] std::size_t count(const std::string& prefix) const;  // calls starting so
};

// With kernel_runs false: runs the GPU-writer commands (fills, copies) posted since, as the kernel
// would, leaving it "running" (benchmarks drain the ring between batches of posts). Returns how
// many.
std::size_t drainFakeWriterRing();

// One pass of the P2P agent kernel of the latest launch, on the CPU, if it is running: every
// connection's watched counter copied to `seen`, its `release` stored at its target (with the
// trace's stamps from a "global timer" 1 s behind the CPU's steady clock when the table asks
// for them); then it leaves if `want` is 0. Returns whether it still runs.
bool p2pAgentPass();

// Frees pinned host allocations the plugin left on purpose (a flag-writer ring whose kernel
// may still run); returns how many.
std::size_t freeLeftHostAllocs();

// A "cuMem allocation" of `bytes` (as NCCL makes its buffers with cuMemCreate): host memory the
// fake driver can export and map again elsewhere (an import is a second view of the same
// bytes). Free with fakeCuMemFree; other device buffers of tests stay plain host memory, which
// cuMemRetainAllocationHandle refuses, as it refuses cudaMalloc'ed memory.
std::byte* fakeCuMemAlloc(std::size_t bytes);
void fakeCuMemFree(std::byte* p);

// cuStreamWriteValue32 (installFakeDriver(true)) writes at once while `complete` is set and
// nothing is held; otherwise the write is held: this performs the held ones, in order, as the
// stream reaching them would. Returns how many.
std::size_t releaseFakeStreamWrites();

// The process-wide fake: reset, installed with setDriverForTesting, removed by uninstall().
// `stream_mem_ops`: the driver has cuStreamWriteValue32 (else that entry is nullptr, as in a
// driver without it, and the plugin's queues use events).
FakeGpu& installFakeDriver(bool stream_mem_ops = false);
void uninstallFakeDriver();

}  // namespace crystal::test
