#include "device_queue.h"

#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <utility>

#include "call_stats.h"
#include "crystal/base/log.h"
#include "errors.h"
#include "params.h"

namespace crystal::plugin {

using cuda::check;
using cuda::dptr;

namespace {

// One stream per CUDA context, shared by every comm's queue (reference-counted).
// Why not one per comm: the GPU feeds streams through a few hardware queues
// (CUDA_DEVICE_MAX_CONNECTIONS, default 8), and streams that share one are served in
// submission order. NCCL's kernel spins until the plugin's writes (LL flags in GPU memory)
// land; a plugin stream sharing a hardware queue with the stream of that kernel, or of the
// NCCL kernel queued after it, waits for it: a deadlock. With 16 channels the plugin had
// ~40 streams and the H200 run (2026-12-03 15:30) hung with two receives' writes (channels 3
// and 11, eight apart) never run. One stream keeps the plugin to one hardware queue.
struct SharedStreams {
  std::mutex mu;
  struct Entry {
    cuda::Stream stream = nullptr;
    int refs = 0;
  };
  std::map<cuda::Context, Entry> by_ctx;
};

SharedStreams& sharedStreams() {
  static auto* s = new SharedStreams;  // never destroyed: queues may close during exit
  return *s;
}

cuda::Stream acquireStream(const cuda::DriverApi& d, cuda::Context ctx) {
  SharedStreams& s = sharedStreams();
  std::lock_guard lock(s.mu);
  SharedStreams::Entry& e = s.by_ctx[ctx];
  if (!e.stream) check(d.streamCreate(&e.stream, cuda::kStreamNonBlocking), "cuStreamCreate");
  ++e.refs;
  return e.stream;
}

// The caller has `ctx` current.
void releaseStream(const cuda::DriverApi& d, cuda::Context ctx) {
  SharedStreams& s = sharedStreams();
  std::lock_guard lock(s.mu);
  auto it = s.by_ctx.find(ctx);
  if (it == s.by_ctx.end() || --it->second.refs > 0) return;
  (void)d.streamDestroy(it->second.stream);
  s.by_ctx.erase(it);
}

}  // namespace

DeviceQueue::~DeviceQueue() {
  if (!d_) return;
  // Close may come from another thread than the proxy's: use our context, then give the
  // caller back its own.
  cuda::Context caller = nullptr;
  (void)d_->ctxGetCurrent(&caller);
  if (caller != ctx_) (void)d_->ctxSetCurrent(ctx_);
  for (cuda::Event e : events_)
    if (e) (void)d_->eventDestroy(e);
  if (stream_) releaseStream(*d_, ctx_);
  for (const Staging& s : staging_)
    if (s.p) (void)d_->memFreeHost(s.p);
  if (done_word_) (void)d_->memFreeHost(done_word_);
  for (std::byte* p : retired_) (void)d_->memFreeHost(p);
  for (std::byte* p : registered_) (void)d_->memHostUnregister(p);
  for (const Imported& m : imported_) {
    (void)d_->memUnmap(m.va, m.size);
    (void)d_->memAddressFree(m.va, m.size);
    (void)d_->memRelease(m.handle);
  }
  for (const Twin& t : twins_)
    if (std::find(registered_.begin(), registered_.end(), t.p) == registered_.end())
      (void)d_->memFreeHost(t.p);
  if (caller != ctx_) (void)d_->ctxSetCurrent(caller);
}

void DeviceQueue::enter() {
  if (!d_) {
    const cuda::DriverApi& d = cuda::driver();
    cuda::Context ctx = nullptr;
    check(d.ctxGetCurrent(&ctx), "cuCtxGetCurrent");
    if (!ctx)
      throw PluginError(Errc::System,
                        "a receive or send buffer is in GPU memory but the calling thread has "
                        "no CUDA context current (NCCL's proxy thread always has one)");
    stream_ = acquireStream(d, ctx);
    d_ = &d;
    ctx_ = ctx;
    return;
  }
  cuda::Context cur = nullptr;
  check(d_->ctxGetCurrent(&cur), "cuCtxGetCurrent");
  if (cur != ctx_) check(d_->ctxSetCurrent(ctx_), "cuCtxSetCurrent");
}

void DeviceQueue::zero(void* dst, std::size_t bytes) {
  if (bytes == 0) return;
  const CudaCallTimer timed;
  enter();
  check(d_->memsetD8Async(dptr(dst), 0, bytes, stream_), "cuMemsetD8Async");
  stream_work_ = true;
}

void DeviceQueue::fill32(void* dst, std::size_t pitch, std::uint32_t v, std::size_t count) {
  if (count == 0) return;
  if (writer_ && writer_->post(dst, pitch, v, count)) return;
  const CudaCallTimer timed;
  enter();
  check(d_->memsetD2D32Async(dptr(dst), pitch, v, 1, count, stream_), "cuMemsetD2D32Async");
  stream_work_ = true;
}

void DeviceQueue::hostToDevice(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  const CudaCallTimer timed;
  enter();
  check(d_->memcpyHtoDAsync(dptr(dst), src, bytes, stream_), "cuMemcpyHtoDAsync");
  stream_work_ = true;
}

void DeviceQueue::deviceToHost(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  const CudaCallTimer timed;
  enter();
  check(d_->memcpyDtoHAsync(dst, dptr(src), bytes, stream_), "cuMemcpyDtoHAsync");
  stream_work_ = true;
}

void DeviceQueue::deviceToDevice(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0) return;
  const CudaCallTimer timed;
  enter();
  check(d_->memcpyDtoDAsync(dptr(dst), dptr(src), bytes, stream_), "cuMemcpyDtoDAsync");
  stream_work_ = true;
}

