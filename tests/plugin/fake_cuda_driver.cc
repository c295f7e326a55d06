#include "fake_cuda_driver.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "mirror_kernel_abi.h"
#include "p2p_agent_abi.h"
#include "p2p_agent_rules.h"

namespace crystal::test {
namespace {

using plugin::cuda::DevicePtr;
using plugin::cuda::Result;

FakeGpu g;
int g_context = 0, g_stream = 0;
// Calls come from the test's thread and the plugin's (the P2P agent's pacing thread queries
// events and launches its kernel): one call at a time, as the recorded order needs.
std::recursive_mutex g_mu;
#define FAKE_LOCK const std::lock_guard fake_lock_(g_mu)

void* ptr(DevicePtr p) { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(p)); }
std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

void record(FakeCall c) {
  FAKE_LOCK;
  g.calls.push_back(std::move(c));
}

Result getErrorString(Result rc, const char** s) {
  FAKE_LOCK;
  *s = rc == 600 ? "fake: not ready" : "fake: error";
  return 0;
}
Result ctxGetCurrent(void** c) {
  *c = g.has_context ? &g_context : nullptr;
  return 0;
}
Result ctxSetCurrent(void*) { return 0; }
Result streamCreate(void** s, unsigned) {
  FAKE_LOCK;
  ++g.live_streams;
  *s = &g_stream;
  return 0;
}
Result streamDestroy(void*) {
  FAKE_LOCK;
  --g.live_streams;
  return 0;
}
// An event remembers whether the work before its last record is done, and that record's
// number (records count from 1 per install; FakeGpu::done_through).
struct FakeEvent {
  bool done = true;
  std::uint64_t number = 0;
};
std::atomic<std::uint64_t> g_records{0};
Result eventCreate(void** e, unsigned) {
  FAKE_LOCK;
  ++g.live_events;
  *e = new FakeEvent;
  return 0;
}
Result eventDestroy(void* e) {
  FAKE_LOCK;
  --g.live_events;
  delete static_cast<FakeEvent*>(e);
  return 0;
}
Result eventRecord(void* e, void*) {
  FAKE_LOCK;
  auto* ev = static_cast<FakeEvent*>(e);
  ev->done = false;
  ev->number = ++g_records;
  record({"cuEventRecord"});
  return 0;
}
Result eventQuery(void* e) {
  FAKE_LOCK;
  auto* ev = static_cast<FakeEvent*>(e);
  ++g.event_queries;
  if (g.done_after_queries > 0 && --g.done_after_queries == 0) g.complete = true;
  if (g.complete || ev->number <= std::atomic_ref(g.done_through).load()) ev->done = true;
  return ev->done ? 0 : 600;
}
Result htod(DevicePtr d, const void* s, std::size_t n, void*) {
  FAKE_LOCK;
  std::memcpy(ptr(d), s, n);
  record({"cuMemcpyHtoDAsync", static_cast<std::uintptr_t>(d), addr(s), n});
  return 0;
}
Result dtoh(void* d, DevicePtr s, std::size_t n, void*) {
  FAKE_LOCK;
  std::memcpy(d, ptr(s), n);
  record({"cuMemcpyDtoHAsync", addr(d), static_cast<std::uintptr_t>(s), n});
  return 0;
}
Result dtod(DevicePtr d, DevicePtr s, std::size_t n, void*) {
  FAKE_LOCK;
  std::memmove(ptr(d), ptr(s), n);
  record({"cuMemcpyDtoDAsync", static_cast<std::uintptr_t>(d), static_cast<std::uintptr_t>(s), n});
  return 0;
}
Result copy2d(const plugin::cuda::Memcpy2D* m, void*) {
  FAKE_LOCK;
  for (std::size_t r = 0; r < m->Height; ++r)
    std::memcpy(static_cast<char*>(ptr(m->dstDevice)) + r * m->dstPitch,
                static_cast<const char*>(ptr(m->srcDevice)) + r * m->srcPitch, m->WidthInBytes);
  record({"cuMemcpy2DAsync", static_cast<std::uintptr_t>(m->dstDevice),
          static_cast<std::uintptr_t>(m->srcDevice), m->WidthInBytes, m->dstPitch, m->Height});
  return 0;
}
Result memset8(DevicePtr d, unsigned char v, std::size_t n, void*) {
  FAKE_LOCK;
  std::memset(ptr(d), v, n);
  record({"cuMemsetD8Async", static_cast<std::uintptr_t>(d), 0, n, 0, 0, v});
  return 0;
}
Result memset2d32(DevicePtr d, std::size_t pitch, unsigned v, std::size_t w, std::size_t h, void*) {
  FAKE_LOCK;
  for (std::size_t r = 0; r < h; ++r)
    for (std::size_t i = 0; i < w; ++i)
      std::memcpy(static_cast<char*>(ptr(d)) + r * pitch + 4 * i, &v, 4);
  record({"cuMemsetD2D32Async", static_cast<std::uintptr_t>(d), 0, w, pitch, h, v});
  return 0;
}
std::vector<void*> g_host_allocs;  // live pinned allocations

Result hostAlloc(void** p, std::size_t n, unsigned) {
  FAKE_LOCK;
  ++g.live_host_allocs;
  *p = std::malloc(n);
  g_host_allocs.push_back(*p);
  record({"cuMemHostAlloc", addr(*p), 0, n});
  return *p ? 0 : 2;
}
Result freeHost(void* p) {
  FAKE_LOCK;
  --g.live_host_allocs;
  std::erase(g_host_allocs, p);
  record({"cuMemFreeHost", addr(p), 0, 0});
  std::free(p);
  return 0;
}

// Page-locked ranges (cuMemHostRegister): memory the caller owns, only counted.
Result hostRegister(void* p, std::size_t n, unsigned flags) {
  FAKE_LOCK;
  if (!g.register_ok) return 1;  // CUDA_ERROR_INVALID_VALUE
  ++g.live_host_registers;
  record({"cuMemHostRegister", addr(p), 0, n, 0, 0, flags});
  return 0;
}
Result hostUnregister(void* p) {
  FAKE_LOCK;
  --g.live_host_registers;
  record({"cuMemHostUnregister", addr(p), 0, 0});
  return 0;
}

// cuMem allocations (fakeCuMemAlloc) are memfd-backed shared mappings, so an exported
// "handle" is a dup of the memfd and an import maps the same file elsewhere: two views of one
// buffer, as two processes' mappings of one GPU allocation are.
struct FakeAllocation {
  std::uintptr_t base = 0;
  std::size_t size = 0;
  int memfd = -1;
  bool own = true;  // fakeCuMemAlloc'ed (else a cuMemMap of an imported handle)
};
std::vector<FakeAllocation> g_allocs;
struct FakeHandle {
  int memfd = -1;  // dup: the handle keeps the file alive
  std::size_t size = 0;
};
std::map<plugin::cuda::AllocationHandle, FakeHandle> g_handles;
plugin::cuda::AllocationHandle g_next_handle = 1;

const FakeAllocation* allocationAt(std::uintptr_t p) {
  for (const FakeAllocation& a : g_allocs)
    if (p >= a.base && p < a.base + a.size) return &a;
  return nullptr;
}
plugin::cuda::AllocationHandle newHandle(int fd, std::size_t size) {
  ++g.live_mem_handles;
  g_handles[g_next_handle] = FakeHandle{::dup(fd), size};
  return g_next_handle++;
}
Result ctxGetDevice(int* d) {
  *d = 0;
  return 0;
}
Result addressRange(DevicePtr* base, std::size_t* size, DevicePtr p) {
  FAKE_LOCK;
  const FakeAllocation* a = allocationAt(static_cast<std::uintptr_t>(p));
  if (!a) return 1;  // CUDA_ERROR_INVALID_VALUE
  *base = a->base;
  *size = a->size;
  return 0;
}
Result retainHandle(plugin::cuda::AllocationHandle* h, void* p) {
  FAKE_LOCK;
  const FakeAllocation* a = allocationAt(addr(p));
  if (!a) return 1;  // not a cuMem allocation (cudaMalloc, host memory)
  *h = newHandle(a->memfd, a->size);
  record({"cuMemRetainAllocationHandle", addr(p), 0, a->size});
  return 0;
}
Result exportHandle(void* out, plugin::cuda::AllocationHandle h, int type, unsigned long long) {
  FAKE_LOCK;
  auto it = g_handles.find(h);
  if (it == g_handles.end() || type != plugin::cuda::kHandleTypePosixFd) return 1;
  if (!g.export_ok) return 801;  // CUDA_ERROR_NOT_SUPPORTED
  *static_cast<int*>(out) = ::dup(it->second.memfd);
  record({"cuMemExportToShareableHandle", 0, 0, it->second.size});
  return 0;
}
Result importHandle(plugin::cuda::AllocationHandle* h, void* os, int type) {
  FAKE_LOCK;
  if (!g.import_ok || type != plugin::cuda::kHandleTypePosixFd) return 801;
  const int fd = static_cast<int>(reinterpret_cast<std::intptr_t>(os));
  struct stat st {};
  if (::fstat(fd, &st) != 0) return 1;
  *h = newHandle(fd, static_cast<std::size_t>(st.st_size));
  record({"cuMemImportFromShareableHandle", 0, 0, static_cast<std::size_t>(st.st_size)});
  return 0;
}
Result addressReserve(DevicePtr* p, std::size_t n, std::size_t, DevicePtr, unsigned long long) {
  FAKE_LOCK;
  void* m = ::mmap(nullptr, n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return 2;
  ++g.live_reservations;
  *p = static_cast<DevicePtr>(addr(m));
  return 0;
}
Result addressFree(DevicePtr p, std::size_t n) {
  FAKE_LOCK;
  --g.live_reservations;
  return ::munmap(ptr(p), n) == 0 ? 0 : 1;
}
Result memMap(DevicePtr p, std::size_t n, std::size_t off, plugin::cuda::AllocationHandle h,
              unsigned long long) {
  FAKE_LOCK;
  auto it = g_handles.find(h);
  if (it == g_handles.end() || off + n > it->second.size) return 1;
  if (::mmap(ptr(p), n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, it->second.memfd,
             static_cast<off_t>(off)) == MAP_FAILED)
    return 2;
  ++g.live_mappings;
  g_allocs.push_back({static_cast<std::uintptr_t>(p), n, it->second.memfd, false});
  record({"cuMemMap", static_cast<std::uintptr_t>(p), 0, n});
  return 0;
}
Result memUnmap(DevicePtr p, std::size_t n) {
  FAKE_LOCK;
  std::erase_if(g_allocs, [&](const FakeAllocation& a) { return !a.own && a.base == p; });
  --g.live_mappings;
  record({"cuMemUnmap", static_cast<std::uintptr_t>(p), 0, n});
  return ::mmap(ptr(p), n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED
             ? 2
             : 0;
}
Result setAccess(DevicePtr p, std::size_t n, const plugin::cuda::AccessDesc* d, std::size_t count) {
  FAKE_LOCK;
  const FakeAllocation* a = allocationAt(static_cast<std::uintptr_t>(p));
  if (!a || count != 1 || d->flags != plugin::cuda::kAccessReadWrite) return 1;
  record({"cuMemSetAccess", static_cast<std::uintptr_t>(p), 0, n});
  return 0;
}
Result memRelease(plugin::cuda::AllocationHandle h) {
  FAKE_LOCK;
  auto it = g_handles.find(h);
  if (it == g_handles.end()) return 1;
  ::close(it->second.memfd);
  g_handles.erase(it);
  --g.live_mem_handles;
  return 0;
}

Result allocAsync(DevicePtr* p, std::size_t n, void*) {
  FAKE_LOCK;
  ++g.live_device_allocs;
  void* m = std::malloc(n);
  *p = static_cast<DevicePtr>(addr(m));
  record({"cuMemAllocAsync", addr(m), 0, n});
  return m ? 0 : 2;
}
Result freeAsync(DevicePtr p, void*) {
  FAKE_LOCK;
  --g.live_device_allocs;
  record({"cuMemFreeAsync", static_cast<std::uintptr_t>(p), 0, 0});
  std::free(ptr(p));
  return 0;
}
Result hostDevicePointer(DevicePtr* d, void* p, unsigned) {
  FAKE_LOCK;
  *d = static_cast<DevicePtr>(addr(p));  // unified addressing: the same address
  return 0;
}
// Stream memory writes: done at once when the stream's work is (FakeGpu::complete), else held
// until releaseFakeStreamWrites, in order.
struct HeldWrite {
  DevicePtr at;
  std::uint32_t value;
};
std::vector<HeldWrite> g_held_writes;
Result streamWriteValue32(void*, DevicePtr at, std::uint32_t value, unsigned flags) {
  FAKE_LOCK;
  record({"cuStreamWriteValue32", static_cast<std::uintptr_t>(at), 0, 4, 0, 0, value});
  if (!g.write_value_ok || flags != 0) return plugin::cuda::kNotSupported;
  if (g.complete && g_held_writes.empty())
    std::atomic_ref(*static_cast<std::uint32_t*>(ptr(at))).store(value);
  else
    g_held_writes.push_back({at, value});
  return 0;
}
int g_module = 0, g_function = 0, g_mirror_function = 0, g_p2p_function = 0;
plugin::p2p_agent::Table* g_p2p = nullptr;  // the table of the latest P2P agent launch
// The state of the "agent kernel" running now (p2p_agent_kernel.cu's per-connection
// registers), fresh at each launch.
struct FakeAgentConn {
  bool mine = false;
  std::uint64_t seen = 0, stored = 0;
  plugin::p2p_agent::CreditQueue q;
  // Preludes, as the kernel's receive thread keeps them.
  std::uint32_t arm = 0;
  bool pending = false;
  std::uint64_t base = 0, start = 0, delay = 0, prev = 0, changed_at = 0, pre = 0;
  // The schedules of the arm pending and of the prelude running (the kernel's two buffers).
  std::vector<std::uint64_t> armed_at, at;
  std::uint32_t armed_units = 0, armed_steps = 1, units = 0, steps = 1;
  plugin::p2p_agent::Prelude p;
};
std::vector<FakeAgentConn> g_agent_conns;
Result moduleLoad(void** m, const void*) {
  FAKE_LOCK;
  if (!g.module_loads) return 209;  // CUDA_ERROR_NO_BINARY_FOR_GPU
  *m = &g_module;
  return 0;
}
Result moduleUnload(void*) { return 0; }
Result moduleFunction(void** f, void*, const char* name) {
  FAKE_LOCK;
  record({std::string("cuModuleGetFunction:") + name});
  const std::string n(name);
  *f = n == plugin::mirror_kernel::kName ? &g_mirror_function
       : n == "crystal_p2p_agent"        ? &g_p2p_function
                                         : &g_function;
  return 0;
}
namespace fr = plugin::writer_ring;
fr::Ring* g_ring = nullptr;  // the ring of the latest launch

// The commands present, in order, as the GPU writer's kernel runs them.
std::size_t runRing(fr::Ring* ring) {
  std::size_t n = 0;
  for (std::uint64_t next = ring->done + 1; ring->cmds[next % fr::kSize].seq == next; ++next) {
    const fr::Command& c = ring->cmds[next % fr::kSize];
    if (c.kind == fr::kCopy) {
      std::memmove(ptr(c.dst), ptr(c.arg), c.count);
    } else if (c.kind == fr::kRelease) {
      std::atomic_ref(*static_cast<std::uint64_t*>(ptr(c.dst))).store(c.arg);
    } else {
      const std::uint32_t value = fr::fillValue(c.arg);
      for (std::uint32_t i = 0; i < c.count; ++i)
        std::memcpy(static_cast<char*>(ptr(c.dst)) + std::size_t{i} * fr::fillPitch(c.arg), &value,
                    4);
    }
    ring->done = next;
    ++n;
  }
  return n;
}

// The GPU writer's kernel (plugin/gpu_writer_kernel.cu) as the CPU would run it: every
// command present, then the exit (no command came while it ran).
// The mirror-result kernel (plugin/mirror_kernel.cu) on the CPU, for the types the tests use:
// integers wrap, floats as in the kernel (half, bfloat16 and fp8 are left out).
template <typename T, typename U>
void mirrorInts(void* dst, const void* src, std::size_t count, int op, std::uint64_t n) {
  for (std::size_t i = 0; i < count; ++i) {
    const U x = static_cast<U>(static_cast<const T*>(src)[i]);
    U r = op == plugin::mirror_kernel::kScale ? static_cast<U>(x * static_cast<U>(n)) : U{1};
    if (op == plugin::mirror_kernel::kPower)
      for (std::uint64_t k = 0; k < n; ++k) r = static_cast<U>(r * x);
    static_cast<T*>(dst)[i] = static_cast<T>(r);
  }
}
template <typename F>
void mirrorFloats(void* dst, const void* src, std::size_t count, int op, std::uint64_t n) {
  for (std::size_t i = 0; i < count; ++i) {
    const F x = static_cast<const F*>(src)[i];
    F r = op == plugin::mirror_kernel::kScale ? x * static_cast<F>(n) : F{1};
    if (op == plugin::mirror_kernel::kPower)
      for (std::uint64_t k = 0; k < n; ++k) r *= x;
    static_cast<F*>(dst)[i] = r;
  }
}
void mirrorKernel(void** params) {
  namespace mk = plugin::mirror_kernel;
  void* dst = ptr(*static_cast<DevicePtr*>(params[0]));
  const void* src = ptr(*static_cast<DevicePtr*>(params[1]));
  const auto count = static_cast<std::size_t>(*static_cast<unsigned long long*>(params[2]));
  const int type = *static_cast<int*>(params[3]), op = *static_cast<int*>(params[4]);
  const std::uint64_t n = *static_cast<unsigned long long*>(params[5]);
  record({"cuLaunchKernel:crystal_mirror_reduce", addr(dst), addr(src), count,
          0, 0, static_cast<std::uint32_t>(n)});
  switch (type) {
    case mk::kInt8: mirrorInts<std::int8_t, std::uint8_t>(dst, src, count, op, n); break;
    case mk::kUint8: mirrorInts<std::uint8_t, std::uint8_t>(dst, src, count, op, n); break;
    case mk::kInt32: mirrorInts<std::int32_t, std::uint32_t>(dst, src, count, op, n); break;
    case mk::kInt64: mirrorInts<std::int64_t, std::uint64_t>(dst, src, count, op, n); break;
    case mk::kFloat32: mirrorFloats<float>(dst, src, count, op, n); break;
    case mk::kFloat64: mirrorFloats<double>(dst, src, count, op, n); break;
    default: break;
  }
}

Result launch(void* f, unsigned grid_x, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
              void*, void** params, void**) {
  FAKE_LOCK;
  if (f == &g_mirror_function) {
    mirrorKernel(params);
    return 0;
  }
  if (f == &g_p2p_function) {
    record({"cuLaunchKernel:crystal_p2p_agent"});
    g.agent_launcher = std::this_thread::get_id();
    g_p2p = static_cast<plugin::p2p_agent::Table*>(ptr(*static_cast<DevicePtr*>(params[0])));
    std::atomic_ref(g_p2p->starts).fetch_add(1);
    std::atomic_ref(g_p2p->state).store(plugin::p2p_agent::kRunning);
    g_agent_conns.clear();
    (void)p2pAgentPass();
    return 0;
  }
  // The GPU writer: (ring, idle ns, launch number, chunk bytes).
  record({"cuLaunchKernel", 0, 0, *static_cast<unsigned*>(params[3]), 0, grid_x,
          static_cast<std::uint32_t>(*static_cast<unsigned long long*>(params[2]))});
  g_ring = static_cast<fr::Ring*>(ptr(*static_cast<DevicePtr*>(params[0])));
  if (!g.kernel_runs) return 0;
  (void)runRing(g_ring);
  g_ring->state = fr::kExiting;
  return 0;
}
Result priorityRange(int* least, int* greatest) {
  *least = 0;
  *greatest = -5;
  return 0;
}
Result streamCreatePriority(void** s, unsigned, int priority) {
  FAKE_LOCK;
  record({"cuStreamCreateWithPriority", 0, 0, 0, 0, 0, static_cast<std::uint32_t>(priority)});
  ++g.live_streams;
  *s = &g_stream;
  return 0;
}
Result streamIsCapturing(void*, int* status) {
  FAKE_LOCK;
  *status = g.capturing ? 1 : 0;  // CU_STREAM_CAPTURE_STATUS_ACTIVE / _NONE
  return 0;
}
const plugin::cuda::DriverApi kFake{getErrorString,
                                    ctxGetCurrent,
                                    ctxSetCurrent,
                                    streamCreate,
                                    streamDestroy,
                                    eventCreate,
                                    eventDestroy,
                                    eventRecord,
                                    eventQuery,
                                    htod,
                                    dtoh,
                                    dtod,
                                    copy2d,
                                    memset8,
                                    memset2d32,
                                    hostAlloc,
                                    freeHost,
                                    allocAsync,
                                    freeAsync,
                                    hostDevicePointer,
                                    moduleLoad,
                                    moduleUnload,
                                    moduleFunction,
                                    launch,
                                    priorityRange,
                                    streamCreatePriority,
                                    streamIsCapturing,
                                    hostRegister,
                                    hostUnregister,
                                    ctxGetDevice,
                                    addressRange,
                                    retainHandle,
                                    exportHandle,
                                    importHandle,
                                    addressReserve,
                                    addressFree,
                                    memMap,
                                    memUnmap,
                                    setAccess,
                                    memRelease,
                                    nullptr};
// The same with stream memory writes (installFakeDriver(true)).
const plugin::cuda::DriverApi kFakeMemOps = [] {
  plugin::cuda::DriverApi d = kFake;
  d.streamWriteValue32 = streamWriteValue32;
  return d;
}();

}  // namespace

bool p2pAgentPass() {
  FAKE_LOCK;
  namespace pa = plugin::p2p_agent;
  pa::Table* t = g_p2p;
  if (!t || std::atomic_ref(t->state).load() != pa::kRunning) return false;
  const std::uint32_t n = std::atomic_ref(t->n).load();
  // The GPU's global timer: another clock than the CPU's (1 s behind), as on a real GPU.
  const bool trace = std::atomic_ref(t->trace).load() != 0;
  const auto timer = [] {
    return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                          std::chrono::steady_clock::now().time_since_epoch())
                                          .count()) -
           1'000'000'000u;
  };
  const auto counter = [](std::uint64_t address) -> std::uint64_t& {
    return *static_cast<std::uint64_t*>(ptr(address));
  };
  g_agent_conns.resize(pa::kMaxConns);
  const bool leaving = std::atomic_ref(t->want).load() == 0;
  for (std::uint32_t i = 0; i < n; ++i) {
    FakeAgentConn& c = g_agent_conns[i];
    const bool send = t->kind[i] != 0;
    std::uint64_t& target = counter(t->target[i]);
    const std::uint64_t w = std::atomic_ref(counter(t->watch[i])).load();
    if (!c.mine) {
      c = FakeAgentConn{};
      c.mine = true;
      c.stored = std::atomic_ref(target).load();
      c.q.seen = c.stored;
      c.seen = ~std::uint64_t{0};
    }
    const std::uint64_t now = timer();
    if (w != c.seen) {
      if (send)
        pa::creditsSent(c.q, w, now, std::atomic_ref(t->occupancy[i]).load(),
                        std::atomic_ref(t->unit_steps[i]).load());
      std::atomic_ref(t->seen_at[i]).store(now);
      std::atomic_ref(t->seen[i]).store(w);
      c.prev = c.seen == ~std::uint64_t{0} ? 0 : c.seen;
      c.changed_at = now;
      c.seen = w;
    }
    // Preludes (the kernel's reader copy is the table itself here).
    if (!send) {
      const std::uint32_t seq = std::atomic_ref(t->pre_seq).load();
      if (seq != c.arm) {
        c.arm = seq;
        c.base = std::atomic_ref(t->pre_value[i]).load();
        c.pending = c.base != pa::kNoPrelude;
        c.start = std::atomic_ref(t->pre_start).load();
        c.delay = std::atomic_ref(t->pre_delay).load();
        c.armed_units = std::min(std::atomic_ref(t->pre_units).load(), pa::kPreUnits);
        c.armed_steps = std::atomic_ref(t->pre_steps).load();
        c.armed_at.assign(std::begin(t->pre_at), std::end(t->pre_at));
      }
      if (c.pending) {
        if (const std::uint64_t a =
                pa::anchorOf(c.base, c.prev, c.seen, c.changed_at, c.start, c.delay);
            a != pa::kAnchorPending) {
          c.pending = false;
          if (a != pa::kAnchorMissed) {
            c.p = {a, c.base, 0};
            c.units = c.armed_units;
            c.steps = c.armed_steps;
            c.at = c.armed_at;
          }
          std::atomic_ref(t->anchor_at[i]).store(a);
          std::atomic_ref(t->anchor_seq[i]).store(c.arm);
        }
      }
      if (c.p.anchor > pa::kAnchorMissed)
        c.pre = pa::preludeTail(c.p, c.at.data(), c.units, c.steps, now);
    }
    const std::uint64_t release = std::max(std::atomic_ref(t->release[i]).load(), c.pre);
    std::uint64_t v = send ? pa::creditsDue(c.q, now) : pa::gatedTail(release, w);
    if (leaving) v = send ? w : pa::gatedTail(release, w);
    if (v > c.stored) {
      std::atomic_ref(target).store(v);
      c.stored = v;
      if (trace) {
        std::atomic_ref(t->stored_at[i]).store(timer());
        std::atomic_ref(t->stored[i]).store(v);
      }
    }
  }
  std::atomic_ref(t->gpu_now).store(timer());
  std::atomic_ref(t->passes).fetch_add(1);
  if (leaving) {
    std::atomic_ref(t->state).store(pa::kExiting);
    g_agent_conns.clear();
    return false;
  }
  return true;
}

