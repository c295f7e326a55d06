// Real<->real bytes GPU to GPU (plugin/real_comm.h "GPU to GPU"), on the CPU: the sender's GPU
// buffer is a fake cuMem allocation (fake_cuda_driver.h: memfd-backed, so an "import" is a
// second mapping of the same bytes, as two processes' mappings of one GPU allocation are). The
// sender offers the allocation, hands its fd over through the process's fd inbox
// (plugin/fd_passing.h) once the receiver asks, and from then on the receiver copies device to
// device out of its own mapping: no staging copy on the sender, one copy a step. Refusals on
// either side leave the bytes on shared memory; malformed offers and frames are errors.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fd_passing.h"
#include "gpu_writer.h"
#include "real_pair_fixture.h"
#include "shm_stream.h"

namespace crystal::test {
namespace {

using RealIpcBadPeer = RealPairBadPeer;

// A fake cuMem allocation (what NCCL's buffers are), freed with the test.
struct CuMemBuffer {
  std::byte* p;
  std::size_t size;
  explicit CuMemBuffer(std::size_t n) : p(fakeCuMemAlloc(n)), size(n) {}
  ~CuMemBuffer() { fakeCuMemFree(p); }
  CuMemBuffer(const CuMemBuffer&) = delete;
  CuMemBuffer& operator=(const CuMemBuffer&) = delete;
  void fill(std::uint32_t seed) {
    for (std::size_t i = 0; i < size; ++i) {
      seed = seed * 1664525u + 1013904223u;
      p[i] = std::byte(seed >> 24);
    }
  }
};

class RealIpc : public RealPairTest {
 protected:
  // 4 KiB steps from the start of `alloc` into `dst` until the receiver mapped the
  // allocation, then one more for its accept to reach the sender: sends from it go GPU to GPU
  // from here on.
  void mapAllocation(void* s, void* r, const CuMemBuffer& alloc, const Buffer& dst) {
    for (int round = 0; round < 20 && gpu_->named("cuMemMap").empty(); ++round) {
      std::vector<void*> reqs{recvPost(r, dst.at(0), 4096), sendPost(s, alloc.p, 4096)};
      ASSERT_EQ(progressAll(reqs), 2u);
    }
    std::vector<void*> reqs{recvPost(r, dst.at(0), 4096), sendPost(s, alloc.p, 4096)};
    ASSERT_EQ(progressAll(reqs), 2u);
  }
  // A pair whose receiver mapped the sender's allocation (1 MiB, bytes from `seed`; 64 KiB
  // of it registered, and 64 KiB on the receiver): steps go GPU to GPU from here.
  struct MappedPair {
    void *s = nullptr, *r = nullptr;
    std::unique_ptr<CuMemBuffer> alloc = std::make_unique<CuMemBuffer>(1 << 20);
    std::unique_ptr<Buffer> dst = std::make_unique<Buffer>(65536);
  };
  void mappedPair(MappedPair& m, std::uint32_t seed) {
    realPair(&m.s, &m.r);
    if (seed != 0) m.alloc->fill(seed);
    (void)reg(m.s, m.alloc->p, 65536, nccl::NCCL_PTR_CUDA);
    (void)reg(m.r, *m.dst, nccl::NCCL_PTR_CUDA);
    ASSERT_NO_FATAL_FAILURE(mapAllocation(m.s, m.r, *m.alloc, *m.dst));
  }
  // Neither request of a step completes, however often tested, while its copy has not run.
  static void expectPendingWhileTheCopyWaits(void* rreq, void* sreq) {
    int done = 0;
    for (int i = 0; i < 200; ++i) {
      ASSERT_EQ(net::test(rreq, &done, nullptr), ncclSuccess);
      ASSERT_EQ(done, 0);
      ASSERT_EQ(net::test(sreq, &done, nullptr), ncclSuccess);
      ASSERT_EQ(done, 0) << "completed before the receiver's copy ran";
    }
  }
};

// Calls of `name` since call number `from` of the fake's record.
std::vector<FakeCall> callsSince(const FakeGpu& g, std::size_t from, const std::string& name) {
  std::vector<FakeCall> out;
  for (std::size_t i = from; i < g.calls.size(); ++i)
    if (g.calls[i].name == name) out.push_back(g.calls[i]);
  return out;
}

TEST_F(RealIpc, GpuBytesGoDeviceToDeviceOutOfTheReceiversMapping) {
  void *s = nullptr, *r = nullptr;
  realPair(&s, &r);
  constexpr std::size_t kAlloc = 1 << 20, kOffset = 64 << 10, kRegion = 512 << 10;
  constexpr std::size_t kStep = 32 << 10, kSteps = 8;
  CuMemBuffer alloc(kAlloc);
  alloc.fill(11);
  std::byte* region = alloc.p + kOffset;
  Buffer dst(kRegion);
  (void)reg(s, region, kRegion, nccl::NCCL_PTR_CUDA);
  (void)reg(r, dst, nccl::NCCL_PTR_CUDA);

  // Until the receiver mapped the allocation, steps go through shared memory.
  bool mapped = false;
  for (int round = 0; round < 20 && !mapped; ++round) {
    const std::size_t before = gpu_->calls.size();
    std::vector<void*> reqs{recvPost(r, dst.at(0), kStep), sendPost(s, region, kStep)};
    ASSERT_EQ(progressAll(reqs), 2u);
    mapped = !callsSince(*gpu_, before, "cuMemcpyDtoDAsync").empty();
  }
  ASSERT_TRUE(mapped) << logText();
  ASSERT_EQ(gpu_->named("cuMemImportFromShareableHandle").size(), 1u);
  ASSERT_EQ(gpu_->named("cuMemMap").size(), 1u);
  const std::uintptr_t view = gpu_->named("cuMemMap")[0].dst;
  EXPECT_EQ(gpu_->named("cuMemMap")[0].bytes, kAlloc) << "the whole allocation is mapped";

  // Eight steps in flight at their offsets: one device-to-device copy each, from the
  // receiver's view of the allocation (not the sender's address), and nothing staged.
  std::memset(dst.at(0), 0, kRegion);
  const std::size_t before = gpu_->calls.size();
  std::vector<void*> reqs;
  for (std::size_t k = 0; k < kSteps; ++k) {
    reqs.push_back(recvPost(r, dst.at(k * kStep), kStep));
    reqs.push_back(sendPost(s, region + k * kStep, kStep));
  }
  ASSERT_EQ(progressAll(reqs), 2 * kSteps);
  const auto copies = callsSince(*gpu_, before, "cuMemcpyDtoDAsync");
  ASSERT_EQ(copies.size(), kSteps);
  for (std::size_t k = 0; k < kSteps; ++k) {
    EXPECT_EQ(copies[k].src, view + kOffset + k * kStep) << k;
    EXPECT_EQ(copies[k].dst, reinterpret_cast<std::uintptr_t>(dst.at(k * kStep))) << k;
    EXPECT_EQ(copies[k].bytes, kStep);
  }
  EXPECT_TRUE(callsSince(*gpu_, before, "cuMemcpyDtoHAsync").empty()) << "no staging copy";
  EXPECT_TRUE(callsSince(*gpu_, before, "cuMemcpyHtoDAsync").empty());
  EXPECT_EQ(std::memcmp(dst.at(0), region, kSteps * kStep), 0);
  EXPECT_EQ(logText().find("cannot"), std::string::npos) << logText();
}

// The send completes only once the receiver's copy out of the allocation is done: NCCL may
// overwrite the buffer as soon as the send is done.
TEST_F(RealIpc, SendWaitsForTheReceiversDeviceToDeviceCopy) {
  MappedPair m;
  ASSERT_NO_FATAL_FAILURE(mappedPair(m, 0));
  void *s = m.s, *r = m.r;
  CuMemBuffer& alloc = *m.alloc;
  Buffer& dst = *m.dst;
  gpu_->complete = false;  // copies enqueued from now on have not run
  const std::size_t records = gpu_->count("cuEventRecord");
  void* rreq = recvPost(r, dst.at(0), 4096);
  void* sreq = sendPost(s, alloc.p + 4096, 4096);
  ASSERT_NO_FATAL_FAILURE(expectPendingWhileTheCopyWaits(rreq, sreq));
  ASSERT_GT(gpu_->count("cuEventRecord"), records);
  ASSERT_FALSE(gpu_->named("cuMemcpyDtoDAsync").empty());
  gpu_->complete = true;
  EXPECT_EQ(progressAll({rreq, sreq}), 2u);
}

// The same with the driver's stream memory writes (CRYSTAL_COPY_FLAGS, the default where the
// driver has them): the copies report completion through a host word, and neither side makes
// an event record or query for them.
TEST_F(RealIpc, SendWaitsForTheReceiversCopyThroughTheStreamsHostWord) {
  gpu_ = &installFakeDriver(/*stream_mem_ops=*/true);
  MappedPair m;
  ASSERT_NO_FATAL_FAILURE(mappedPair(m, 5));
  void *s = m.s, *r = m.r;
  CuMemBuffer& alloc = *m.alloc;
  Buffer& dst = *m.dst;
  gpu_->complete = false;  // stream writes from now on are held until released
  const std::size_t writes = gpu_->count("cuStreamWriteValue32");
  void* rreq = recvPost(r, dst.at(0), 4096);
  void* sreq = sendPost(s, alloc.p + 4096, 4096);
  ASSERT_NO_FATAL_FAILURE(expectPendingWhileTheCopyWaits(rreq, sreq));
  EXPECT_EQ(gpu_->count("cuStreamWriteValue32"), writes + 1) << "the receive's mark";
  EXPECT_EQ(releaseFakeStreamWrites(), 1u);
  gpu_->complete = true;
  EXPECT_EQ(progressAll({rreq, sreq}), 2u);
  EXPECT_EQ(std::memcmp(dst.at(0), alloc.p + 4096, 4096), 0);
  EXPECT_EQ(gpu_->event_queries, 0u);
  EXPECT_EQ(gpu_->count("cuEventRecord"), 0u);
  EXPECT_EQ(logText().find("report completion by events"), std::string::npos) << logText();
}

// Small steps copied by the GPU writer's kernel (device_queue.h copyAnyOrder): a command in
// its ring, no driver call on the receiver's side (no copy, no completion mark); steps
// above CRYSTAL_GPU_COPY_MAX go to the stream as before.
const unsigned char kFakeWriterImage[16] = {};  // the fake driver "loads" any image

class RealIpcWriter : public RealIpc {
 protected:
  void SetUp() override {
    RealIpc::SetUp();
    ::unsetenv("CRYSTAL_GPU_COPY_MAX");  // its default: the writer copies steps <= 1 MiB
    plugin::GpuWriter::setImageForTesting(kFakeWriterImage);  // a build without nvcc has none
  }
  void TearDown() override {
    RealIpc::TearDown();
    plugin::GpuWriter::setImageForTesting(nullptr);
  }
  // Driver calls of the data path since call `from` (what NCCL's proxy thread pays a step).
  [[nodiscard]] std::size_t dataPathCalls(std::size_t from) const {
    std::size_t n = 0;
    for (const char* name : {"cuMemcpyDtoDAsync", "cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync",
                             "cuEventRecord", "cuEventQuery", "cuStreamWriteValue32"})
      n += callsSince(*gpu_, from, name).size();
    return n;
  }
};

TEST_F(RealIpcWriter, SmallStepsAreCopiedByTheKernelWithNoDriverCall) {
  void *s = nullptr, *r = nullptr;
  realPair(&s, &r);
  constexpr std::size_t kStep = 64 << 10, kSteps = 8;
  CuMemBuffer alloc(1 << 20);
  alloc.fill(21);
  Buffer dst(kSteps * kStep);
  (void)reg(s, alloc.p, kSteps * kStep, nccl::NCCL_PTR_CUDA);
  (void)reg(r, dst, nccl::NCCL_PTR_CUDA);
  EXPECT_EQ(gpu_->count("cuModuleGetFunction:crystal_gpu_writer"), 1u)
      << "loaded at the receiver's registration";
  ASSERT_NO_FATAL_FAILURE(mapAllocation(s, r, alloc, dst));
  std::memset(dst.at(0), 0, kSteps * kStep);
  const std::size_t before = gpu_->calls.size();
  for (int round = 0; round < 3; ++round) {
    std::vector<void*> reqs;
    for (std::size_t k = 0; k < kSteps; ++k) {
      reqs.push_back(recvPost(r, dst.at(k * kStep), kStep));
      reqs.push_back(sendPost(s, alloc.p + k * kStep, kStep));
    }
    ASSERT_EQ(progressAll(reqs), 2 * kSteps);
    EXPECT_EQ(std::memcmp(dst.at(0), alloc.p, kSteps * kStep), 0) << round;
    std::memset(dst.at(0), 0, kSteps * kStep);
  }
  EXPECT_EQ(dataPathCalls(before), 0u);
  EXPECT_GE(plugin::writer_ring::kSize, 3 * kSteps);
  // The warm-up launch had no copy to share (one block); the copies' launches bring the
  // helpers (CRYSTAL_GPU_WRITER_BLOCKS, default 16).
  const std::vector<FakeCall> launches = gpu_->named("cuLaunchKernel");
  ASSERT_GE(launches.size(), 2u);
  EXPECT_EQ(launches.front().rows, 1u);
  for (std::size_t i = 1; i < launches.size(); ++i) EXPECT_EQ(launches[i].rows, 16u) << i;
  EXPECT_EQ(logText().find("cannot"), std::string::npos) << logText();
}

TEST_F(RealIpcWriter, StepsAboveTheCopyMaxGoToTheStream) {
  ::setenv("CRYSTAL_GPU_COPY_MAX", "32768", 1);
  void *s = nullptr, *r = nullptr;
  realPair(&s, &r);
  CuMemBuffer alloc(1 << 20);
  alloc.fill(22);
  Buffer dst(1 << 18);
  (void)reg(s, alloc.p, 1 << 18, nccl::NCCL_PTR_CUDA);
  (void)reg(r, dst, nccl::NCCL_PTR_CUDA);
  ASSERT_NO_FATAL_FAILURE(mapAllocation(s, r, alloc, dst));
  const std::size_t before = gpu_->calls.size();
  std::vector<void*> reqs{recvPost(r, dst.at(0), 32768), sendPost(s, alloc.p, 32768),
                          recvPost(r, dst.at(65536), 32769), sendPost(s, alloc.p + 65536, 32769)};
  ASSERT_EQ(progressAll(reqs), 4u);
  const auto copies = callsSince(*gpu_, before, "cuMemcpyDtoDAsync");
  ASSERT_EQ(copies.size(), 1u) << "only the step of 32769 bytes";
  EXPECT_EQ(copies[0].bytes, 32769u);
  EXPECT_EQ(std::memcmp(dst.at(0), alloc.p, 32768), 0);
  EXPECT_EQ(std::memcmp(dst.at(65536), alloc.p + 65536, 32769), 0);
}

// Neither side of a step completes before the kernel ran its copy (NCCL may rewrite the
// sender's slot once its send is done); once it ran, both do.
TEST_F(RealIpcWriter, SendWaitsForTheKernelsCopy) {
  MappedPair m;
  ASSERT_NO_FATAL_FAILURE(mappedPair(m, 23));
  void *s = m.s, *r = m.r;
  CuMemBuffer& alloc = *m.alloc;
  Buffer& dst = *m.dst;
  gpu_->kernel_runs = false;  // launches from now on are queued, not run
  std::memset(dst.at(0), 0, 8192);
  void* rreq = recvPost(r, dst.at(0), 8192);
  void* sreq = sendPost(s, alloc.p + 8192, 8192);
  ASSERT_NO_FATAL_FAILURE(expectPendingWhileTheCopyWaits(rreq, sreq));
  EXPECT_NE(std::memcmp(dst.at(0), alloc.p + 8192, 8192), 0) << "not copied yet";
  EXPECT_EQ(drainFakeWriterRing(), 1u) << "the copy (CRYSTAL_GPU_ACK is off by default)";
  EXPECT_EQ(progressAll({rreq, sreq}), 2u);
  EXPECT_EQ(std::memcmp(dst.at(0), alloc.p + 8192, 8192), 0);
  gpu_->kernel_runs = true;
}

// The GPU's acknowledgement: once the kernel ran the copy, the sender's send completes
// without another turn of the receiving proxy (the kernel stored the frame's number in the
// stream page); the receive completes at its own next test. With CRYSTAL_GPU_ACK=0 the send
// waits for that test's acknowledgement.
TEST_F(RealIpcWriter, SendCompletesOnTheKernelsReleaseWithoutTheReceiversTurn) {
  for (const bool ack : {true, false}) {
    SCOPED_TRACE(ack ? "CRYSTAL_GPU_ACK=1" : "CRYSTAL_GPU_ACK=0");
    ::setenv("CRYSTAL_GPU_ACK", ack ? "1" : "0", 1);
    MappedPair m;
    ASSERT_NO_FATAL_FAILURE(mappedPair(m, ack ? 25 : 26));
    void *s = m.s, *r = m.r;
    CuMemBuffer& alloc = *m.alloc;
    Buffer& dst = *m.dst;
    gpu_->kernel_runs = false;
    void* rreq = recvPost(r, dst.at(0), 8192);
    void* sreq = sendPost(s, alloc.p + 8192, 8192);
    ASSERT_NO_FATAL_FAILURE(expectPendingWhileTheCopyWaits(rreq, sreq));  // frame taken
    EXPECT_EQ(drainFakeWriterRing(), ack ? 2u : 1u);
    // Only the sender is tested from here until it is done (or clearly is not).
    int done = 0;
    for (int i = 0; i < 2000 && !done; ++i) ASSERT_EQ(net::test(sreq, &done, nullptr), ncclSuccess);
    EXPECT_EQ(done, ack ? 1 : 0);
    EXPECT_EQ(progressAll(done ? std::vector<void*>{rreq} : std::vector<void*>{rreq, sreq}),
              done ? 1u : 2u);
    EXPECT_EQ(std::memcmp(dst.at(0), alloc.p + 8192, 8192), 0);
    gpu_->kernel_runs = true;
  }
  ::unsetenv("CRYSTAL_GPU_ACK");
}

// A receiver whose page says more frames were copied than were sent (a corrupt or hostile
// peer process): the send fails with a clear error instead of completing steps not copied.
TEST_F(RealIpcWriter, GpuAckPastTheFramesSentIsAnError) {
  ::setenv("CRYSTAL_GPU_ACK", "1", 1);
  MappedPair m;
  ASSERT_NO_FATAL_FAILURE(mappedPair(m, 0));
  // The stream page, as the receiver registered it for its GPU writer.
  plugin::StreamPage* page = nullptr;
  for (const FakeCall& c : gpu_->named("cuMemHostRegister"))
    if (c.value & plugin::cuda::kHostRegisterDeviceMap)
      page = reinterpret_cast<plugin::StreamPage*>(c.dst);
  ASSERT_NE(page, nullptr) << "the page is registered at the first step the writer copied";
  ASSERT_EQ(page->magic, plugin::StreamPage::kMagic);
  page->gpu_copied.store(1'000'000);
  void* sreq = sendPost(m.s, m.alloc->p, 4096);
  nccl::ncclResult_t rc = ncclSuccess;
  int done = 0;
  for (int i = 0; i < 100 && rc == ncclSuccess && !done; ++i) rc = net::test(sreq, &done, nullptr);
  EXPECT_EQ(rc, nccl::ncclRemoteError);
  EXPECT_NE(logText().find("GPU copied shared-memory frame 1000000 of"), std::string::npos)
      << logText();
  ::unsetenv("CRYSTAL_GPU_ACK");
}

// LL128 lines into the receiver's LL128 buffer: the data words of every line first, then the
// flag words, each as one 2D copy out of the mapping (a copy engine need not write a line in
// order; the GPU reads a line once its flag is there).
TEST_F(RealIpc, LL128LinesGoDataFirstThenFlags) {
  void *s = nullptr, *r = nullptr;
  realPair(&s, &r);
  constexpr std::size_t kLines = 10, kBytes = kLines * 128;
  CuMemBuffer alloc(1 << 20);
  alloc.fill(5);
  Buffer ll(8192), ll128(8 * kBytes), simple(65536);
  (void)reg(s, alloc.p, 8 * kBytes, nccl::NCCL_PTR_CUDA);
  (void)reg(r, ll, nccl::NCCL_PTR_CUDA);
  void* ll128_mh = reg(r, ll128, nccl::NCCL_PTR_CUDA);
  (void)reg(r, simple, nccl::NCCL_PTR_CUDA);
  auto post = [&](std::size_t step) {
    void* data = ll128.at(step * kBytes);
    std::size_t size = kBytes;
    int tag = 1;
    void* req = nullptr;
    EXPECT_EQ(net::irecv(r, 1, &data, &size, &tag, &ll128_mh, nullptr, &req), ncclSuccess);
    return req;
  };
  for (int round = 0; round < 20 && gpu_->named("cuMemcpy2DAsync").empty(); ++round) {
    std::vector<void*> reqs{post(0), sendPost(s, alloc.p, kBytes)};
    ASSERT_EQ(progressAll(reqs), 2u);
  }
  // The flag is a line's last word (proto_lines.h): one copy of the 120 data bytes of every
  // line, then one of the flags.
  static_assert(plugin::proto::kLL128FlagWord * 8 + 8 == 128);
  const auto copies = gpu_->named("cuMemcpy2DAsync");
  ASSERT_EQ(copies.size(), 2u) << logText();
  const std::uintptr_t dst = reinterpret_cast<std::uintptr_t>(ll128.at(0));
  EXPECT_EQ(copies[0].dst, dst);
  EXPECT_EQ(copies[0].bytes, 120u);
  EXPECT_EQ(copies[1].dst, dst + 120) << "flags last";
  EXPECT_EQ(copies[1].bytes, 8u);
  for (const FakeCall& c : copies) {
    EXPECT_EQ(c.pitch, 128u);
    EXPECT_EQ(c.rows, kLines);
  }
  EXPECT_EQ(std::memcmp(ll128.at(0), alloc.p, kBytes), 0);
}

// Memory that is no cuMem allocation (cudaMalloc'ed, NCCL_CUMEM_ENABLE=0), or a driver that
// will not export it: no offer, shared memory as before.
TEST_F(RealIpc, BufferTheDriverWillNotExportStaysOnSharedMemory) {
  gpu_->export_ok = false;
  void *s = nullptr, *r = nullptr;
  realPair(&s, &r);
  CuMemBuffer alloc(1 << 20);
  alloc.fill(3);
  Buffer dst(65536);
  (void)reg(s, alloc.p, 65536, nccl::NCCL_PTR_CUDA);
  (void)reg(r, dst, nccl::NCCL_PTR_CUDA);
  for (int round = 0; round < 4; ++round) {
    std::vector<void*> reqs{recvPost(r, dst.at(0), 8192), sendPost(s, alloc.p, 8192)};
    ASSERT_EQ(progressAll(reqs), 2u);
  }
  EXPECT_TRUE(gpu_->named("cuMemcpyDtoDAsync").empty());
  EXPECT_EQ(gpu_->named("cuMemcpyHtoDAsync").size(), 4u) << "shared memory: one copy a step";
  EXPECT_EQ(std::memcmp(dst.at(0), alloc.p, 8192), 0);
  EXPECT_NE(logText().find("cannot export the allocation of a 65536-byte GPU buffer"),
            std::string::npos)
      << logText();
}

// A receiver whose driver will not import it, or with CRYSTAL_IPC=0: refused, shared memory
// as before, and the sender says why.
TEST_F(RealIpc, ReceiverThatCannotMapItRefuses) {
  for (const bool off : {false, true}) {
    SCOPED_TRACE(off ? "CRYSTAL_IPC=0 on the receiver" : "import fails");
    gpu_->import_ok = off;
    clearCapturedLog();
    void *s = nullptr, *r = nullptr;
    realPair(&s, &r);  // both comms exist: the variable now only reaches the receiver
    if (off) ::setenv("CRYSTAL_IPC", "0", 1);
    CuMemBuffer alloc(1 << 20);
    alloc.fill(9);
    Buffer dst(65536);
    (void)reg(s, alloc.p, 65536, nccl::NCCL_PTR_CUDA);
    (void)reg(r, dst, nccl::NCCL_PTR_CUDA);
    const std::size_t before = gpu_->calls.size();
    for (int round = 0; round < 6; ++round) {
      std::vector<void*> reqs{recvPost(r, dst.at(0), 8192), sendPost(s, alloc.p, 8192)};
      ASSERT_EQ(progressAll(reqs), 2u);
    }
    EXPECT_TRUE(callsSince(*gpu_, before, "cuMemcpyDtoDAsync").empty());
    EXPECT_EQ(callsSince(*gpu_, before, "cuMemcpyHtoDAsync").size(), 6u);
    EXPECT_EQ(std::memcmp(dst.at(0), alloc.p, 8192), 0);
    EXPECT_NE(logText().find(off ? "CRYSTAL_IPC=0 on this side"
                                 : "cannot map the sender's GPU allocation 0"),
              std::string::npos)
        << logText();
    EXPECT_NE(logText().find("the peer cannot map GPU allocation 0"), std::string::npos);
    ::unsetenv("CRYSTAL_IPC");
  }
}

// The fd inbox: notes arrive by key whatever their order; a note for another key waits for
// its taker; an unknown inbox is a failure, not a hang.
TEST(FdInbox, NotesArriveByKeyAndUnknownInboxesFail) {
  plugin::FdInbox& inbox = plugin::FdInbox::get();
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  std::string why;
  ASSERT_EQ(plugin::sendFd(inbox.token(), 41, pipe_fds[0], &why), plugin::FdSend::Sent) << why;
  ASSERT_EQ(plugin::sendFd(inbox.token(), 42, pipe_fds[1], &why), plugin::FdSend::Sent) << why;
  EXPECT_FALSE(inbox.take(7).valid());
  plugin::Fd w = inbox.take(42);  // read past 41, which stays for its taker
  plugin::Fd r = inbox.take(41);
  ASSERT_TRUE(w.valid() && r.valid());
  EXPECT_FALSE(inbox.take(41).valid()) << "delivered once";
  // The received fds are the pipe's ends: a byte written through one comes out of the other.
  ASSERT_EQ(::write(w.get(), "k", 1), 1);
  char c = 0;
  ASSERT_EQ(::read(r.get(), &c, 1), 1);
  EXPECT_EQ(c, 'k');
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
  EXPECT_EQ(plugin::sendFd(inbox.token() ^ 1, 1, 0, &why), plugin::FdSend::Failed);
  EXPECT_NE(why.find("crystal-fd-"), std::string::npos) << why;
}

// Across processes, as between two real ranks: a child hands over a memfd; the parent maps
// what the child wrote into it.
TEST(FdInbox, FdFromAnotherProcessMapsTheSameBytes) {
  plugin::FdInbox& inbox = plugin::FdInbox::get();
  const std::uint64_t token = inbox.token();
  const pid_t child = ::fork();
  if (child == 0) {  // only async-signal-safe work and sendFd (no plugin state) in the child
    const int fd = ::memfd_create("crystal-test", 0);
    if (fd < 0 || ::ftruncate(fd, 4096) != 0 || ::pwrite(fd, "from the child", 14, 100) != 14)
      ::_exit(2);
    std::string why;
    ::_exit(plugin::sendFd(token, 0xC41D, fd, &why) == plugin::FdSend::Sent ? 0 : 3);
  }
  ASSERT_GT(child, 0);
  int status = -1;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  plugin::Fd fd = inbox.take(0xC41D);
  ASSERT_TRUE(fd.valid());
  char got[14] = {};
  ASSERT_EQ(::pread(fd.get(), got, sizeof got, 100), 14);
  EXPECT_EQ(std::string(got, sizeof got), "from the child");
}

// ---- a malformed peer: a clear ncclRemoteError, never a crash or a hang ----

void ipcOffer(RawPeer& peer, std::uint32_t segment, std::uint64_t alloc, std::uint64_t offset,
              std::uint64_t region) {
  plugin::FrameHeader h;
  h.kind = plugin::FrameKind::IpcOffer;
  h.segment = segment;
  h.size = alloc;
  h.offset = offset;
  plugin::IpcOfferBody body;
  body.key = 99;
  body.region_size = region;
  peer.writeAll(&h, sizeof h);
  peer.writeAll(&body, sizeof body);
}

TEST_F(RealIpcBadPeer, RegionPastTheAllocationsEnd) {
  connectRawSender();
  ipcOffer(peer_, 0, 1 << 20, 1 << 20, 4096);
  expectRemoteError(
      "offered a 4096-byte GPU region at offset 1048576 of a 1048576-byte allocation");
}

TEST_F(RealIpcBadPeer, FdOfAnAllocationNeverOffered) {
  connectRawSender();
  plugin::FrameHeader h;
  h.kind = plugin::FrameKind::IpcFd;
  h.segment = 2;
  h.size = 1;
  peer_.writeAll(&h, sizeof h);
  expectRemoteError("handed over GPU allocation 2, which it did not offer");
}

TEST_F(RealIpcBadPeer, BytesFromAnAllocationNeverMapped) {
  connectRawSender();
  ipcOffer(peer_, 0, 1 << 20, 0, 4096);  // offered, but its fd never comes
  plugin::FrameHeader h;
  h.kind = plugin::FrameKind::IpcData;
  h.tag = 1;
  h.segment = 0;
  h.size = 16;
  peer_.writeAll(&h, sizeof h);
  expectRemoteError(
      "bytes from GPU allocation 0, which it did not offer or this side could not map");
}

// Found by plugin_real_stream_fuzz: segment 2^32 - 1 wrapped to "the last entry" of an empty
// table.
TEST_F(RealIpcBadPeer, OfferOfTheLastSegmentNumberIntoAnEmptyTable) {
  connectRawSender();
  ipcOffer(peer_, 0xffffffffu, 1 << 20, 0, 4096);
  expectRemoteError("offered GPU allocation segment 4294967295 where 0 was next");
}

TEST_F(RealIpcBadPeer, SecondOfferOfTheSameKindForOneSegment) {
  connectRawSender();
  ipcOffer(peer_, 0, 1 << 20, 0, 4096);
  ipcOffer(peer_, 0, 1 << 20, 0, 4096);
  expectRemoteError("offered GPU allocation segment 0 where 1 was next");
}

}  // namespace
}  // namespace crystal::test