bool DeviceQueue::copyAnyOrder(void* dst, const void* src, std::size_t bytes,
                               cuda::DevicePtr release, std::uint64_t release_value) {
  if (bytes == 0) return false;
  if (copy_max_ < 0) copy_max_ = std::max<std::int64_t>(0, paramInt("CRYSTAL_GPU_COPY_MAX"));
  if (writer_ && bytes <= static_cast<std::uint64_t>(copy_max_)) {
    bool released = false;
    if (const std::uint64_t n =
            writer_->postCopy(dst, src, bytes, release, release_value, &released)) {
      writer_cmd_ = n;
      return released;
    }
  }
  deviceToDevice(dst, src, bytes);
  return false;
}

void DeviceQueue::deviceToDevice2D(void* dst, const void* src, std::size_t pitch, std::size_t width,
                                   std::size_t rows) {
  if (rows == 0 || width == 0) return;
  const CudaCallTimer timed;
  enter();
  cuda::Memcpy2D m;
  m.srcMemoryType = cuda::kMemoryTypeDevice;
  m.srcDevice = dptr(src);
  m.srcPitch = pitch;
  m.dstMemoryType = cuda::kMemoryTypeDevice;
  m.dstDevice = dptr(dst);
  m.dstPitch = pitch;
  m.WidthInBytes = width;
  m.Height = rows;
  check(d_->memcpy2DAsync(&m, stream_), "cuMemcpy2DAsync");
  stream_work_ = true;
}

std::byte* DeviceQueue::staging(int slot, std::size_t bytes) {
  Staging& s = staging_.at(static_cast<std::size_t>(slot));
  if (s.size >= bytes && s.p) return s.p;
  enter();
  void* p = nullptr;
  check(d_->memHostAlloc(&p, bytes, 0), "cuMemHostAlloc");
  if (s.p) retired_.push_back(s.p);  // not freed here: cuMemFreeHost waits for the GPU
  s.p = static_cast<std::byte*>(p);
  s.size = bytes;
  return s.p;
}

std::byte* DeviceQueue::twin(const void* base, std::size_t bytes) {
  for (const Twin& t : twins_)
    if (t.base == base && t.size >= bytes) return t.p;
  // A region registered again at the same address (larger) gets a new twin; the old one is
  // kept until close for the same reason as outgrown staging.
  enter();
  void* p = nullptr;
  check(d_->memHostAlloc(&p, bytes, 0), "cuMemHostAlloc");
  twins_.push_back(Twin{base, bytes, static_cast<std::byte*>(p)});
  return twins_.back().p;
}

bool DeviceQueue::registerHost(std::byte* host, std::size_t bytes, std::string* why) {
  enter();
  const cuda::Result rc = d_->memHostRegister(host, bytes, cuda::kHostRegisterPortable);
  if (rc != cuda::kSuccess) {
    const char* text = nullptr;
    if (d_->getErrorString) (void)d_->getErrorString(rc, &text);
    *why = fmt::format("cuMemHostRegister: CUDA error {} ({})", rc, text ? text : "no text");
    return false;
  }
  registered_.push_back(host);
  return true;
}

bool DeviceQueue::adoptTwin(const void* base, std::size_t bytes, std::byte* host,
                            std::string* why) {
  if (!registerHost(host, bytes, why)) return false;
  twins_.push_back(Twin{base, bytes, host});
  return true;
}

