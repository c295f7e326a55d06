// GPU memory (GDR) through the net API, on the CPU: the properties NCCL reads, CUDA
// registrations, receives from virtual peers into "device" buffers per data policy (the
// driver calls a fake records and performs on host memory), completion that waits for the
// fake's GPU work, real<->real staging, and a driver that cannot be loaded.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "call_stats.h"
#include "captured_log.h"
#include "comm.h"
#include "crystal/live/handle.h"
#include "fake_cuda_driver.h"
#include "gpu_writer.h"
#include "handle_table.h"
#include "net_api.h"
#include "proto_lines.h"
#include "state.h"

namespace crystal::test {
namespace {

namespace net = plugin::net;
using nccl::ncclSuccess;

const unsigned char kFakeKernelImage[16] = {};  // the fake driver "loads" any image

// Protocol buffers of one connection as NCCL registers them (LL, LL128, Simple), small.
constexpr std::size_t kLLStep = 1024, kLL128Step = 1280, kSimpleStep = 4096;

// A connection's LL, LL128 and Simple buffers (8 steps each), registered in NCCL's order.
struct Protocols {
  Buffer ll{8 * kLLStep}, ll128{8 * kLL128Step}, simple{8 * kSimpleStep};
};

// Every LL128 line of `got` holds the 120 data bytes of `sent`'s line and the flag `flag`.
void expectLL128LinesCopied(const Buffer& got, const Buffer& sent, std::uint64_t flag) {
  for (std::size_t line = 0; line < kLL128Step / 128; ++line) {
    EXPECT_EQ(std::memcmp(got.at(line * 128), sent.at(line * 128), 120), 0) << line;
    std::uint64_t f = 0;
    std::memcpy(&f, got.at(line * 128 + 120), 8);
    EXPECT_EQ(f, flag);
  }
}

void configure(DataPolicy policy, bool gdr = true, double timeout_s = 60.0) {
  ::unsetenv("CRYSTAL_DATA");
  ::unsetenv("CRYSTAL_GDR");
  ::unsetenv("CRYSTAL_TIMEOUT");  // it would win over timeout_s
  Config cfg;
  cfg.emulation.data = policy;
  cfg.emulation.gdr = gdr;
  cfg.emulation.timeout_s = timeout_s;
  plugin::PluginState::get().configure(cfg);
}

// A Hello from the host for a virtual sender without identity (pairs by creation order).
int sendHello(const live::NetHandle& h, live::PeerKind kind) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = h.port;
  std::memcpy(&sin.sin_addr, h.addr, 4);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sin), sizeof sin), 0);
  live::Hello hello;
  hello.peer = kind;
  hello.listen_id = h.listen_id;
  hello.comm_id = h.comm_id;
  EXPECT_EQ(::send(fd, &hello, sizeof hello, 0), static_cast<ssize_t>(sizeof hello));
  return fd;
}

class Gdr : public ::testing::Test {
 protected:
  void SetUp() override {
    {
      std::lock_guard lock(captured_log_mu);
      captured_log.clear();
    }
    gpu_ = &installFakeDriver();
    // The GPU writer loads whatever image the fake is given (a build without nvcc has none).
    plugin::GpuWriter::setImageForTesting(kFakeKernelImage);
    ::unsetenv("CRYSTAL_GPU_WRITER");
    ::setenv("CRYSTAL_GPU_COPY_MAX", "0", 1);  // real peers' copies: the driver's (counted)
    ASSERT_EQ(net::init(&ctx_, 0x6472 + ++serial_, nullptr, captureLog, nullptr), ncclSuccess);
  }
  void TearDown() override {
    if (HasFailure()) {
      std::lock_guard lock(captured_log_mu);
      std::fprintf(stderr, "plugin log:\n%s", captured_log.c_str());
    }
    for (void* c : sends_) EXPECT_EQ(net::closeSend(c), ncclSuccess);
    for (void* c : recvs_) EXPECT_EQ(net::closeRecv(c), ncclSuccess);
    for (void* c : listens_) EXPECT_EQ(net::closeListen(c), ncclSuccess);
    for (int fd : fds_) ::close(fd);
    EXPECT_EQ(net::finalize(ctx_), ncclSuccess);
    // Every stream, event and pinned buffer the comms made is given back at close.
    EXPECT_EQ(gpu_->live_streams, 0);
    EXPECT_EQ(gpu_->live_events, 0);
    EXPECT_EQ(gpu_->live_host_allocs, 0);
    uninstallFakeDriver();
    plugin::GpuWriter::setImageForTesting(nullptr);
    ::unsetenv("CRYSTAL_GDR");
    ::unsetenv("CRYSTAL_GPU_WRITER");
    ::unsetenv("CRYSTAL_SHM");
    ::unsetenv("CRYSTAL_GPU_COPY_MAX");
  }

  // Real<->real bytes over TCP only (CRYSTAL_SHM=0): the route of peers on other machines;
  // tests/plugin/real_shm_test.cc has the shared-memory one.
  static void tcpOnly() { ::setenv("CRYSTAL_SHM", "0", 1); }

