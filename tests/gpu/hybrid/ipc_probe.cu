// Can one real rank's proxy copy straight out of another real rank's GPU buffer?
//
// Two real ranks on one GPU (run_device.sh `two`) move their bytes through a shared-memory
// segment today: a device-to-host copy by the sender, a host-to-device copy by the receiver,
// ~200 us a 128 KiB step end to end (2026-12-05). One device-to-device copy would do, if the
// receiver can map the sender's buffer. NCCL allocates its buffers with cuMemCreate (POSIX
// file descriptor handles), so that means exporting the allocation as a file descriptor,
// passing it over a Unix socket (SCM_RIGHTS, abstract name) and importing and mapping it in
// the other process -- all inside NCCL's proxy thread while the process's NCCL kernel spins.
//
// This probe forks an exporter and an importer (before either touches CUDA). The exporter
// cuMemCreate's 64 MiB (POSIX_FD), fills it, and sends the exported fd, plus a legacy
// cuIpcGetMemHandle of a cuMemAlloc buffer. The importer launches a kernel that spins on a
// mapped host flag (gives up after ~2 s), and while it spins imports, maps and copies; each
// call's time is printed with "blocked" where it returned only after the kernel gave up.
// Then it times one 128 KiB device-to-device copy against the shared-memory route's two
// copies (median of 200, host-observed, event query spin) and a 64 MiB copy's bandwidth.
//
// Build and run (GPU machine): nvcc -O2 -o /tmp/ipc_probe ipc_probe.cu -lcuda && /tmp/ipc_probe
#include <cuda.h>
#include <cuda_runtime.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CU(x)                                                                  \
  do {                                                                         \
    CUresult r_ = (x);                                                         \
    if (r_ != CUDA_SUCCESS) {                                                  \
      const char* s_ = nullptr;                                                \
      cuGetErrorString(r_, &s_);                                               \
      std::fprintf(stderr, "[%s] %s:%d %s: %d %s\n", role, __FILE__, __LINE__, #x, \
                   static_cast<int>(r_), s_ ? s_ : "?");                       \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

static const char* role = "main";
static constexpr size_t kBytes = 64u << 20;
static constexpr size_t kOffset = 3u << 20;  // an interior address, as NCCL registers
static constexpr size_t kStep = 128u << 10;

struct Msg {
  size_t size = 0, offset = 0;
  CUipcMemHandle legacy{};
  int legacy_ok = 0;
};

__global__ void spin(volatile int* flag, int* result) {
  const long long start = clock64();
  while (*flag == 0) {
    if (clock64() - start > 4000000000LL) {
      *result = 2;
      return;
    }
  }
  *result = 1;
}

static double msSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

static sockaddr_un addrOf(const char* tag) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "crystal-ipc-probe-%d-%s",
                static_cast<int>(getpgrp()), tag);
  return a;
}
static socklen_t lenOf(const sockaddr_un& a) {
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + std::strlen(a.sun_path + 1));
}

static int bound(const char* tag) {
  const int s = socket(AF_UNIX, SOCK_DGRAM, 0);
  sockaddr_un a = addrOf(tag);
  if (s < 0 || bind(s, reinterpret_cast<sockaddr*>(&a), lenOf(a)) != 0) {
    std::perror("bind");
    std::exit(1);
  }
  return s;
}