namespace {

// "<call>: CUDA error <rc> (<text>)" for the reasons export/import give instead of throwing.
std::string cudaWhy(const cuda::DriverApi& d, const char* call, cuda::Result rc) {
  const char* text = nullptr;
  if (d.getErrorString) (void)d.getErrorString(rc, &text);
  return fmt::format("{}: CUDA error {} ({})", call, rc, text ? text : "no text");
}

}  // namespace

bool DeviceQueue::registerHostMapped(std::byte* host, std::size_t bytes, cuda::DevicePtr* dev,
                                     std::string* why) {
  enter();
  const cuda::Result rc =
      d_->memHostRegister(host, bytes, cuda::kHostRegisterPortable | cuda::kHostRegisterDeviceMap);
  if (rc != cuda::kSuccess) {
    *why = cudaWhy(*d_, "cuMemHostRegister (device-mapped)", rc);
    return false;
  }
  registered_.push_back(host);
  if (const cuda::Result got = d_->memHostGetDevicePointer(dev, host, 0); got != cuda::kSuccess) {
    *why = cudaWhy(*d_, "cuMemHostGetDevicePointer", got);
    return false;  // stays registered until close, unused
  }
  return true;
}

bool DeviceQueue::exportAllocation(const void* p, Exported* out, std::string* why) {
  enter();
  cuda::DevicePtr base = 0;
  std::size_t size = 0;
  cuda::Result rc = d_->memGetAddressRange(&base, &size, dptr(p));
  if (rc != cuda::kSuccess) {
    *why = cudaWhy(*d_, "cuMemGetAddressRange", rc);
    return false;
  }
  // Retained on the allocation's base, as NCCL does for its own IPC registrations.
  cuda::AllocationHandle h = 0;
  rc =
      d_->memRetainAllocationHandle(&h, reinterpret_cast<void*>(static_cast<std::uintptr_t>(base)));
  if (rc != cuda::kSuccess) {
    *why = cudaWhy(*d_, "cuMemRetainAllocationHandle (not a cuMem allocation?)", rc);
    return false;
  }
  int fd = -1;
  rc = d_->memExportToShareableHandle(&fd, h, cuda::kHandleTypePosixFd, 0);
  (void)d_->memRelease(h);  // the retain's reference; NCCL's own mapping keeps it alive
  if (rc != cuda::kSuccess) {
    *why = cudaWhy(*d_, "cuMemExportToShareableHandle (POSIX fd)", rc);
    return false;
  }
  out->fd = fd;
  out->size = size;
  out->offset = static_cast<std::size_t>(dptr(p) - base);
  return true;
}

std::byte* DeviceQueue::importAllocation(int fd, std::size_t bytes, std::string* why) {
  enter();
  Imported m;
  m.size = bytes;
  cuda::Result rc = d_->memImportFromShareableHandle(
      &m.handle, reinterpret_cast<void*>(static_cast<std::intptr_t>(fd)), cuda::kHandleTypePosixFd);
  if (rc != cuda::kSuccess) {
    *why = cudaWhy(*d_, "cuMemImportFromShareableHandle", rc);
    return nullptr;
  }
  const char* call = "cuMemAddressReserve";
  rc = d_->memAddressReserve(&m.va, bytes, 0, 0, 0);
  if (rc == cuda::kSuccess) {
    call = "cuMemMap";
    rc = d_->memMap(m.va, bytes, 0, m.handle, 0);
    if (rc == cuda::kSuccess) {
      cuda::AccessDesc access;
      call = "cuCtxGetDevice";
      rc = d_->ctxGetDevice(&access.location_id);
      if (rc == cuda::kSuccess) {
        call = "cuMemSetAccess";
        rc = d_->memSetAccess(m.va, bytes, &access, 1);
      }
      if (rc != cuda::kSuccess) (void)d_->memUnmap(m.va, bytes);
    }
    if (rc != cuda::kSuccess) (void)d_->memAddressFree(m.va, bytes);
  }
  if (rc != cuda::kSuccess) {
    (void)d_->memRelease(m.handle);
    *why = cudaWhy(*d_, call, rc);
    return nullptr;
  }
  imported_.push_back(m);
  return reinterpret_cast<std::byte*>(static_cast<std::uintptr_t>(m.va));
}