  void* virtualSend() {
    live::NetHandle h;
    h.kind = live::HandleKind::VirtualPeer;
    h.rank = 0;  // no identity (nranks 0): pairs with the k-th receive by creation order
    char bytes[live::kNcclHandleSize] = {};
    std::memcpy(bytes, &h, sizeof h);
    void* s = nullptr;
    EXPECT_EQ(net::connect(ctx_, 0, bytes, &s, nullptr), ncclSuccess);
    sends_.push_back(s);
    return s;
  }
  void* virtualRecv() { return acceptOf(live::PeerKind::Virtual); }
  // A send and a receive comm of two real ranks, both in this process over loopback TCP.
  void realPair(void** s, void** r) {
    live::NetHandle h;
    (void)acceptOf(live::PeerKind::Real, &h);
    char bytes[live::kNcclHandleSize] = {};
    std::memcpy(bytes, &h, sizeof h);
    *s = *r = nullptr;
    for (int i = 0; i < 1'000'000 && (!*s || !*r); ++i) {
      if (!*s) {
        ASSERT_EQ(net::connect(ctx_, 0, bytes, s, nullptr), ncclSuccess);
      }
      if (!*r) {
        ASSERT_EQ(net::accept(listens_.back(), r, nullptr), ncclSuccess);
      }
    }
    ASSERT_TRUE(*s && *r);
    sends_.push_back(*s);
    recvs_.push_back(*r);
  }
  void* acceptOf(live::PeerKind kind, live::NetHandle* handle_out = nullptr) {
    char bytes[live::kNcclHandleSize] = {};
    void* l = nullptr;
    EXPECT_EQ(net::listen(ctx_, 0, bytes, &l), ncclSuccess);
    listens_.push_back(l);
    live::NetHandle h;
    EXPECT_TRUE(live::decodeHandle(bytes, h));
    if (handle_out) {
      *handle_out = h;
      return nullptr;
    }
    fds_.push_back(sendHello(h, kind));
    return acceptAll(l);
  }
  void* acceptAll(void* l) {
    void* r = nullptr;
    for (int i = 0; i < 1'000'000 && !r; ++i) EXPECT_EQ(net::accept(l, &r, nullptr), ncclSuccess);
    EXPECT_NE(r, nullptr);
    recvs_.push_back(r);
    return r;
  }
  // Fresh LL, LL128, Simple buffers registered as `type` on comm c (kept until the fixture
  // ends, after its comms are closed).
  Protocols& registered(void* c, int type) {
    Protocols& b = *protocols_.emplace_back(std::make_unique<Protocols>());
    registerProtocols(c, {&b.ll, &b.ll128, &b.simple}, type);
    return b;
  }
  // LL, LL128, Simple regions of `type` on comm c, in NCCL's order.
  void registerProtocols(void* c, const std::vector<Buffer*>& b, int type) {
    for (Buffer* buf : b) {
      void* mh = nullptr;
      ASSERT_EQ(net::regMr(c, buf->p.get(), buf->size, type, &mh), ncclSuccess);
      mhandles_[c].push_back(mh);
    }
  }
  void* recvPost(void* c, int region, void* data, std::size_t size) {
    int tag = 1;
    void* mh = mhandles_[c][static_cast<std::size_t>(region)];
    void* req = nullptr;
    EXPECT_EQ(net::irecv(c, 1, &data, &size, &tag, &mh, nullptr, &req), ncclSuccess);
    EXPECT_NE(req, nullptr);
    return req;
  }
  void* sendPost(void* c, int region, void* data, std::size_t size) {
    void* req = nullptr;
    EXPECT_EQ(net::isend(c, data, size, /*tag=*/1, mhandles_[c][static_cast<std::size_t>(region)],
                         nullptr, &req),
              ncclSuccess);
    EXPECT_NE(req, nullptr);
    return req;
  }
  // test() until done (bounded); returns the number of "not done" answers.
  static long waitDone(void* req, long max_ms = 2000) {
    int done = 0;
    long waits = 0;
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(max_ms);
    while (!done && std::chrono::steady_clock::now() < end) {
      EXPECT_EQ(net::test(req, &done, nullptr), ncclSuccess);
      if (!done) ++waits;
    }
    EXPECT_EQ(done, 1) << "request not done within " << max_ms << " ms";
    return waits;
  }
  // test() for `ms` with the fake's GPU work held back: must stay not done.
  static void stillPendingFor(void* req, int ms) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < end) {
      int done = 1;
      ASSERT_EQ(net::test(req, &done, nullptr), ncclSuccess);
      ASSERT_EQ(done, 0) << "completed before the GPU work was done";
    }
  }

  FakeGpu* gpu_ = nullptr;
  void* ctx_ = nullptr;
  static inline int serial_ = 0;
  std::vector<void*> sends_, recvs_, listens_;
  std::vector<int> fds_;
  std::map<void*, std::vector<void*>> mhandles_;
  std::vector<std::unique_ptr<Protocols>> protocols_;
};

// emulation.gdr unset: GDR only where the plugin writes no data (data `none`), judged on
// the policy in effect (CRYSTAL_DATA wins over the config's).
TEST_F(Gdr, DefaultIsOnOnlyUnderDataNone) {
  ::unsetenv("CRYSTAL_GDR");
  ::unsetenv("CRYSTAL_DATA");
  nccl::ncclNetProperties_v11_t p{};
  Config cfg;  // data mirror, gdr unset
  plugin::PluginState::get().configure(cfg);
  ASSERT_EQ(net::getProperties(0, &p), ncclSuccess);
  EXPECT_EQ(p.ptrSupport, nccl::NCCL_PTR_HOST);
  cfg.emulation.data = DataPolicy::Zero;
  plugin::PluginState::get().configure(cfg);
  ASSERT_EQ(net::getProperties(0, &p), ncclSuccess);
  EXPECT_EQ(p.ptrSupport, nccl::NCCL_PTR_HOST);
  cfg.emulation.data = DataPolicy::None;
  plugin::PluginState::get().configure(cfg);
  ASSERT_EQ(net::getProperties(0, &p), ncclSuccess);
  EXPECT_EQ(p.ptrSupport, nccl::NCCL_PTR_HOST | nccl::NCCL_PTR_CUDA);
  ::setenv("CRYSTAL_DATA", "mirror", 1);  // the policy in effect, not the config's
  plugin::PluginState::get().configure(cfg);
  ASSERT_EQ(net::getProperties(0, &p), ncclSuccess);
  EXPECT_EQ(p.ptrSupport, nccl::NCCL_PTR_HOST);
  ::unsetenv("CRYSTAL_DATA");
  cfg.emulation.data = DataPolicy::Mirror;
  cfg.emulation.gdr = true;  // set explicitly: wins over the rule
  plugin::PluginState::get().configure(cfg);
  ASSERT_EQ(net::getProperties(0, &p), ncclSuccess);
  EXPECT_EQ(p.ptrSupport, nccl::NCCL_PTR_HOST | nccl::NCCL_PTR_CUDA);
}

TEST_F(Gdr, PropertiesReportCudaWhenOnHostOnlyWhenOff) {
  nccl::ncclNetProperties_v11_t p{};
  configure(DataPolicy::None, true);
  ASSERT_EQ(net::getProperties(0, &p), ncclSuccess);
  EXPECT_EQ(p.ptrSupport, nccl::NCCL_PTR_HOST | nccl::NCCL_PTR_CUDA);
  ::setenv("CRYSTAL_GDR", "0", 1);
  plugin::PluginState::get().configure(Config{});  // the environment wins
  ASSERT_EQ(net::getProperties(0, &p), ncclSuccess);
  EXPECT_EQ(p.ptrSupport, nccl::NCCL_PTR_HOST);
  configure(DataPolicy::None, false);  // emulation.gdr: false
  ASSERT_EQ(net::getProperties(0, &p), ncclSuccess);
  EXPECT_EQ(p.ptrSupport, nccl::NCCL_PTR_HOST);
  ::setenv("CRYSTAL_GDR", "1", 1);  // the environment wins over the config
  Config off;
  off.emulation.gdr = false;
  plugin::PluginState::get().configure(off);
  ASSERT_EQ(net::getProperties(0, &p), ncclSuccess);
  EXPECT_EQ(p.ptrSupport, nccl::NCCL_PTR_HOST | nccl::NCCL_PTR_CUDA);
  // One hardware queue for all streams: the plugin's GPU writes could never overtake NCCL's
  // kernel, so GDR stays off whatever asked for it.
  ::setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1", 1);
  plugin::PluginState::get().configure(off);
  ASSERT_EQ(net::getProperties(0, &p), ncclSuccess);
  EXPECT_EQ(p.ptrSupport, nccl::NCCL_PTR_HOST);
  ::setenv("CUDA_DEVICE_MAX_CONNECTIONS", "8", 1);
  plugin::PluginState::get().configure(off);
  ASSERT_EQ(net::getProperties(0, &p), ncclSuccess);
  EXPECT_EQ(p.ptrSupport, nccl::NCCL_PTR_HOST | nccl::NCCL_PTR_CUDA);
  ::unsetenv("CUDA_DEVICE_MAX_CONNECTIONS");
  ::setenv("CRYSTAL_GDR", "2", 1);
  EXPECT_ANY_THROW(plugin::PluginState::get().configure(Config{}));
  ::unsetenv("CRYSTAL_GDR");
  EXPECT_TRUE(gpu_->calls.empty()) << "properties must not touch the driver";
}

