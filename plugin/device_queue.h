// GPU work one data comm issues on buffers in device memory: the plugin's non-blocking
// stream (one per CUDA context, shared by all comms: see device_queue.cc), one completion
// event per request slot, and pinned host staging per slot.
//
// The comm enqueues a request's copies/memsets, then mark(slot); test() answers done only
// once done(slot), with no blocking call on the data path. Where the driver has stream memory
// writes (CRYSTAL_COPY_FLAGS, default 1), mark() has the stream write the mark's number into a
// pinned host word once the work before it is done, and done() reads that word: no driver
// call at all. Under MPS with two real ranks each cuEventQuery cost 1.3 us, and a real
// receive's proxy made ~150 k of them (147184 driver calls in 336 ms, 2026-12-06), most of
// them answered "not ready"; with the word that proxy made 60 k driver calls instead of 151 k
// (the stream write costs ~0.4 us more than the event record it replaces; its driver time 185
// -> 151 ms, operation times within noise: tests/gpu/hybrid/README.md, twenty-ninth session).
// Else, an event per slot and cuEventQuery. Everything is created
// lazily on first use in the thread that calls the plugin (NCCL's proxy thread, which has
// the GPU's context current); later calls make that context current again if it is not.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cuda_driver.h"
#include "gpu_writer.h"

namespace crystal::plugin {

class DeviceQueue {
 public:
  explicit DeviceQueue(int slots)
      : events_(static_cast<std::size_t>(slots)), staging_(static_cast<std::size_t>(slots)) {}
  ~DeviceQueue();  // best effort: errors while tearing down are ignored
  DeviceQueue(const DeviceQueue&) = delete;
  DeviceQueue& operator=(const DeviceQueue&) = delete;

  void zero(void* dst, std::size_t bytes);
  // `count` 32-bit words of value v at dst, dst + pitch, dst + 2 pitch, ... (LL/LL128 flags):
  // through the GPU writer when one is set (and its ring has room), else a memset on
  // this queue's stream. Only for writes that need no order against this queue's other work
  // (mark() does not cover the writer's).
  void fill32(void* dst, std::size_t pitch, std::uint32_t v, std::size_t count);
  void setGpuWriter(std::shared_ptr<GpuWriter> w) { writer_ = std::move(w); }
  [[nodiscard]] bool hasGpuWriter() const noexcept { return writer_ != nullptr; }
  void hostToDevice(void* dst, const void* src, std::size_t bytes);
  void deviceToHost(void* dst, const void* src, std::size_t bytes);
  void deviceToDevice(void* dst, const void* src, std::size_t bytes);
  // A device-to-device copy that needs no order against this queue's other work (a real
  // peer's step into its own slot): run by the GPU writer's kernel when one is set, the copy
  // is at most CRYSTAL_GPU_COPY_MAX bytes and the writer's ring has room (no driver call:
  // under MPS each was ~2.5 us of NCCL's proxy thread), else on the stream as
  // deviceToDevice. mark() covers it either way, without a driver call when the stream got no
  // work since the previous mark.
  // With `release` (a device address of host memory, registerHostMapped) the writer also
  // stores `release_value` there once the copy is done; returns whether it will (false: no
  // writer took the copy, or its ring had no room for the release).
  bool copyAnyOrder(void* dst, const void* src, std::size_t bytes, cuda::DevicePtr release = 0,
                    std::uint64_t release_value = 0);
  // `rows` rows of `width` bytes, rows `pitch` bytes apart on both sides (LL128 line data).
  void deviceToDevice2D(void* dst, const void* src, std::size_t pitch, std::size_t width,
                        std::size_t rows);
  // Pinned host memory of at least `bytes` for slot `slot`, kept (and grown) across uses; a
  // slot's staging is only reused after that slot's request completed. Growing never frees
  // the smaller buffer before close: cuMemFreeHost synchronizes the context, i.e. waits for
  // the NCCL kernel that is itself waiting for this proxy (a deadlock).
  [[nodiscard]] std::byte* staging(int slot, std::size_t bytes);
  // A pinned host twin of the GPU region [base, base + bytes): allocated once on first use,
  // kept until close. Real peers stage a buffer at its offset in the twin, so a
  // connection's staging is sized by what NCCL registered, not by the messages it sees.
  [[nodiscard]] std::byte* twin(const void* base, std::size_t bytes);
  // Host memory the caller owns (a shared-memory segment, plugin/shm_segment.h), page-locked
  // with cuMemHostRegister so copies to and from it are the copy engines' (registering does
  // not wait for running kernels; unregistering does, so that happens only at close, here,
  // before the caller unmaps it). adoptTwin: it also becomes the twin of the GPU region
  // [base, base + bytes). False, with the driver's reason, when the driver refuses.
  [[nodiscard]] bool adoptTwin(const void* base, std::size_t bytes, std::byte* host,
                               std::string* why);
  [[nodiscard]] bool registerHost(std::byte* host, std::size_t bytes, std::string* why);
  // registerHost, mapped for the GPU: *dev is the device address of `host` (the GPU writer's
  // kernel stores there).
  [[nodiscard]] bool registerHostMapped(std::byte* host, std::size_t bytes, cuda::DevicePtr* dev,
                                        std::string* why);
  // The cuMem allocation that holds GPU address `p` (NCCL 2.28.9 makes its buffers with
  // cuMemCreate and POSIX file descriptor handles), exported as a new fd another process can
  // map (importAllocation), with its size and p's offset in it. False, with the driver's
  // reason, for memory that is no such allocation (cudaMalloc'ed, NCCL_CUMEM_ENABLE=0).
  struct Exported {
    int fd = -1;  // the caller's to close
    std::size_t size = 0, offset = 0;
  };
  [[nodiscard]] bool exportAllocation(const void* p, Exported* out, std::string* why);
  // Maps another process's exported allocation (fd, `bytes` long) into this context,
  // readable and writable by this GPU, until close; nullptr with the driver's reason when it
  // refuses. The caller keeps (and closes) fd.
  [[nodiscard]] std::byte* importAllocation(int fd, std::size_t bytes, std::string* why);
  // The work enqueued since the previous mark completes slot `slot`'s request (work on the
  // stream: also everything before it there).
  void mark(int slot);
  // Records `e` (created on first use) after the work enqueued so far: another object (the
  // mirror channel) waits on it without touching this queue's slots.
  void record(cuda::Event& e);
  // Whether slot's work is done (true if nothing was marked). Throws on a CUDA error (the
  // events' way only: the host word cannot carry one; a faulted context leaves it unwritten,
  // and the request's stall warning names its copy).
  [[nodiscard]] bool done(int slot);
  // done() within one poll (a test() call): the queue's work runs in stream order, so once a
  // slot's event was not ready, a slot marked after it is not either, without asking the
  // driver again (each cuEventQuery cost ~0.9 us under MPS). newPoll() forgets that answer.
  [[nodiscard]] bool doneInPoll(int slot);
  void newPoll() noexcept { not_ready_from_ = UINT64_MAX; }