void DeviceQueue::mark(int slot) {
  const auto i = static_cast<std::size_t>(slot);
  (void)events_.at(i);
  writer_seq_[i] = std::exchange(writer_cmd_, 0);
  if (writer_seq_[i] != 0 && !stream_work_) {  // only the writer's: nothing to ask the driver
    marked_[i] = false;
    return;
  }
  stream_work_ = false;
  const CudaCallTimer timed;
  enter();
  const std::uint64_t seq = marks_ + 1;
  if (!markByWord(static_cast<std::uint32_t>(seq))) {
    cuda::Event& e = events_[i];
    if (!e) check(d_->eventCreate(&e, cuda::kEventDisableTiming), "cuEventCreate");
    check(d_->eventRecord(e, stream_), "cuEventRecord");
  }
  marks_ = seq;
  marked_[i] = true;
  mark_seq_[i] = seq;
}

bool DeviceQueue::markByWord(std::uint32_t seq) {
  if (marks_by_ == Marks::Events) return false;
  std::string why;
  if (marks_by_ == Marks::Undecided) {
    if (!paramBool("CRYSTAL_COPY_FLAGS")) {
      marks_by_ = Marks::Events;
      return false;
    }
    void* p = nullptr;
    if (!d_->streamWriteValue32) {
      why = "the CUDA driver has no cuStreamWriteValue32_v2";
    } else if (const cuda::Result rc =
                   d_->memHostAlloc(&p, 64, cuda::kHostAllocPortable | cuda::kHostAllocDeviceMap);
               rc != cuda::kSuccess || !p) {
      why = fmt::format("cuMemHostAlloc of its host word failed (CUDA error {})", rc);
    } else {
      done_word_ = static_cast<std::uint32_t*>(p);
      std::atomic_ref(*done_word_).store(0);
      if (const cuda::Result got = d_->memHostGetDevicePointer(&done_word_dev_, p, 0);
          got != cuda::kSuccess)
        why = fmt::format("cuMemHostGetDevicePointer of its host word failed (CUDA error {})", got);
    }
  }
  if (why.empty()) {
    const cuda::Result rc = d_->streamWriteValue32(stream_, done_word_dev_, seq, 0);
    if (rc == cuda::kSuccess) {
      marks_by_ = Marks::Words;
      return true;
    }
    if (marks_by_ == Marks::Words) check(rc, "cuStreamWriteValue32");  // it worked before
    why = fmt::format("cuStreamWriteValue32 failed (CUDA error {})", rc);
  }
  marks_by_ = Marks::Events;
  CRYSTAL_INFO(
      "GPU copies of the plugin report completion by events ({}): a cuEventQuery per "
      "test() of a request still copying",
      why);
  return false;
}

void DeviceQueue::record(cuda::Event& e) {
  const CudaCallTimer timed;
  enter();
  if (!e) check(d_->eventCreate(&e, cuda::kEventDisableTiming), "cuEventCreate");
  check(d_->eventRecord(e, stream_), "cuEventRecord");
}

bool DeviceQueue::writerDone(std::size_t i) {
  if (writer_seq_.at(i) == 0) return true;
  if (writer_->done() < writer_seq_[i]) return false;
  writer_seq_[i] = 0;
  return true;
}

bool DeviceQueue::done(int slot) {
  const auto i = static_cast<std::size_t>(slot);
  if (!writerDone(i)) return false;
  if (!marked_.at(i)) return true;
  if (marks_by_ == Marks::Words) {
    // The stream writes mark numbers in order; 32 bits wrap, and fewer than 2^31 marks are
    // ever outstanding.
    const std::uint32_t at = std::atomic_ref(*done_word_).load(std::memory_order_acquire);
    if (static_cast<std::int32_t>(at - static_cast<std::uint32_t>(mark_seq_[i])) < 0) return false;
    marked_[i] = false;
    return true;
  }
  const CudaCallTimer timed;
  const cuda::Result rc = d_->eventQuery(events_[i]);
  if (rc == cuda::kNotReady) return false;
  check(rc, "cuEventQuery");
  marked_[i] = false;
  return true;
}

bool DeviceQueue::doneInPoll(int slot) {
  if (marks_by_ == Marks::Words) return done(slot);  // no driver call to save: the word now
  const auto i = static_cast<std::size_t>(slot);
  if (!writerDone(i)) return false;
  if (marked_.at(i) && mark_seq_[i] >= not_ready_from_) return false;
  if (done(slot)) return true;
  not_ready_from_ = std::min(not_ready_from_, mark_seq_[i]);
  return false;
}

}  // namespace crystal::plugin