// NCCL's own GDR probe (plugin/net.cc ncclGpuGdrSupport, drivers < 11.3): regMr of a 2 MiB
// GPU buffer with NCCL_PTR_CUDA on a send and a recv comm, then deregMr.
TEST_F(Gdr, RegMrAcceptsCudaWithoutDriverCalls) {
  configure(DataPolicy::Mirror);
  void* s = virtualSend();
  void* r = virtualRecv();
  Buffer b(2 << 20);
  for (void* c : {s, r}) {
    void* mh = nullptr;
    ASSERT_EQ(net::regMr(c, b.p.get(), b.size, nccl::NCCL_PTR_CUDA, &mh), ncclSuccess);
    EXPECT_NE(mh, nullptr);
    EXPECT_EQ(net::deregMr(c, mh), ncclSuccess);
  }
  void* mh = nullptr;
  EXPECT_NE(net::regMr(s, b.p.get(), b.size, 4 /* DMABUF: not advertised */, &mh), ncclSuccess);
  EXPECT_TRUE(gpu_->calls.empty());
}

TEST_F(Gdr, NoneSimpleIntoGpuMemoryCallsNoDriver) {
  configure(DataPolicy::None);
  ::setenv("CRYSTAL_GPU_WRITER", "0", 1);  // the driver path
  void* r = virtualRecv();
  auto& [ll, ll128, simple] = registered(r, nccl::NCCL_PTR_CUDA);
  for (int i = 0; i < 4; ++i) waitDone(recvPost(r, 2, simple.at(i * kSimpleStep), kSimpleStep));
  EXPECT_TRUE(gpu_->calls.empty());
  EXPECT_EQ(simple.p.get()[0], std::byte{0xA5}) << "none leaves Simple bytes untouched";
}

TEST_F(Gdr, NoneLLWritesOnlyFlagsOnTheGpu) {
  configure(DataPolicy::None);
  ::setenv("CRYSTAL_GPU_WRITER", "0", 1);  // the driver path
  void* r = virtualRecv();
  auto& [ll, ll128, simple] = registered(r, nccl::NCCL_PTR_CUDA);
  // Slot 2 of the LL buffer: the connection's first step there is 2 -> flag 3.
  waitDone(recvPost(r, 0, ll.at(2 * kLLStep), kLLStep));
  const auto m = gpu_->named("cuMemsetD2D32Async");
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].dst, reinterpret_cast<std::uintptr_t>(ll.at(2 * kLLStep + 4)));
  EXPECT_EQ(m[0].pitch, 8u);
  EXPECT_EQ(m[0].bytes, 1u);               // one 32-bit word per row
  EXPECT_EQ(m[0].rows, 2 * kLLStep / 16);  // flag1 and flag2 of every line
  EXPECT_EQ(m[0].value, 3u);
  EXPECT_EQ(gpu_->count("cuMemsetD8"), 0u) << "none does not zero data";
  std::uint32_t line[4];
  std::memcpy(line, ll.at(2 * kLLStep + 16 * 5), 16);
  EXPECT_EQ(line[1], 3u);
  EXPECT_EQ(line[3], 3u);
  EXPECT_EQ(line[0], 0xA5A5A5A5u);
}

// LL/LL128 flags in GPU memory: the GPU polls them itself, and NCCL reposts a slot only
// after its GPU consumed it, so the receive completes at its modelled time without an event
// per receive (two CUDA calls fewer on NCCL's proxy thread; CRYSTAL_LINES_WAIT=1 restores
// the wait). The flags still land: the memset is on the plugin's stream.
TEST_F(Gdr, NoneLLCompletesWithoutWaitingForItsFlagWrites) {
  configure(DataPolicy::None);
  ::setenv("CRYSTAL_GPU_WRITER", "0", 1);  // the driver path
  void* r = virtualRecv();
  auto& [ll, ll128, simple] = registered(r, nccl::NCCL_PTR_CUDA);
  gpu_->complete = false;  // the plugin's stream has run nothing
  waitDone(recvPost(r, 0, ll.at(0), kLLStep));
  waitDone(recvPost(r, 1, ll128.at(kLL128Step), kLL128Step));
  EXPECT_EQ(gpu_->count("cuEventRecord"), 0u);
  EXPECT_EQ(gpu_->count("cuEventQuery"), 0u);
  EXPECT_EQ(gpu_->named("cuMemsetD2D32Async").size(), 1u + 2u) << "LL flags; LL128 both halves";
  gpu_->complete = true;
}

TEST_F(Gdr, LinesWaitKnobMakesLLReceivesWaitForTheirFlagWrites) {
  configure(DataPolicy::None);
  ::setenv("CRYSTAL_LINES_WAIT", "1", 1);
  void* r = virtualRecv();
  ::unsetenv("CRYSTAL_LINES_WAIT");
  auto& [ll, ll128, simple] = registered(r, nccl::NCCL_PTR_CUDA);
  gpu_->complete = false;
  void* req = recvPost(r, 0, ll.at(0), kLLStep);
  stillPendingFor(req, 20);
  gpu_->complete = true;
  waitDone(req);
  EXPECT_EQ(gpu_->count("cuEventRecord"), 1u);
}

// The high halves of LL128 flags stay 0 (steps below 2^32): once a slot's were written, the
// next receive there writes only the low halves.
TEST_F(Gdr, NoneLL128WritesFlagHighHalvesOncePerSlot) {
  configure(DataPolicy::None);
  ::setenv("CRYSTAL_GPU_WRITER", "0", 1);  // the driver path
  void* r = virtualRecv();
  auto& [ll, ll128, simple] = registered(r, nccl::NCCL_PTR_CUDA);
  for (int step = 0; step < 8; ++step)
    waitDone(recvPost(r, 1, ll128.at(static_cast<std::size_t>(step) * kLL128Step), kLL128Step));
  EXPECT_EQ(gpu_->named("cuMemsetD2D32Async").size(), 16u) << "first use of each slot: both";
  waitDone(recvPost(r, 1, ll128.at(0), kLL128Step));  // slot 0 again: step 8 -> flag 9
  const auto m = gpu_->named("cuMemsetD2D32Async");
  ASSERT_EQ(m.size(), 17u);
  EXPECT_EQ(m.back().dst, reinterpret_cast<std::uintptr_t>(ll128.at(120)));
  EXPECT_EQ(m.back().value, 9u);
  std::uint64_t w[16];
  std::memcpy(w, ll128.at(128), 128);  // line 1 of slot 0
  EXPECT_EQ(w[15], 9u) << "low half 9, high half still 0";
  waitDone(recvPost(r, 1, ll128.at(kLL128Step), kLL128Step));  // slot 1 again: low only too
  EXPECT_EQ(gpu_->named("cuMemsetD2D32Async").size(), 18u);
}

// Closing a data comm logs what the threads spent inside the plugin's data calls and in
// CUDA driver calls among them (what a round of NCCL's proxy costs, docs/plugin.md).
TEST_F(Gdr, CloseLogsTheTimeDataCallsSpentInThePluginAndInCuda) {
  configure(DataPolicy::None);
  ::setenv("CRYSTAL_GPU_WRITER", "0", 1);  // the driver path
  plugin::logThreadCallStats(1);  // start counting from here
  void* r = virtualRecv();
  auto& [ll, ll128, simple] = registered(r, nccl::NCCL_PTR_CUDA);
  for (int i = 0; i < 1000; ++i)
    waitDone(recvPost(r, 0, ll.at(static_cast<std::size_t>(i % 8) * kLLStep), kLLStep));
  {
    std::lock_guard lock(captured_log_mu);
    captured_log.clear();
  }
  EXPECT_EQ(net::closeRecv(r), ncclSuccess);
  recvs_.erase(std::find(recvs_.begin(), recvs_.end(), r));
  std::string log;
  {
    std::lock_guard lock(captured_log_mu);
    log = captured_log;
  }
  EXPECT_NE(log.find("data calls on thread"), std::string::npos) << log;
  EXPECT_NE(log.find("of which 1000 CUDA driver calls"), std::string::npos) << log;
}