std::vector<FakeCall> FakeGpu::named(const std::string& name) const {
  FAKE_LOCK;
  std::vector<FakeCall> out;
  for (const auto& c : calls)
    if (c.name == name) out.push_back(c);
  return out;
}

std::size_t FakeGpu::count(const std::string& prefix) const {
  FAKE_LOCK;
  std::size_t n = 0;
  for (const auto& c : calls) n += c.name.rfind(prefix, 0) == 0;
  return n;
}

std::size_t freeLeftHostAllocs() {
  const std::size_t n = g_host_allocs.size();
  for (void* p : g_host_allocs) std::free(p);
  g_host_allocs.clear();
  g.live_host_allocs -= static_cast<int>(n);
  return n;
}

std::size_t drainFakeWriterRing() { return g_ring ? runRing(g_ring) : 0; }

std::size_t releaseFakeStreamWrites() {
  FAKE_LOCK;
  for (const HeldWrite& w : g_held_writes)
    std::atomic_ref(*static_cast<std::uint32_t*>(ptr(w.at))).store(w.value);
  const std::size_t n = g_held_writes.size();
  g_held_writes.clear();
  return n;
}

FakeGpu& installFakeDriver(bool stream_mem_ops) {
  g.calls.clear();
  g.complete = true;
  g.has_context = true;
  g.kernel_runs = true;
  g.module_loads = true;
  g.capturing = false;
  g.register_ok = true;
  g.export_ok = g.import_ok = true;
  g.write_value_ok = true;
  g_held_writes.clear();
  g.done_after_queries = 0;
  g.event_queries = 0;
  g.done_through = 0;
  g_records = 0;
  g_ring = nullptr;
  g_p2p = nullptr;
  plugin::cuda::setDriverForTesting(stream_mem_ops ? &kFakeMemOps : &kFake);
  return g;
}

void uninstallFakeDriver() { plugin::cuda::setDriverForTesting(nullptr); }

std::byte* fakeCuMemAlloc(std::size_t bytes) {
  FAKE_LOCK;
  const int fd = ::memfd_create("crystal-fake-cumem", MFD_CLOEXEC);
  if (fd < 0 || ::ftruncate(fd, static_cast<off_t>(bytes)) != 0) std::abort();
  void* m = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) std::abort();
  g_allocs.push_back({addr(m), bytes, fd, true});
  return static_cast<std::byte*>(m);
}

void fakeCuMemFree(std::byte* p) {
  FAKE_LOCK;
  auto it = std::find_if(g_allocs.begin(), g_allocs.end(),
                         [&](const FakeAllocation& a) { return a.own && a.base == addr(p); });
  if (it == g_allocs.end()) return;
  ::munmap(p, it->size);
  ::close(it->memfd);
  g_allocs.erase(it);
}

}  // namespace crystal::test
