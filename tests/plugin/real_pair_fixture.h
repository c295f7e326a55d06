// Fixtures of the real<->real tests (real_shm_test.cc, real_ipc_test.cc): two real ranks as
// comms of this process over loopback TCP, GPU buffers host buffers the fake driver
// (fake_cuda_driver.h) copies at once while their events say what the test says; and a raw
// socket playing a malformed peer.
#pragma once

#include <fcntl.h>
#include <fmt/core.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "captured_log.h"
#include "crystal/live/handle.h"
#include "fake_cuda_driver.h"
#include "net_api.h"
#include "real_comm.h"
#include "shm_segment.h"
#include "state.h"

namespace crystal::test {

namespace net = plugin::net;
using nccl::ncclSuccess;
using Clock = std::chrono::steady_clock;

inline std::string logText() { return capturedLog(); }

// A TCP socket of the test playing the other real rank (connect to a plugin listen, or
// accept the plugin's connect).
struct RawPeer {
  int fd = -1;
  ~RawPeer() {
    if (fd >= 0) ::close(fd);
  }
  void writeAll(const void* p, std::size_t n) const {
    ASSERT_EQ(::send(fd, p, n, MSG_NOSIGNAL), static_cast<ssize_t>(n));
  }
  void readAll(void* p, std::size_t n) const {
    auto* c = static_cast<char*>(p);
    for (std::size_t got = 0; got < n;) {
      const ssize_t k = ::recv(fd, c + got, n - got, 0);
      ASSERT_GT(k, 0) << "peer closed: " << std::strerror(errno);
      got += static_cast<std::size_t>(k);
    }
  }
};

class RealPairTest : public ::testing::Test {
 protected:
  void SetUp() override {
    clearCapturedLog();
    gpu_ = &installFakeDriver();
    ::unsetenv("CRYSTAL_SHM");
    ::unsetenv("CRYSTAL_IPC");
    ::unsetenv("CRYSTAL_DATA");
    ::unsetenv("CRYSTAL_GDR");
    ::unsetenv("CRYSTAL_TIMEOUT");
    // GPU-to-GPU steps on the plugin's stream, as driver copies the tests can see; the GPU
    // writer's copies have their own tests (real_ipc_test.cc, RealIpcWriter).
    ::setenv("CRYSTAL_GPU_COPY_MAX", "0", 1);
    Config cfg;
    cfg.emulation.data = DataPolicy::None;
    cfg.emulation.gdr = true;
    cfg.emulation.timeout_s = 60;
    plugin::PluginState::get().configure(cfg);
    ASSERT_EQ(net::init(&ctx_, 0x5348 + ++serial_, nullptr, captureLog, nullptr), ncclSuccess);
  }
  void TearDown() override {
    if (HasFailure()) std::fprintf(stderr, "plugin log:\n%s", logText().c_str());
    for (void* c : sends_) (void)net::closeSend(c);
    for (void* c : recvs_) (void)net::closeRecv(c);
    for (void* c : listens_) (void)net::closeListen(c);
    EXPECT_EQ(net::finalize(ctx_), ncclSuccess);
    // Every registration is undone at close, every stream, event and pinned buffer given back.
    EXPECT_EQ(gpu_->live_host_registers, 0);
    EXPECT_EQ(gpu_->live_host_allocs, 0);
    EXPECT_EQ(gpu_->live_events, 0);
    EXPECT_EQ(gpu_->live_streams, 0);
    // Imported allocations are unmapped, their address ranges and handles given back.
    EXPECT_EQ(gpu_->live_mappings, 0);
    EXPECT_EQ(gpu_->live_reservations, 0);
    EXPECT_EQ(gpu_->live_mem_handles, 0);
    uninstallFakeDriver();
    ::unsetenv("CRYSTAL_SHM");
    ::unsetenv("CRYSTAL_IPC");
    ::unsetenv("CRYSTAL_GPU_COPY_MAX");
    ::unsetenv("CRYSTAL_GPU_ACK");
  }