// GPU writer (gpu_writer.h): under none, LL/LL128 flags in GPU memory are commands in
// a ring the plugin's kernel runs; no memset, one launch while the kernel is not running.
TEST_F(Gdr, NoneLLFlagsGoThroughTheGpuGpuWriter) {
  configure(DataPolicy::None);
  void* r = virtualRecv();
  auto& [ll, ll128, simple] = registered(r, nccl::NCCL_PTR_CUDA);
  waitDone(recvPost(r, 0, ll.at(2 * kLLStep), kLLStep));  // slot 2: step 2 -> flag 3
  EXPECT_EQ(gpu_->count("cuMemsetD2D32Async"), 0u);
  EXPECT_EQ(gpu_->count("cuModuleGetFunction:crystal_gpu_writer"), 1u);
  EXPECT_EQ(gpu_->count("cuLaunchKernel"), 2u) << "at registration (loads it), at the post";
  std::uint32_t line[4];
  std::memcpy(line, ll.at(2 * kLLStep + 16 * 5), 16);
  EXPECT_EQ(line[1], 3u);
  EXPECT_EQ(line[3], 3u);
  EXPECT_EQ(line[0], 0xA5A5A5A5u) << "none writes no data";
  // LL128: the low halves, and the high halves the first time at this slot.
  // Slot 0 after step 2 (the protocols share the connection's steps): step 8 -> flag 9.
  waitDone(recvPost(r, 1, ll128.at(0), kLL128Step));
  std::uint64_t w[16];
  std::memcpy(w, ll128.at(128), 128);
  EXPECT_EQ(w[15], 9u) << "low half 9, high half 0";
  EXPECT_EQ(gpu_->count("cuMemsetD2D32Async"), 0u);
}

// The writer is made when NCCL registers the first GPU buffer (connection setup), with one
// launch waited for: loading the kernel must not happen while NCCL's kernel spins for flags.
TEST_F(Gdr, GpuWriterIsLoadedAndLaunchedOnceWhenTheBufferIsRegistered) {
  configure(DataPolicy::None);
  void* r = virtualRecv();
  EXPECT_EQ(gpu_->count("cuLaunchKernel"), 0u);
  (void)registered(r, nccl::NCCL_PTR_CUDA);
  EXPECT_EQ(gpu_->count("cuModuleGetFunction:crystal_gpu_writer"), 1u);
  EXPECT_EQ(gpu_->count("cuLaunchKernel"), 1u);
  EXPECT_EQ(gpu_->count("cuEventRecord"), 1u) << "the warm-up launch is waited for";
}

// A warm-up launch that does not finish (the GPU busy for 2 s) leaves the writer out; its
// ring stays allocated (the kernel may still read it), with a WARN saying so.
TEST_F(Gdr, GpuWriterWhoseFirstKernelDoesNotFinishIsNotUsed) {
  configure(DataPolicy::None);
  void* r = virtualRecv();
  gpu_->complete = false;  // events never complete
  auto& [ll, ll128, simple] = registered(r, nccl::NCCL_PTR_CUDA);
  gpu_->complete = true;
  waitDone(recvPost(r, 0, ll.at(0), kLLStep));
  EXPECT_EQ(gpu_->count("cuMemsetD2D32Async"), 1u);
  {
    std::lock_guard lock(captured_log_mu);
    EXPECT_NE(captured_log.find("did not finish within 2 s"), std::string::npos) << captured_log;
    EXPECT_NE(captured_log.find("is left allocated"), std::string::npos) << captured_log;
  }
  EXPECT_EQ(freeLeftHostAllocs(), 1u) << "the ring, left allocated on purpose";
  // The next connection does not try again (each would wait 2 s more).
  gpu_->complete = false;
  const auto t0 = std::chrono::steady_clock::now();
  void* r2 = virtualRecv();
  (void)registered(r2, nccl::NCCL_PTR_CUDA);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(500));
  EXPECT_EQ(gpu_->count("cuLaunchKernel"), 1u);
  gpu_->complete = true;
}

// While the kernel runs (here: launched, not yet started) posts only add commands; the
// receives still complete at their modelled time (the GPU polls the flags itself).
TEST_F(Gdr, GpuWriterLaunchesOnlyWhileItsKernelIsNotRunning) {
  configure(DataPolicy::None);
  void* r = virtualRecv();
  auto& [ll, ll128, simple] = registered(r, nccl::NCCL_PTR_CUDA);
  gpu_->kernel_runs = false;
  for (int i = 0; i < 3; ++i)
    waitDone(recvPost(r, 0, ll.at(static_cast<std::size_t>(i) * kLLStep), kLLStep));
  EXPECT_EQ(gpu_->count("cuLaunchKernel"), 2u) << "at registration, then at the first post";
  std::uint32_t line[4];
  std::memcpy(line, ll.at(16), 16);
  EXPECT_EQ(line[1], 0xA5A5A5A5u) << "not written before the kernel ran";
}

// A writer that has only stored flags (no copy posted yet) launches one block (helpers are
// for copies), with the chunk rounded down to 16 bytes and each launch's number from 1: a
// helper returns when the leader of its own launch left, never on an earlier launch's word.
// (RealIpcWriter: a copy's launch brings CRYSTAL_GPU_WRITER_BLOCKS.)
TEST_F(Gdr, GpuWriterOfFlagsLaunchesOneBlockWithTheChunkAndNumberedLaunches) {
  ::setenv("CRYSTAL_GPU_WRITER_BLOCKS", "5", 1);
  ::setenv("CRYSTAL_GPU_COPY_CHUNK", "32775", 1);
  configure(DataPolicy::None);
  void* r = virtualRecv();
  auto& [ll, ll128, simple] = registered(r, nccl::NCCL_PTR_CUDA);
  waitDone(recvPost(r, 0, ll.at(0), kLLStep));
  ::unsetenv("CRYSTAL_GPU_WRITER_BLOCKS");
  ::unsetenv("CRYSTAL_GPU_COPY_CHUNK");
  const std::vector<FakeCall> launches = gpu_->named("cuLaunchKernel");
  ASSERT_EQ(launches.size(), 2u) << "the warm-up, then the post";
  for (std::size_t i = 0; i < launches.size(); ++i) {
    EXPECT_EQ(launches[i].rows, 1u) << "blocks: no copy yet";
    EXPECT_EQ(launches[i].bytes, 32768u) << "chunk";
    EXPECT_EQ(launches[i].value, i + 1) << "launch number";
  }
}

// A blocks count out of range leaves the writer out with a line that names the variable; the
// flags go through the driver.
TEST_F(Gdr, GpuWriterBlocksOutOfRangeIsNamedAndTheDriverWrites) {
  ::setenv("CRYSTAL_GPU_WRITER_BLOCKS", "0", 1);
  configure(DataPolicy::None);
  void* r = virtualRecv();
  auto& [ll, ll128, simple] = registered(r, nccl::NCCL_PTR_CUDA);
  waitDone(recvPost(r, 0, ll.at(0), kLLStep));
  ::unsetenv("CRYSTAL_GPU_WRITER_BLOCKS");
  EXPECT_EQ(gpu_->count("cuLaunchKernel"), 0u);
  EXPECT_EQ(gpu_->count("cuMemsetD2D32Async"), 1u);
  std::lock_guard lock(captured_log_mu);
  EXPECT_NE(captured_log.find("CRYSTAL_GPU_WRITER_BLOCKS=0: must be 1 to 64"), std::string::npos)
      << captured_log;
}