 private:
  void enter();  // driver loaded, context current, stream created
  // Slot i's copies by the writer have run (true when it has none; forgets them once run).
  [[nodiscard]] bool writerDone(std::size_t i);
  // How marks are made: decided at the first mark (the driver's entry, the parameter, the
  // host word's allocation and the first write), then kept.
  enum class Marks { Undecided, Words, Events };
  [[nodiscard]] bool markByWord(std::uint32_t seq);
  Marks marks_by_ = Marks::Undecided;
  std::uint32_t* done_word_ = nullptr;  // pinned host word the stream writes mark numbers to
  cuda::DevicePtr done_word_dev_ = 0;
  struct Staging {
    std::byte* p = nullptr;
    std::size_t size = 0;
  };
  const cuda::DriverApi* d_ = nullptr;
  cuda::Context ctx_ = nullptr;
  cuda::Stream stream_ = nullptr;
  std::vector<cuda::Event> events_;
  std::vector<bool> marked_ = std::vector<bool>(events_.size());
  std::vector<std::uint64_t> mark_seq_ = std::vector<std::uint64_t>(events_.size());
  // The writer command a slot waits for (0: none), and the last one posted since the mark.
  std::vector<std::uint64_t> writer_seq_ = std::vector<std::uint64_t>(events_.size());
  std::uint64_t writer_cmd_ = 0;
  bool stream_work_ = false;    // work enqueued on the stream since the previous mark
  std::int64_t copy_max_ = -1;  // CRYSTAL_GPU_COPY_MAX, read at the first copyAnyOrder
  std::uint64_t marks_ = 0;
  std::uint64_t not_ready_from_ = UINT64_MAX;  // this poll's oldest mark found not ready
  std::vector<Staging> staging_;
  std::vector<std::byte*> retired_;  // outgrown staging, freed at close (see staging())
  struct Twin {
    const void* base = nullptr;
    std::size_t size = 0;
    std::byte* p = nullptr;
  };
  std::vector<Twin> twins_;  // few: NCCL registers LL, LL128, Simple (and a shared pool)
  std::vector<std::byte*>
      registered_;  // cuMemHostRegister'ed (twins among them are not ours to free)
  struct Imported {
    cuda::DevicePtr va = 0;
    std::size_t size = 0;
    cuda::AllocationHandle handle = 0;
  };
  std::vector<Imported> imported_;  // unmapped at close
  std::shared_ptr<GpuWriter> writer_;
};

}  // namespace crystal::plugin
