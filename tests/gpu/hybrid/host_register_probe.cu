// Does registering host memory with CUDA wait for a kernel that is still running?
//
// The plugin's real<->real path through shared memory (plugin/shm_segment.h) has the receiver
// map the sender's segment and register it with cuMemHostRegister when the sender's offer
// arrives, i.e. inside NCCL's proxy thread while an NCCL kernel may be spinning for that very
// proxy. If registration synchronized the context it would deadlock the job. This probe
// launches a kernel that spins on a mapped host flag (giving up after ~2 s), then, while it
// spins, maps a POSIX shared-memory segment, registers it, copies from it on another
// non-blocking stream, unregisters it, and only then releases the kernel. Each call's time
// and whether the kernel was still spinning when it returned are printed; "blocked" means a
// call waited for the kernel (it returned only once the kernel gave up).
//
// Build and run (on the GPU machine): nvcc -O2 -Itests/gpu/common -o /tmp/probe \
//   tests/gpu/hybrid/host_register_probe.cu && /tmp/probe
#include <cuda.h>
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "probe.cuh"

__global__ void spin(volatile int* flag, int* result) {
  const long long start = clock64();
  while (*flag == 0) {
    if (clock64() - start > 4000000000LL) {  // ~2 s at ~2 GHz
      *result = 2;                           // gave up
      return;
    }
  }
  *result = 1;  // released by the host
}

static double msSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

int main() {
  PROBE_CUDA(cudaSetDevice(0));
  int* flag = nullptr;
  PROBE_CUDA(cudaHostAlloc(&flag, sizeof(int), cudaHostAllocMapped));
  *flag = 0;
  int* result = nullptr;
  PROBE_CUDA(cudaHostAlloc(&result, sizeof(int), cudaHostAllocMapped));
  *result = 0;
  int *dflag = nullptr, *dresult = nullptr;
  PROBE_CUDA(cudaHostGetDevicePointer(&dflag, flag, 0));
  PROBE_CUDA(cudaHostGetDevicePointer(&dresult, result, 0));
  cudaStream_t ks, cs;
  PROBE_CUDA(cudaStreamCreateWithFlags(&ks, cudaStreamNonBlocking));
  PROBE_CUDA(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
  const size_t bytes = 8u << 20;
  void* dev = nullptr;
  PROBE_CUDA(cudaMalloc(&dev, bytes));

  char name[64];
  std::snprintf(name, sizeof name, "/crystal-probe-%d", static_cast<int>(getpid()));
  const int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0 || posix_fallocate(fd, 0, static_cast<off_t>(bytes)) != 0) {
    std::perror("shm_open/posix_fallocate");
    return 1;
  }
  void* shm = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (shm == MAP_FAILED) {
    std::perror("mmap");
    return 1;
  }
  std::memset(shm, 7, bytes);

  spin<<<1, 1, 0, ks>>>(dflag, dresult);
  PROBE_CUDA(cudaGetLastError());
  auto t = std::chrono::steady_clock::now();
  while (msSince(t) < 50) {
  }  // let it start
  auto report = [&](const char* what, double ms) {
    const bool spinning = cudaStreamQuery(ks) == cudaErrorNotReady;
    std::printf("%-44s %8.3f ms  kernel %s\n", what, ms,
                spinning ? "still spinning (not blocked)" : "done (BLOCKED on the kernel)");
  };
  t = std::chrono::steady_clock::now();
  PROBE_CUDA(cudaHostRegister(shm, bytes, cudaHostRegisterPortable));
  report("cudaHostRegister(shm, 8 MiB)", msSince(t));
  t = std::chrono::steady_clock::now();
  PROBE_CUDA(cudaMemcpyAsync(dev, shm, bytes, cudaMemcpyHostToDevice, cs));
  cudaEvent_t ev;
  PROBE_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  PROBE_CUDA(cudaEventRecord(ev, cs));
  while (cudaEventQuery(ev) == cudaErrorNotReady && msSince(t) < 1000) {
  }
  report("H2D 8 MiB from it on another stream", msSince(t));
  void* pinned = nullptr;
  t = std::chrono::steady_clock::now();
  PROBE_CUDA(cudaHostAlloc(&pinned, bytes, cudaHostAllocPortable));
  report("cudaHostAlloc(8 MiB)", msSince(t));
  t = std::chrono::steady_clock::now();
  PROBE_CUDA(cudaHostUnregister(shm));
  report("cudaHostUnregister(shm)", msSince(t));
  *flag = 1;
  PROBE_CUDA(cudaStreamSynchronize(ks));
  std::printf("kernel result: %s\n", *result == 1 ? "released by the host (every call above returned first)"
                                                   : "gave up (a call waited for it)");
  munmap(shm, bytes);
  shm_unlink(name);
  PROBE_CUDA(cudaFreeHost(pinned));
  return *result == 1 ? 0 : 3;
}