// A command the kernel has not run within the watchdog's time gets one WARN with the
// writer's state (a kernel that never started shows in NCCL's log, not as silence).
TEST_F(Gdr, GpuWriterWatchdogWarnsOnceWithItsState) {
  configure(DataPolicy::None);
  plugin::GpuWriter::setStallWarnNsForTesting(50'000'000);  // 50 ms
  void* r = virtualRecv();
  auto& [ll, ll128, simple] = registered(r, nccl::NCCL_PTR_CUDA);
  plugin::GpuWriter::setStallWarnNsForTesting(0);
  gpu_->kernel_runs = false;
  waitDone(recvPost(r, 0, ll.at(0), kLLStep));
  waitDone(recvPost(r, 0, ll.at(kLLStep), kLLStep));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::lock_guard lock(captured_log_mu);
  const auto at = captured_log.find("GPU writer: a command has waited");
  ASSERT_NE(at, std::string::npos) << captured_log;
  EXPECT_NE(captured_log.find("2 commands posted, 0 run by the kernel, 2 kernel launches", at),
            std::string::npos)
      << captured_log;
  EXPECT_EQ(captured_log.find("GPU writer: a command has waited", at + 1), std::string::npos)
      << "once";
}

// A full ring (the kernel not running for 1024 commands) never blocks NCCL's proxy: the
// next flags go through the driver.
TEST_F(Gdr, FullGpuWriterRingFallsBackToTheDriver) {
  configure(DataPolicy::None);
  void* r = virtualRecv();
  auto& [ll, ll128, simple] = registered(r, nccl::NCCL_PTR_CUDA);
  gpu_->kernel_runs = false;
  for (std::size_t i = 0; i < plugin::writer_ring::kSize; ++i)
    waitDone(recvPost(r, 0, ll.at((i % 8) * kLLStep), kLLStep));
  EXPECT_EQ(gpu_->count("cuMemsetD2D32Async"), 0u);
  waitDone(recvPost(r, 0, ll.at(0), kLLStep));  // the 1025th: step 1024 -> flag 1025
  const auto m = gpu_->named("cuMemsetD2D32Async");
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].value, 1025u);
}

// A kernel image that does not load on the GPU: one INFO line, then the driver path.
TEST_F(Gdr, GpuWriterThatDoesNotLoadFallsBackToTheDriverAndSaysWhy) {
  configure(DataPolicy::None);
  gpu_->module_loads = false;
  void* r = virtualRecv();
  auto& [ll, ll128, simple] = registered(r, nccl::NCCL_PTR_CUDA);
  waitDone(recvPost(r, 0, ll.at(0), kLLStep));
  EXPECT_EQ(gpu_->count("cuMemsetD2D32Async"), 1u);
  EXPECT_EQ(gpu_->count("cuLaunchKernel"), 0u);
  std::lock_guard lock(captured_log_mu);
  EXPECT_NE(captured_log.find("GPU writer not used: its kernel does not load on this GPU"),
            std::string::npos)
      << captured_log;
}

// No CUDA driver in the process: registering a GPU buffer still succeeds (the writer is an
// optimisation), and a Simple receive under none, which needs no driver, completes.
TEST_F(Gdr, NoDriverLeavesTheGpuWriterOutWithoutFailingRegistration) {
  configure(DataPolicy::None);
  void* r = virtualRecv();
  plugin::cuda::setDriverForTesting(nullptr, "libcuda-crystal-absent.so.1");
  auto& [ll, ll128, simple] = registered(r, nccl::NCCL_PTR_CUDA);
  waitDone(recvPost(r, 2, simple.at(0), kSimpleStep));
  {
    std::lock_guard lock(captured_log_mu);
    EXPECT_NE(
        captured_log.find("GPU writer not used: cannot load libcuda-crystal-absent.so.1"),
        std::string::npos)
        << captured_log;
  }
  installFakeDriver();  // for the fixture's close checks
}

// Zero and mirror keep their flags on the DeviceQueue's stream (data first, then flags).
TEST_F(Gdr, ZeroKeepsItsFlagsOnTheDriverPath) {
  configure(DataPolicy::Zero);
  void* r = virtualRecv();
  auto& [ll, ll128, simple] = registered(r, nccl::NCCL_PTR_CUDA);
  waitDone(recvPost(r, 0, ll.at(0), kLLStep));
  EXPECT_EQ(gpu_->count("cuLaunchKernel"), 0u);
  EXPECT_EQ(gpu_->count("cuMemsetD2D32Async"), 1u);
}

// All comms write through one plugin stream per CUDA context: streams share the GPU's few
// hardware queues (CUDA_DEVICE_MAX_CONNECTIONS), and a plugin stream behind NCCL's spinning
// kernel in one of them never runs (the 16-channel hang on the H200, 2026-12-03). The
// stream goes when the last comm that used it closes.
TEST_F(Gdr, CommsShareOnePluginStream) {
  configure(DataPolicy::None);
  ::setenv("CRYSTAL_GPU_WRITER", "0", 1);  // the driver path
  void* a = virtualRecv();
  void* b = virtualRecv();
  auto& la = registered(a, nccl::NCCL_PTR_CUDA);
  auto& lb = registered(b, nccl::NCCL_PTR_CUDA);
  waitDone(recvPost(a, 0, la.ll.at(0), kLLStep));
  waitDone(recvPost(b, 0, lb.ll.at(0), kLLStep));
  const auto m = gpu_->named("cuMemsetD2D32Async");
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(gpu_->live_streams, 1);
  EXPECT_EQ(net::closeRecv(a), ncclSuccess);
  recvs_.erase(std::find(recvs_.begin(), recvs_.end(), a));
  EXPECT_EQ(gpu_->live_streams, 1) << "still used by the other comm";
  EXPECT_EQ(net::closeRecv(b), ncclSuccess);
  recvs_.erase(std::find(recvs_.begin(), recvs_.end(), b));
  EXPECT_EQ(gpu_->live_streams, 0);
}

TEST_F(Gdr, ZeroSimpleIsZeroedWhenPostedAndCompletionWaitsForTheGpu) {
  configure(DataPolicy::Zero);
  void* r = virtualRecv();
  auto& [ll, ll128, simple] = registered(r, nccl::NCCL_PTR_CUDA);
  gpu_->complete = false;
  void* req = recvPost(r, 2, simple.at(kSimpleStep), kSimpleStep);
  const auto z = gpu_->named("cuMemsetD8Async");
  ASSERT_EQ(z.size(), 1u) << "zeroed at irecv, not at the modelled arrival";
  EXPECT_EQ(z[0].dst, reinterpret_cast<std::uintptr_t>(simple.at(kSimpleStep)));
  EXPECT_EQ(z[0].bytes, kSimpleStep);
  EXPECT_EQ(z[0].value, 0u);
  stillPendingFor(req, 20);  // far past the modelled arrival (a few us)
  gpu_->complete = true;
  waitDone(req);
  EXPECT_EQ(simple.p.get()[kSimpleStep], std::byte{0});
  EXPECT_EQ(gpu_->count("cuMemsetD8Async"), 1u);
}