  live::NetHandle listenHandle(void** l) {
    char bytes[live::kNcclHandleSize] = {};
    EXPECT_EQ(net::listen(ctx_, 0, bytes, l), ncclSuccess);
    listens_.push_back(*l);
    live::NetHandle h;
    EXPECT_TRUE(live::decodeHandle(bytes, h));
    return h;
  }
  // A send and a receive comm of two real ranks of this process.
  void realPair(void** s, void** r) {
    connectPair(ctx_, ctx_, s, r, [](live::NetHandle&) {});
  }
  // A listen on context `ctx_l` connected from `ctx_s` (each a comm of its own process, in
  // two processes), the handle edited by `edit` on its way (a stale handle, say).
  template <typename Edit>
  void connectPair(void* ctx_s, void* ctx_l, void** s, void** r, Edit edit) {
    void* l = nullptr;
    char bytes[live::kNcclHandleSize] = {};
    ASSERT_EQ(net::listen(ctx_l, 0, bytes, &l), ncclSuccess);
    listens_.push_back(l);
    live::NetHandle h;
    ASSERT_TRUE(live::decodeHandle(bytes, h));
    edit(h);
    std::memcpy(bytes, &h, sizeof h);
    *s = *r = nullptr;
    for (int i = 0; i < 1'000'000 && (!*s || !*r); ++i) {
      if (!*s) {
        ASSERT_EQ(net::connect(ctx_s, 0, bytes, s, nullptr), ncclSuccess);
      }
      if (!*r) {
        ASSERT_EQ(net::accept(l, r, nullptr), ncclSuccess);
      }
    }
    ASSERT_TRUE(*s && *r);
    sends_.push_back(*s);
    recvs_.push_back(*r);
  }
  void* reg(void* c, Buffer& b, int type) { return reg(c, b.p.get(), b.size, type); }
  void* reg(void* c, void* p, std::size_t size, int type) {
    void* mh = nullptr;
    EXPECT_EQ(net::regMr(c, p, size, type, &mh), ncclSuccess);
    mh_[c] = mh;
    return mh;
  }
  void* recvPost(void* c, void* data, std::size_t size, int tag = 1) {
    void* mh = mh_[c];
    void* req = nullptr;
    EXPECT_EQ(net::irecv(c, 1, &data, &size, &tag, &mh, nullptr, &req), ncclSuccess);
    EXPECT_NE(req, nullptr);
    return req;
  }
  void* sendPost(void* c, void* data, std::size_t size, int tag = 1) {
    void* req = nullptr;
    EXPECT_EQ(net::isend(c, data, size, tag, mh_[c], nullptr, &req), ncclSuccess);
    EXPECT_NE(req, nullptr);
    return req;
  }
  // `src` registered on the send comm and `dst` on the receive comm, both as `type`.
  void regBoth(void* s, void* r, Buffer& src, Buffer& dst, int type) {
    (void)reg(s, src, type);
    (void)reg(r, dst, type);
  }
  // `steps` receives of `step` bytes at dst + k * step and sends of `size` (default: `step`)
  // from src + k * step, all in flight, progressed together; returns how many of the
  // 2 * steps requests completed.
  std::size_t exchangeSteps(void* s, void* r, Buffer& src, Buffer& dst, std::size_t steps,
                            std::size_t step, std::size_t size = 0) {
    std::vector<void*> reqs;
    for (std::size_t k = 0; k < steps; ++k) {
      reqs.push_back(recvPost(r, dst.at(k * step), step));
      reqs.push_back(sendPost(s, src.at(k * step), size ? size : step));
    }
    return progressAll(reqs);
  }
  // test() every request in turn (as NCCL's proxies do, each side on its own) until all are
  // done or `ms` passed; returns how many are done.
  static std::size_t progressAll(const std::vector<void*>& reqs, long ms = 2000) {
    std::vector<bool> done(reqs.size());
    std::size_t n = 0;
    const auto end = Clock::now() + std::chrono::milliseconds(ms);
    while (n < reqs.size() && Clock::now() < end)
      for (std::size_t i = 0; i < reqs.size(); ++i) {
        if (done[i]) continue;
        int d = 0;
        EXPECT_EQ(net::test(reqs[i], &d, nullptr), ncclSuccess);
        if (d) {
          done[i] = true;
          ++n;
        }
      }
    return n;
  }
  // test() `req` until it fails (bounded); returns the error.
  static nccl::ncclResult_t firstError(void* req) {
    nccl::ncclResult_t rc = ncclSuccess;
    int done = 0;
    const auto end = Clock::now() + std::chrono::seconds(2);
    while (rc == ncclSuccess && !done && Clock::now() < end) rc = net::test(req, &done, nullptr);
    return rc;
  }

  FakeGpu* gpu_ = nullptr;
  void* ctx_ = nullptr;
  static inline int serial_ = 0;
  std::vector<void*> sends_, recvs_, listens_;
  std::map<void*, void*> mh_;
};

class RealPairBadPeer : public RealPairTest {
 protected:
  // The plugin receives on `r_` from the raw socket `peer_`, a receive posted with tag 1.
  void connectRawSender() {
    void* l = nullptr;
    const live::NetHandle h = listenHandle(&l);
    peer_.fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_port = h.port;
    std::memcpy(&sin.sin_addr, h.addr, 4);
    ASSERT_EQ(::connect(peer_.fd, reinterpret_cast<sockaddr*>(&sin), sizeof sin), 0);
    live::Hello hello;
    hello.peer = live::PeerKind::Real;
    hello.listen_id = h.listen_id;
    hello.comm_id = h.comm_id;
    peer_.writeAll(&hello, sizeof hello);
    for (int i = 0; i < 1'000'000 && !r_; ++i) ASSERT_EQ(net::accept(l, &r_, nullptr), ncclSuccess);
    ASSERT_NE(r_, nullptr);
    recvs_.push_back(r_);
    (void)reg(r_, dst_, nccl::NCCL_PTR_HOST);
  }
  void offer(const plugin::ShmSegment& seg, std::uint32_t number) {
    plugin::FrameHeader h;
    h.kind = plugin::FrameKind::ShmOffer;
    h.size = seg.size();
    h.segment = number;
    plugin::ShmOfferBody body;
    std::snprintf(body.name, sizeof body.name, "%s", seg.name().c_str());
    peer_.writeAll(&h, sizeof h);
    peer_.writeAll(&body, sizeof body);
  }
  void shmData(std::uint32_t segment, std::uint64_t offset, std::uint64_t size) {
    plugin::FrameHeader h;
    h.kind = plugin::FrameKind::ShmData;
    h.tag = 1;
    h.segment = segment;
    h.offset = offset;
    h.size = size;
    peer_.writeAll(&h, sizeof h);
  }
  // The bad frame is read by irecv itself or by a later test(): either fails the request.
  void expectRemoteError(const std::string& said) {
    int tag = 1;
    void* data = dst_.at(0);
    std::size_t size = dst_.size;
    void* mh = mh_[r_];
    void* req = nullptr;
    nccl::ncclResult_t rc = net::irecv(r_, 1, &data, &size, &tag, &mh, nullptr, &req);
    if (rc == ncclSuccess) {
      ASSERT_NE(req, nullptr);
      rc = firstError(req);
    }
    EXPECT_EQ(rc, nccl::ncclRemoteError);
    EXPECT_NE(logText().find(said), std::string::npos) << logText();
  }
  RawPeer peer_;
  void* r_ = nullptr;
  Buffer dst_{4096};
};

}  // namespace crystal::test