// One datagram `m` to `tag`, with `fd` attached (SCM_RIGHTS) when fd >= 0; retried until the
// peer has bound its name.
static void sendTo(int s, const char* tag, const Msg& m, int fd) {
  sockaddr_un a = addrOf(tag);
  iovec iov{const_cast<Msg*>(&m), sizeof m};
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
  msghdr h{};
  h.msg_name = &a;
  h.msg_namelen = lenOf(a);
  h.msg_iov = &iov;
  h.msg_iovlen = 1;
  if (fd >= 0) {
    h.msg_control = ctl;
    h.msg_controllen = sizeof ctl;
    cmsghdr* c = CMSG_FIRSTHDR(&h);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  for (int i = 0; i < 500; ++i) {
    if (sendmsg(s, &h, 0) == static_cast<ssize_t>(sizeof m)) return;
    usleep(10000);
  }
  std::perror("sendmsg");
  std::exit(1);
}

static Msg recvFrom(int s, int* fd) {
  Msg m;
  iovec iov{&m, sizeof m};
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
  msghdr h{};
  h.msg_iov = &iov;
  h.msg_iovlen = 1;
  h.msg_control = ctl;
  h.msg_controllen = sizeof ctl;
  if (recvmsg(s, &h, 0) != static_cast<ssize_t>(sizeof m)) {
    std::perror("recvmsg");
    std::exit(1);
  }
  *fd = -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(&h, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) std::memcpy(fd, CMSG_DATA(c), sizeof *fd);
  return m;
}

static CUcontext context() {
  CU(cuInit(0));
  CUdevice dev;
  CU(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CU(cuDevicePrimaryCtxRetain(&ctx, dev));
  CU(cuCtxSetCurrent(ctx));
  return ctx;
}

static int exporter() {
  role = "exporter";
  const int s = bound("a");
  context();
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t gran = 0;
  CU(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  CUmemGenericAllocationHandle h;
  CU(cuMemCreate(&h, kBytes, &prop, 0));
  CUdeviceptr p;
  CU(cuMemAddressReserve(&p, kBytes, gran, 0, 0));
  CU(cuMemMap(p, kBytes, 0, h, 0));
  CUmemAccessDesc acc{};
  acc.location = prop.location;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU(cuMemSetAccess(p, kBytes, &acc, 1));
  for (size_t off = 0; off < kBytes; off += kStep)
    CU(cuMemsetD32(p + off, static_cast<unsigned>(0xC0DE0000u + off / kStep), kStep / 4));
  // What the plugin would do with an interior address NCCL registered.
  CUdeviceptr base = 0;
  size_t range = 0;
  CU(cuMemGetAddressRange(&base, &range, p + kOffset));
  CUmemGenericAllocationHandle h2;
  CU(cuMemRetainAllocationHandle(&h2, reinterpret_cast<void*>(p + kOffset)));
  CUmemAllocationProp got{};
  CU(cuMemGetAllocationPropertiesFromHandle(&got, h2));
  std::printf("exporter: granularity %zu; address range of an interior address: base %s, %zu "
              "bytes; retained handle's handle types 0x%x\n",
              gran, base == p ? "= allocation" : "!= allocation", range,
              static_cast<unsigned>(got.requestedHandleTypes));
  int fd = -1;
  const auto t = std::chrono::steady_clock::now();
  CU(cuMemExportToShareableHandle(&fd, h2, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  std::printf("exporter: cuMemExportToShareableHandle %.3f ms (fd %d)\n", msSince(t), fd);
  Msg m;
  m.size = kBytes;
  m.offset = kOffset;
  CUdeviceptr legacy;
  CU(cuMemAlloc(&legacy, kBytes));
  CU(cuMemsetD32(legacy, 0x1E6AC700u, kBytes / 4));
  m.legacy_ok = cuIpcGetMemHandle(&m.legacy, legacy) == CUDA_SUCCESS;
  CU(cuCtxSynchronize());
  sendTo(s, "b", m, fd);
  close(fd);
  int none;
  recvFrom(s, &none);  // the importer is done
  return 0;
}

static double medianUs(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

static int importer() {
  role = "importer";
  const int s = bound("b");
  context();
  int *flag, *result, *dflag, *dresult;
  cudaHostAlloc(&flag, sizeof(int), cudaHostAllocMapped);
  cudaHostAlloc(&result, sizeof(int), cudaHostAllocMapped);
  cudaHostGetDevicePointer(&dflag, flag, 0);
  cudaHostGetDevicePointer(&dresult, result, 0);
  cudaStream_t ks;
  cudaStreamCreateWithFlags(&ks, cudaStreamNonBlocking);
  CUstream cs;
  CU(cuStreamCreate(&cs, CU_STREAM_NON_BLOCKING));
  CUevent ev;
  CU(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
  CUdeviceptr mine;
  CU(cuMemAlloc(&mine, kBytes));
  void* pinned;
  CU(cuMemHostAlloc(&pinned, kBytes, 0));

  auto startSpin = [&] {
    *flag = 0;
    *result = 0;
    spin<<<1, 1, 0, ks>>>(dflag, dresult);
    usleep(20000);  // the kernel is running
  };
  auto timed = [&](const char* what, auto&& call) {
    const auto t = std::chrono::steady_clock::now();
    call();
    std::printf("importer: %-34s %8.3f ms%s\n", what, msSince(t),
                *result == 2 ? "  blocked (returned after the kernel gave up)" : "");
  };
  auto waitCopy = [&] {
    CU(cuEventRecord(ev, cs));
    CUresult r;
    while ((r = cuEventQuery(ev)) == CUDA_ERROR_NOT_READY) {
    }
    CU(r);
  };

  int fd = -1;
  const Msg m = recvFrom(s, &fd);
  std::printf("importer: got fd %d, legacy handle %s\n", fd, m.legacy_ok ? "yes" : "no");
  startSpin();
  CUmemGenericAllocationHandle h;
  CUdeviceptr peer = 0;
  timed("cuMemImportFromShareableHandle", [&] {
    CU(cuMemImportFromShareableHandle(&h, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  });
  close(fd);
  timed("cuMemAddressReserve + cuMemMap", [&] {
    CU(cuMemAddressReserve(&peer, m.size, 0, 0, 0));
    CU(cuMemMap(peer, m.size, 0, h, 0));
  });
  timed("cuMemSetAccess", [&] {
    CUmemAccessDesc acc{};
    acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    acc.location.id = 0;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CU(cuMemSetAccess(peer, m.size, &acc, 1));
  });
  timed("first 128 KiB copy (D2D, other stream)", [&] {
    CU(cuMemcpyDtoDAsync(mine, peer + m.offset, kStep, cs));
    waitCopy();
  });
  CUdeviceptr legacy = 0;
  if (m.legacy_ok)
    timed("cuIpcOpenMemHandle (legacy)", [&] {
      CU(cuIpcOpenMemHandle(&legacy, m.legacy, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    });
  const bool spinning = *result == 0;
  *flag = 1;
  cudaStreamSynchronize(ks);
  std::printf("importer: kernel %s while all of the above ran\n",
              spinning ? "was still spinning" : "had given up");

  // Content: the step at kOffset holds 0xC0DE0000 + its step number.
  std::vector<unsigned> host(kStep / 4);
  CU(cuMemcpyDtoH(host.data(), mine, kStep));
  const unsigned want = static_cast<unsigned>(0xC0DE0000u + kOffset / kStep);
  std::printf("importer: content %s (0x%08x, want 0x%08x)\n",
              std::all_of(host.begin(), host.end(), [&](unsigned v) { return v == want; }) ? "ok" : "WRONG",
              host[0], want);

  // Latency of one 128 KiB step, host-observed, while a kernel of this process spins.
  startSpin();
  std::vector<double> d2d, twoCopies;
  for (int i = 0; i < 200; ++i) {
    auto t = std::chrono::steady_clock::now();
    CU(cuMemcpyDtoDAsync(mine + (i % 64) * kStep, peer + (i % 64) * kStep, kStep, cs));
    waitCopy();
    d2d.push_back(msSince(t) * 1000);
    t = std::chrono::steady_clock::now();
    CU(cuMemcpyDtoHAsync(static_cast<char*>(pinned) + (i % 64) * kStep, mine + (i % 64) * kStep, kStep, cs));
    waitCopy();
    CU(cuMemcpyHtoDAsync(mine + (i % 64) * kStep, static_cast<char*>(pinned) + (i % 64) * kStep, kStep, cs));
    waitCopy();
    twoCopies.push_back(msSince(t) * 1000);
  }
  *flag = 1;
  cudaStreamSynchronize(ks);
  std::printf("importer: 128 KiB step, median of 200: D2D from the peer %.1f us; D2H + H2D "
              "through pinned memory %.1f us\n",
              medianUs(d2d), medianUs(twoCopies));
  auto t = std::chrono::steady_clock::now();
  for (int i = 0; i < 10; ++i) CU(cuMemcpyDtoDAsync(mine, peer, kBytes, cs));
  waitCopy();
  std::printf("importer: 64 MiB D2D from the peer: %.1f GB/s\n", 10.0 * kBytes / (msSince(t) * 1e6));
  if (legacy) {
    t = std::chrono::steady_clock::now();
    for (int i = 0; i < 10; ++i) CU(cuMemcpyDtoDAsync(mine, legacy, kBytes, cs));
    waitCopy();
    std::printf("importer: 64 MiB D2D from the legacy mapping: %.1f GB/s\n",
                10.0 * kBytes / (msSince(t) * 1e6));
  }

  startSpin();
  timed("cuMemUnmap + cuMemAddressFree", [&] {
    CU(cuMemUnmap(peer, m.size));
    CU(cuMemAddressFree(peer, m.size));
  });
  timed("cuMemRelease", [&] { CU(cuMemRelease(h)); });
  if (legacy) timed("cuIpcCloseMemHandle (legacy)", [&] { CU(cuIpcCloseMemHandle(legacy)); });
  *flag = 1;
  cudaStreamSynchronize(ks);
  sendTo(s, "a", Msg{}, -1);
  return 0;
}

int main() {
  setpgid(0, 0);
  const pid_t child = fork();
  if (child == 0) return importer();
  const int rc = exporter();
  int st = 0;
  waitpid(child, &st, 0);
  std::printf("probe: exporter rc %d, importer %s %d\n", rc,
              WIFEXITED(st) ? "rc" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
  return rc | (WIFEXITED(st) ? WEXITSTATUS(st) : 1);
}