// A receive that stays pending past the emulation's timeout says, once, what it waits for
// (here its GPU writes), so a hang shows in NCCL's log instead of as silence.
TEST_F(Gdr, PendingReceiveWarnsOnceWhatItWaitsFor) {
  configure(DataPolicy::Zero, true, /*timeout_s=*/0.05);
  void* r = virtualRecv();
  auto& [ll, ll128, simple] = registered(r, nccl::NCCL_PTR_CUDA);
  gpu_->complete = false;
  void* req = recvPost(r, 2, simple.at(0), kSimpleStep);
  stillPendingFor(req, 120);
  std::string log;
  {
    std::lock_guard lock(captured_log_mu);
    log = captured_log;
  }
  EXPECT_NE(log.find("has waited"), std::string::npos) << log;
  EXPECT_NE(log.find("its GPU writes"), std::string::npos) << log;
  std::size_t warnings = 0;
  for (std::size_t at = log.find("has waited"); at != std::string::npos;
       at = log.find("has waited", at + 1))
    ++warnings;
  EXPECT_EQ(warnings, 1u) << "once per comm";
  gpu_->complete = true;
  waitDone(req);
}

TEST_F(Gdr, ZeroLL128ZeroesDataThenWritesBothFlagHalves) {
  configure(DataPolicy::Zero);
  void* r = virtualRecv();
  auto& [ll, ll128, simple] = registered(r, nccl::NCCL_PTR_CUDA);
  waitDone(recvPost(r, 1, ll128.at(0), kLL128Step));  // step 0 -> flag 1
  ASSERT_EQ(gpu_->calls.size(), 2u) << "memset data, flag low halves; no event (LL128)";
  EXPECT_EQ(gpu_->calls[0].name, "cuMemsetD8Async");
  EXPECT_EQ(gpu_->calls[0].bytes, kLL128Step);
  EXPECT_EQ(gpu_->calls[1].name, "cuMemsetD2D32Async");
  EXPECT_EQ(gpu_->calls[1].dst, reinterpret_cast<std::uintptr_t>(ll128.at(120)));
  EXPECT_EQ(gpu_->calls[1].pitch, 128u);
  EXPECT_EQ(gpu_->calls[1].rows, kLL128Step / 128);
  EXPECT_EQ(gpu_->calls[1].value, 1u);
  for (std::size_t line = 0; line < kLL128Step / 128; ++line) {
    std::uint64_t w[16];
    std::memcpy(w, ll128.at(line * 128), 128);
    EXPECT_EQ(w[15], 1u);
    EXPECT_EQ(w[3], 0u);
  }
}

// Mirror: the real rank's Simple send lies in GPU memory (GDR read): the paired receive
// copies it device to device, and the send completes only after that copy read it.
TEST_F(Gdr, MirrorSimpleCopiesDeviceToDeviceAndHoldsTheSend) {
  configure(DataPolicy::Mirror);
  void* s = virtualSend();
  void* r = virtualRecv();
  auto& [sll, sll128, ssimple] = registered(s, nccl::NCCL_PTR_CUDA);
  auto& [ll, ll128, simple] = registered(r, nccl::NCCL_PTR_CUDA);
  for (std::size_t i = 0; i < kSimpleStep; ++i) ssimple.p.get()[i] = std::byte(i * 7);
  void* sreq = sendPost(s, 2, ssimple.at(0), kSimpleStep);
  gpu_->complete = false;
  void* rreq = recvPost(r, 2, simple.at(0), kSimpleStep);
  stillPendingFor(rreq, 5);  // due, copy enqueued, not finished
  const auto c = gpu_->named("cuMemcpyDtoDAsync");
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].dst, reinterpret_cast<std::uintptr_t>(simple.at(0)));
  EXPECT_EQ(c[0].src, reinterpret_cast<std::uintptr_t>(ssimple.at(0)));
  EXPECT_EQ(c[0].bytes, kSimpleStep);
  stillPendingFor(sreq, 5);  // the copy still reads the send buffer
  gpu_->complete = true;
  waitDone(rreq);
  waitDone(sreq);
  EXPECT_EQ(std::memcmp(simple.p.get(), ssimple.p.get(), kSimpleStep), 0);
  EXPECT_EQ(gpu_->count("cuMemcpyDtoH"), 0u) << "never through host memory";
}

// Mirror LL: NCCL keeps LL send buffers in host memory; the receive's lines (the send's data,
// this receive's flags) are built in pinned staging and copied to the GPU in one piece.
TEST_F(Gdr, MirrorLLFromHostSendIsStagedAndCopiedToTheGpu) {
  configure(DataPolicy::Mirror);
  void* s = virtualSend();
  void* r = virtualRecv();
  Buffer sll(8 * kLLStep), sll128(8 * kLL128Step), ssimple(8 * kSimpleStep);
  Buffer ll(8 * kLLStep), ll128(8 * kLL128Step), simple(8 * kSimpleStep);
  registerProtocols(s, {&sll}, nccl::NCCL_PTR_HOST);
  registerProtocols(s, {&sll128, &ssimple}, nccl::NCCL_PTR_CUDA);
  registerProtocols(r, {&ll, &ll128, &simple}, nccl::NCCL_PTR_CUDA);
  std::vector<std::uint64_t> payload(kLLStep / 16);
  for (std::size_t i = 0; i < payload.size(); ++i)
    payload[i] = 0x1111111100000000ull * (i % 15) + i;
  plugin::proto::encodeLL(sll.at(0), payload.data(), payload.size() * 8, 40);  // sender's step 40
  void* sreq = sendPost(s, 0, sll.at(0), kLLStep);
  waitDone(recvPost(r, 0, ll.at(0), kLLStep));  // receiver's step 0 -> flag 1
  waitDone(sreq);
  const auto h = gpu_->named("cuMemcpyHtoDAsync");
  ASSERT_EQ(h.size(), 1u);
  EXPECT_EQ(h[0].dst, reinterpret_cast<std::uintptr_t>(ll.at(0)));
  EXPECT_EQ(h[0].bytes, kLLStep);
  EXPECT_EQ(gpu_->count("cuMemHostAlloc"), 1u);
  for (std::size_t i = 0; i < payload.size(); ++i) {
    std::uint32_t line[4];
    std::memcpy(line, ll.at(16 * i), 16);
    EXPECT_EQ(line[1], 1u);
    EXPECT_EQ(line[3], 1u);
    EXPECT_EQ(line[0] | (std::uint64_t{line[2]} << 32), payload[i]) << "line " << i;
  }
}

// Mirror LL128 from a GPU send buffer: 120 of every 128 bytes copied device to device (the
// sender's flags stay behind), then both halves of this receive's flags.
TEST_F(Gdr, MirrorLL128CopiesLineDataOnTheGpuThenWritesFlags) {
  configure(DataPolicy::Mirror);
  void* s = virtualSend();
  void* r = virtualRecv();
  Buffer sll(8 * kLLStep), sll128(8 * kLL128Step), ssimple(8 * kSimpleStep);
  Buffer ll(8 * kLLStep), ll128(8 * kLL128Step), simple(8 * kSimpleStep);
  registerProtocols(s, {&sll}, nccl::NCCL_PTR_HOST);
  registerProtocols(s, {&sll128, &ssimple}, nccl::NCCL_PTR_CUDA);
  registerProtocols(r, {&ll, &ll128, &simple}, nccl::NCCL_PTR_CUDA);
  for (std::size_t i = 0; i < kLL128Step; ++i) sll128.p.get()[i] = std::byte((i * 5 + 1) & 0xFF);
  void* sreq = sendPost(s, 1, sll128.at(0), kLL128Step);
  gpu_->complete = false;
  void* rreq = recvPost(r, 1, ll128.at(0), kLL128Step);  // step 0 -> flag 1
  stillPendingFor(rreq, 5);
  stillPendingFor(sreq, 5);  // the 2D copy still reads the send buffer
  gpu_->complete = true;
  waitDone(rreq);
  waitDone(sreq);
  const auto c = gpu_->named("cuMemcpy2DAsync");
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].src, reinterpret_cast<std::uintptr_t>(sll128.at(0)));
  EXPECT_EQ(c[0].dst, reinterpret_cast<std::uintptr_t>(ll128.at(0)));
  EXPECT_EQ(c[0].bytes, 120u);
  EXPECT_EQ(c[0].pitch, 128u);
  EXPECT_EQ(c[0].rows, kLL128Step / 128);
  EXPECT_EQ(gpu_->named("cuMemsetD2D32Async").size(), 2u) << "high and low flag halves";
  expectLL128LinesCopied(ll128, sll128, 1);
}

// Mirror LL128 from a host send buffer (GDR read off): lines staged with flag 0, one H2D
// copy, then the flags, so a copy engine writing out of order cannot expose a flag early.
TEST_F(Gdr, MirrorLL128FromHostCopiesLinesThenFlags) {
  configure(DataPolicy::Mirror);
  void* s = virtualSend();
  void* r = virtualRecv();
  auto& [sll, sll128, ssimple] = registered(s, nccl::NCCL_PTR_HOST);
  auto& [ll, ll128, simple] = registered(r, nccl::NCCL_PTR_CUDA);
  for (std::size_t i = 0; i < kLL128Step; ++i) sll128.p.get()[i] = std::byte((i * 3 + 2) & 0xFF);
  void* sreq = sendPost(s, 1, sll128.at(0), kLL128Step);
  waitDone(recvPost(r, 1, ll128.at(0), kLL128Step));
  waitDone(sreq);
  ASSERT_GE(gpu_->calls.size(), 3u);
  std::vector<std::string> order;
  for (const auto& c : gpu_->calls)
    if (c.name != "cuMemHostAlloc" && c.name != "cuEventRecord") order.push_back(c.name);
  EXPECT_EQ(order, (std::vector<std::string>{"cuMemcpyHtoDAsync", "cuMemsetD2D32Async",
                                             "cuMemsetD2D32Async"}));
  expectLL128LinesCopied(ll128, sll128, 1);
}

// Two real ranks with GPU buffers: bytes go GPU -> pinned staging -> TCP -> staging -> GPU,
// bit-exact, each side with one async copy; the receive completes only after its copy.
TEST_F(Gdr, RealPeersStageGpuBuffersThroughPinnedHostMemory) {
  configure(DataPolicy::Zero);
  tcpOnly();
  live::NetHandle h;
  (void)acceptOf(live::PeerKind::Real, &h);
  char bytes[live::kNcclHandleSize] = {};
  std::memcpy(bytes, &h, sizeof h);
  void* s = nullptr;
  void* r = nullptr;
  for (int i = 0; i < 1'000'000 && (!s || !r); ++i) {
    if (!s) {
      ASSERT_EQ(net::connect(ctx_, 0, bytes, &s, nullptr), ncclSuccess);
    }
    if (!r) {
      ASSERT_EQ(net::accept(listens_.back(), &r, nullptr), ncclSuccess);
    }
  }
  ASSERT_TRUE(s && r);
  sends_.push_back(s);
  recvs_.push_back(r);
  constexpr std::size_t kBytes = 3 * 65536 + 13;
  Buffer src(kBytes), dst(kBytes);
  for (std::size_t i = 0; i < kBytes; ++i) src.p.get()[i] = std::byte((i * 131 + 7) & 0xFF);
  registerProtocols(s, {&src}, nccl::NCCL_PTR_CUDA);
  registerProtocols(r, {&dst}, nccl::NCCL_PTR_CUDA);
  gpu_->complete = false;
  void* sreq = sendPost(s, 0, src.at(0), kBytes);
  void* rreq = recvPost(r, 0, dst.at(0), kBytes);
  const auto d2h = gpu_->named("cuMemcpyDtoHAsync");
  ASSERT_EQ(d2h.size(), 1u);
  EXPECT_EQ(d2h[0].src, reinterpret_cast<std::uintptr_t>(src.at(0)));
  EXPECT_EQ(d2h[0].bytes, kBytes);
  stillPendingFor(sreq, 5);  // the staging copy is not done: nothing may leave
  stillPendingFor(rreq, 5);
  gpu_->complete = true;
  waitDone(sreq);
  waitDone(rreq);
  const auto h2d = gpu_->named("cuMemcpyHtoDAsync");
  ASSERT_EQ(h2d.size(), 1u);
  EXPECT_EQ(h2d[0].dst, reinterpret_cast<std::uintptr_t>(dst.at(0)));
  EXPECT_EQ(h2d[0].bytes, kBytes);
  EXPECT_EQ(std::memcmp(src.p.get(), dst.p.get(), kBytes), 0);
}

// The `two` stall on the H200 (4 MiB all-reduce after 1 KiB..256 KiB): NCCL's sizes on one
// real<->real connection grow, and staging that grew by cuMemFreeHost + cuMemHostAlloc on
// the proxy thread waits for the GPU, i.e. for the kernel that waits for this proxy. Steps
// of growing sizes, several in flight at distinct offsets, must stay bit-exact and never
// free pinned memory before close; staging is one pinned twin per registered GPU region.
TEST_F(Gdr, RealPeersNeverFreePinnedMemoryWhileSizesGrow) {
  configure(DataPolicy::None);
  tcpOnly();
  void *s = nullptr, *r = nullptr;
  realPair(&s, &r);
  constexpr std::size_t kRegion = 1 << 20, kSteps = 4, kStep = kRegion / kSteps;
  Buffer src(kRegion), dst(kRegion);
  registerProtocols(s, {&src}, nccl::NCCL_PTR_CUDA);
  registerProtocols(r, {&dst}, nccl::NCCL_PTR_CUDA);
  // One twin per side, allocated at regMr (connection setup), none on the data path.
  EXPECT_EQ(gpu_->count("cuMemHostAlloc"), 2u);
  const std::size_t allocs_before = gpu_->count("cuMemHostAlloc");
  std::uint32_t seed = 1;
  for (std::size_t size : {std::size_t{1024}, std::size_t{16384}, kStep / 4, kStep}) {
    for (std::size_t i = 0; i < kRegion; ++i) {
      seed = seed * 1664525u + 1013904223u;
      src.p.get()[i] = std::byte(seed >> 24);
    }
    std::memset(dst.p.get(), 0xA5, kRegion);
    std::vector<void*> sreq, rreq;
    for (std::size_t k = 0; k < kSteps; ++k) {  // NCCL-like: all steps of a buffer in flight
      rreq.push_back(recvPost(r, 0, dst.at(k * kStep), kStep));
      sreq.push_back(sendPost(s, 0, src.at(k * kStep), size));
    }
    for (std::size_t k = 0; k < kSteps; ++k) {
      waitDone(sreq[k]);
      waitDone(rreq[k]);
      EXPECT_EQ(std::memcmp(src.at(k * kStep), dst.at(k * kStep), size), 0)
          << "step " << k << " of " << size << " bytes";
    }
  }
  EXPECT_EQ(gpu_->count("cuMemFreeHost"), 0u) << "pinned memory freed on the data path";
  EXPECT_EQ(gpu_->count("cuMemHostAlloc") - allocs_before, 0u) << "allocated on the data path";
}

// LL128 from a real sender into GPU memory (NCCL_PROTO=LL128): the staged lines carry the
// sender's flags, so they are copied with flag 0 and the flags are set after, high half then
// low half, in stream order; the result is the sender's lines bit-exact.
TEST_F(Gdr, RealLL128IntoGpuCopiesLinesWithFlagZeroThenTheSendersFlags) {
  configure(DataPolicy::None);
  tcpOnly();
  void *s = nullptr, *r = nullptr;
  realPair(&s, &r);
  constexpr std::size_t kLines = 10, kBytes = kLines * 128;
  constexpr std::uint64_t kFlag = 0x0000000500000007ull;
  Buffer src(kBytes), ll(kLLStep), ll128(kBytes), simple(kSimpleStep);
  for (std::size_t i = 0; i < kBytes; ++i) src.p.get()[i] = std::byte((i * 29 + 3) & 0xFF);
  for (std::size_t l = 0; l < kLines; ++l) std::memcpy(src.at(l * 128 + 120), &kFlag, 8);
  registerProtocols(s, {&src}, nccl::NCCL_PTR_HOST);
  registerProtocols(r, {&ll, &ll128, &simple}, nccl::NCCL_PTR_CUDA);
  void* rreq = recvPost(r, 1, ll128.at(0), kBytes);
  void* sreq = sendPost(s, 0, src.at(0), kBytes);
  waitDone(sreq);
  waitDone(rreq);
  EXPECT_EQ(std::memcmp(src.p.get(), ll128.p.get(), kBytes), 0);
  std::vector<std::string> order;
  for (const FakeCall& c : gpu_->calls)
    if (c.name == "cuMemcpyHtoDAsync" || c.name == "cuMemsetD2D32Async") order.push_back(c.name);
  ASSERT_EQ(order, (std::vector<std::string>{"cuMemcpyHtoDAsync", "cuMemsetD2D32Async",
                                             "cuMemsetD2D32Async"}));
  const auto sets = gpu_->named("cuMemsetD2D32Async");
  const auto base = reinterpret_cast<std::uintptr_t>(ll128.at(0));
  EXPECT_EQ(sets[0].dst, base + 124);
  EXPECT_EQ(sets[0].value, 5u);
  EXPECT_EQ(sets[1].dst, base + 120);
  EXPECT_EQ(sets[1].value, 7u);
  for (const FakeCall& c : sets) {
    EXPECT_EQ(c.pitch, 128u);
    EXPECT_EQ(c.rows, kLines);
  }
}

// A receive that waits on a real peer past the emulation timeout is named once, as a WARN
// through NCCL's logger (which connection, which step, what it waits for), and keeps waiting:
// the bytes that come later still complete it.
TEST_F(Gdr, RealReceiveWaitingPastTheTimeoutWarnsOnceAndStillCompletes) {
  configure(DataPolicy::None, true, /*timeout_s=*/0.05);
  tcpOnly();
  void *s = nullptr, *r = nullptr;
  realPair(&s, &r);
  Buffer src(8192), dst(8192);
  registerProtocols(s, {&src}, nccl::NCCL_PTR_CUDA);
  registerProtocols(r, {&dst}, nccl::NCCL_PTR_CUDA);
  void* rreq = recvPost(r, 0, dst.at(0), 8192);
  stillPendingFor(rreq, 150);  // nothing sent: past the 50 ms timeout, then some more
  std::string log;
  {
    std::lock_guard lock(captured_log_mu);
    log = captured_log;
  }
  const auto first = log.find("has waited");
  ASSERT_NE(first, std::string::npos) << log;
  EXPECT_EQ(log.find("has waited", first + 1), std::string::npos) << "warned more than once";
  EXPECT_NE(log.find("receive from a real peer (comm"), std::string::npos) << log;
  EXPECT_NE(log.find("step 0"), std::string::npos) << log;
  EXPECT_NE(log.find("missing tag 1 (<= 8192 bytes)"), std::string::npos) << log;
  EXPECT_NE(log.find("for bytes from the real peer"), std::string::npos) << log;
  std::memset(src.p.get(), 0x3C, 8192);
  void* sreq = sendPost(s, 0, src.at(0), 8192);
  waitDone(sreq);
  waitDone(rreq);
  EXPECT_EQ(std::memcmp(src.p.get(), dst.p.get(), 8192), 0);
}

// The same for a receive whose bytes arrived but whose host-to-device copy the GPU has not
// run: the warning says so (a GPU that does not run our copy stream is then visible).
TEST_F(Gdr, RealReceiveWaitingForItsGpuCopyPastTheTimeoutSaysSo) {
  configure(DataPolicy::None, true, /*timeout_s=*/0.05);
  tcpOnly();
  void *s = nullptr, *r = nullptr;
  realPair(&s, &r);
  Buffer src(4096), dst(4096);
  registerProtocols(s, {&src}, nccl::NCCL_PTR_HOST);
  registerProtocols(r, {&dst}, nccl::NCCL_PTR_CUDA);
  gpu_->complete = false;
  void* rreq = recvPost(r, 0, dst.at(0), 4096);
  void* sreq = sendPost(s, 0, src.at(0), 4096);
  waitDone(sreq);
  stillPendingFor(rreq, 150);
  {
    std::lock_guard lock(captured_log_mu);
    EXPECT_NE(captured_log.find("for the host-to-device copy of its staged bytes"),
              std::string::npos)
        << captured_log;
  }
  gpu_->complete = true;
  waitDone(rreq);
}

TEST_F(Gdr, DriverThatCannotBeLoadedIsASystemErrorNamingLibcuda) {
  configure(DataPolicy::None);
  ::setenv("CRYSTAL_GPU_WRITER", "0", 1);  // the driver path
  void* r = virtualRecv();
  auto& [ll, ll128, simple] = registered(r, nccl::NCCL_PTR_CUDA);
  plugin::cuda::setDriverForTesting(nullptr, "libcuda-crystal-absent.so.1");
  void* req = recvPost(r, 0, ll.at(0), kLLStep);
  nccl::ncclResult_t rc = ncclSuccess;
  int done = 0;
  for (int i = 0; i < 1'000'000 && rc == ncclSuccess && !done; ++i)
    rc = net::test(req, &done, nullptr);
  EXPECT_EQ(rc, nccl::ncclSystemError);
  std::lock_guard lock(captured_log_mu);
  EXPECT_NE(captured_log.find("libcuda-crystal-absent.so.1"), std::string::npos) << captured_log;
  EXPECT_NE(captured_log.find("CRYSTAL_GDR=0"), std::string::npos);
}

TEST_F(Gdr, NoContextOnTheCallingThreadIsASystemError) {
  configure(DataPolicy::None);
  ::setenv("CRYSTAL_GPU_WRITER", "0", 1);  // the driver path
  void* r = virtualRecv();
  auto& [ll, ll128, simple] = registered(r, nccl::NCCL_PTR_CUDA);
  gpu_->has_context = false;
  void* req = recvPost(r, 0, ll.at(0), kLLStep);
  nccl::ncclResult_t rc = ncclSuccess;
  int done = 0;
  for (int i = 0; i < 1'000'000 && rc == ncclSuccess && !done; ++i)
    rc = net::test(req, &done, nullptr);
  EXPECT_EQ(rc, nccl::ncclSystemError);
}

}  // namespace
}  // namespace crystal::test
