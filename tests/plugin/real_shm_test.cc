// Real<->real bytes through shared memory (plugin/real_comm.h "Shared memory"), on the CPU:
// both ranks are comms of this process over loopback TCP, GPU buffers are host buffers the
// fake driver (fake_cuda_driver.h) copies at once while their events say what the test says.
// The route: the sender's twin of each registered GPU region is a POSIX shared-memory segment
// it offers; the receiver maps it and copies out of it; the send completes only once the
// receiver acknowledged that copy. Refused offers and malformed frames or replies from the
// peer (a raw socket here) are covered too.
#include <fcntl.h>
#include <fmt/core.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "crystal/live/handle.h"
#include "fake_cuda_driver.h"
#include "net_api.h"
#include "real_comm.h"
#include "real_pair_fixture.h"
#include "shm_segment.h"
#include "state.h"

namespace crystal::test {
namespace {

using RealShm = RealPairTest;

// GPU buffers on both sides: the sender's device-to-host copy lands in its segment
// (registered once, at regMr), the receiver copies host-to-device straight out of its mapping
// of that segment (registered on first use), no pinned twin for the sender; the receive waits
// for its copy and the send for the receiver's acknowledgement of it.
TEST_F(RealShm, GpuBytesGoFromTheSendersSegmentStraightToTheReceiver) {
  void *s = nullptr, *r = nullptr;
  realPair(&s, &r);
  constexpr std::size_t kBytes = 3 * 65536 + 13;
  Buffer src(kBytes), dst(kBytes);
  src.fill(7);
  regBoth(s, r, src, dst, nccl::NCCL_PTR_CUDA);
  const auto regs = gpu_->named("cuMemHostRegister");
  ASSERT_EQ(regs.size(), 1u) << "the sender's segment, at regMr";
  EXPECT_GE(regs[0].bytes, kBytes);
  EXPECT_EQ(gpu_->count("cuMemHostAlloc"), 1u) << "only the receiver's TCP twin";

  gpu_->complete = false;
  void* rreq = recvPost(r, dst.at(0), kBytes);
  void* sreq = sendPost(s, src.at(0), kBytes);
  const auto d2h = gpu_->named("cuMemcpyDtoHAsync");
  ASSERT_EQ(d2h.size(), 1u);
  EXPECT_EQ(d2h[0].dst, regs[0].dst) << "staged into the segment itself";
  // The staging copy is done; whatever the receiver enqueues next is not.
  gpu_->done_through = gpu_->count("cuEventRecord");
  EXPECT_EQ(progressAll({sreq, rreq}, 100), 0u)
      << "the receive before its copy, the send before the receiver's acknowledgement";
  const auto h2d = gpu_->named("cuMemcpyHtoDAsync");
  ASSERT_EQ(h2d.size(), 1u);
  const auto regs2 = gpu_->named("cuMemHostRegister");
  ASSERT_EQ(regs2.size(), 2u) << "the receiver's mapping, on its first copy";
  EXPECT_EQ(h2d[0].src, regs2[1].dst) << "copied out of the mapping, not through TCP";
  EXPECT_EQ(h2d[0].dst, reinterpret_cast<std::uintptr_t>(dst.at(0)));
  EXPECT_EQ(h2d[0].bytes, kBytes);
  gpu_->complete = true;
  EXPECT_EQ(progressAll({sreq, rreq}), 2u);
  EXPECT_EQ(std::memcmp(src.p.get(), dst.p.get(), kBytes), 0);
}

// The receive whose copy finishes within its own test() (the job's last one: NCCL calls no
// more) acknowledges it before reporting done, so the sender's request completes too.
TEST_F(RealShm, LastReceiveAcknowledgesItsCopyBeforeItReportsDone) {
  void *s = nullptr, *r = nullptr;
  realPair(&s, &r);
  Buffer src(8192), dst(8192);
  src.fill(17);
  regBoth(s, r, src, dst, nccl::NCCL_PTR_CUDA);
  gpu_->complete = false;
  void* rreq = recvPost(r, dst.at(0), 8192);
  void* sreq = sendPost(s, src.at(0), 8192);
  gpu_->done_through = gpu_->count("cuEventRecord");  // the sender's staging copy
  EXPECT_EQ(progressAll({sreq, rreq}, 50), 0u);
  ASSERT_EQ(gpu_->count("cuMemcpyHtoDAsync"), 1u);
  gpu_->done_after_queries = 2;  // not done at the test's first look, done at its second
  EXPECT_EQ(progressAll({rreq}, 50), 1u);
  EXPECT_EQ(progressAll({sreq}, 200), 1u) << "no acknowledgement for the last receive";
  EXPECT_EQ(std::memcmp(src.p.get(), dst.p.get(), 8192), 0);
}

// GPU buffers, steps of growing sizes, all eight in flight at distinct offsets: bit-exact, one
// segment, and no pinned allocation or registration on the data path.
TEST_F(RealShm, StepsInFlightAtTheirOffsetsAreBitExact) {
  void *s = nullptr, *r = nullptr;
  realPair(&s, &r);
  constexpr std::size_t kRegion = 1 << 20, kSteps = 8, kStep = kRegion / kSteps;
  Buffer src(kRegion), dst(kRegion);
  regBoth(s, r, src, dst, nccl::NCCL_PTR_CUDA);
  std::uint32_t seed = 3;
  for (std::size_t size : {std::size_t{1}, std::size_t{4096}, kStep / 3, kStep}) {
    src.fill(seed++);
    std::memset(dst.p.get(), 0xA5, kRegion);
    ASSERT_EQ(exchangeSteps(s, r, src, dst, kSteps, kStep, size), 2 * kSteps) << size << " bytes";
    for (std::size_t k = 0; k < kSteps; ++k)
      EXPECT_EQ(std::memcmp(src.at(k * kStep), dst.at(k * kStep), size), 0)
          << "step " << k << " of " << size << " bytes";
  }
  EXPECT_EQ(gpu_->count("cuMemHostRegister"), 2u) << "the segment, then the receiver's mapping";
  EXPECT_EQ(gpu_->count("cuMemHostAlloc"), 1u) << "the receiver's TCP twin, at regMr";
}

// A buffer registered again at the same address, larger: its sends name the segment their
// staging copy wrote (the new twin), never the first registration's.
TEST_F(RealShm, RegionRegisteredAgainLargerUsesItsOwnSegment) {
  void *s = nullptr, *r = nullptr;
  realPair(&s, &r);
  Buffer src(16384), dst(16384);
  src.fill(23);
  void* first = nullptr;
  ASSERT_EQ(net::regMr(s, src.p.get(), 4096, nccl::NCCL_PTR_CUDA, &first), ncclSuccess);
  (void)reg(r, dst, nccl::NCCL_PTR_CUDA);
  mh_[s] = first;
  void* rreq = recvPost(r, dst.at(0), 4096);
  void* sreq = sendPost(s, src.at(0), 4096);
  ASSERT_EQ(progressAll({sreq, rreq}), 2u);
  ASSERT_EQ(net::deregMr(s, first), ncclSuccess);
  (void)reg(s, src, nccl::NCCL_PTR_CUDA);  // the whole 16 KiB
  src.fill(29);
  std::memset(dst.p.get(), 0, dst.size);
  ASSERT_EQ(exchangeSteps(s, r, src, dst, 2, 8192), 4u);
  EXPECT_EQ(std::memcmp(src.p.get(), dst.p.get(), 16384), 0);
}

// Host send buffers (GDR off, LL) stay on TCP: no segment, no offer, no driver call.
TEST_F(RealShm, HostBuffersStayOnTcp) {
  void *s = nullptr, *r = nullptr;
  realPair(&s, &r);
  Buffer src(65536), dst(65536);
  src.fill(21);
  regBoth(s, r, src, dst, nccl::NCCL_PTR_HOST);
  void* rreq = recvPost(r, dst.at(0), 65536);
  void* sreq = sendPost(s, src.at(0), 65536);
  EXPECT_EQ(progressAll({sreq}, 50), 1u) << "a TCP send completes once written";
  EXPECT_EQ(progressAll({rreq}), 1u);
  EXPECT_EQ(std::memcmp(src.p.get(), dst.p.get(), 65536), 0);
  EXPECT_TRUE(gpu_->calls.empty()) << gpu_->calls.front().name;
}

// The send's buffer may be reused once the send completes, and the receiver reads it from
// the segment: so a send is done only after the receiver copied it out, never on its own.
TEST_F(RealShm, SendCompletesOnlyOnceTheReceiverCopiedItOut) {
  void *s = nullptr, *r = nullptr;
  realPair(&s, &r);
  Buffer src(8192), dst(8192);
  src.fill(11);
  regBoth(s, r, src, dst, nccl::NCCL_PTR_CUDA);
  void* sreq = sendPost(s, src.at(0), 8192);
  EXPECT_EQ(progressAll({sreq}, 50), 0u) << "completed with no receiver";
  void* rreq = recvPost(r, dst.at(0), 8192);
  EXPECT_EQ(progressAll({sreq, rreq}), 2u);
  EXPECT_EQ(std::memcmp(src.p.get(), dst.p.get(), 8192), 0);
}

// A receiver that cannot map the segment (another machine; here CRYSTAL_SHM=0 on its side)
// refuses; both sides say so once, and the bytes come over TCP, bit-exact.
TEST_F(RealShm, RefusedOfferFallsBackToTcp) {
  void *s = nullptr, *r = nullptr;
  realPair(&s, &r);
  Buffer src(65536), dst(65536);
  src.fill(5);
  regBoth(s, r, src, dst, nccl::NCCL_PTR_CUDA);
  ::setenv("CRYSTAL_SHM", "0", 1);  // read by the receiver when the offer arrives
  ASSERT_EQ(exchangeSteps(s, r, src, dst, 4, 16384), 8u);
  EXPECT_EQ(std::memcmp(src.p.get(), dst.p.get(), 65536), 0);
  EXPECT_EQ(gpu_->count("cuMemHostRegister"), 1u) << "the sender's segment only";
  const std::string log = logText();
  EXPECT_NE(log.find("cannot map the sender's shared memory"), std::string::npos) << log;
  EXPECT_NE(log.find("CRYSTAL_SHM=0 on this side"), std::string::npos) << log;
  EXPECT_NE(log.find("the peer cannot map shared memory"), std::string::npos) << log;
}

// CRYSTAL_SHM=0 on the sender: no segment, no offer, TCP with a pinned twin as before.
TEST_F(RealShm, OffSendsNoOffer) {
  ::setenv("CRYSTAL_SHM", "0", 1);
  void *s = nullptr, *r = nullptr;
  realPair(&s, &r);
  Buffer src(4096), dst(4096);
  src.fill(9);
  regBoth(s, r, src, dst, nccl::NCCL_PTR_CUDA);
  EXPECT_EQ(gpu_->count("cuMemHostRegister"), 0u);
  EXPECT_EQ(gpu_->count("cuMemHostAlloc"), 2u);
  void* rreq = recvPost(r, dst.at(0), 4096);
  void* sreq = sendPost(s, src.at(0), 4096);
  EXPECT_EQ(progressAll({sreq, rreq}), 2u);
  EXPECT_EQ(std::memcmp(src.p.get(), dst.p.get(), 4096), 0);
}

// A driver that will not register the sender's segment: that region keeps a pinned twin and
// TCP (no offer), and still moves its bytes.
TEST_F(RealShm, SegmentTheDriverWillNotRegisterStaysOnTcp) {
  void *s = nullptr, *r = nullptr;
  realPair(&s, &r);
  gpu_->register_ok = false;
  Buffer src(4096), dst(4096);
  src.fill(13);
  regBoth(s, r, src, dst, nccl::NCCL_PTR_CUDA);
  EXPECT_EQ(gpu_->count("cuMemHostAlloc"), 2u);
  void* rreq = recvPost(r, dst.at(0), 4096);
  void* sreq = sendPost(s, src.at(0), 4096);
  EXPECT_EQ(progressAll({sreq, rreq}), 2u);
  EXPECT_EQ(std::memcmp(src.p.get(), dst.p.get(), 4096), 0);
  EXPECT_NE(logText().find("cuMemHostRegister: CUDA error 1"), std::string::npos) << logText();
}

// A segment left by a process that died before its peer mapped it is removed by the next
// process's first segment; a live process's stays.
TEST(ShmSegment, StaleSegmentsOfDeadProcessesAreSwept) {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  const std::string dead = fmt::format("/crystal-{}-0123456789abcdef", child);
  const std::string live = fmt::format("/crystal-{}-fedcba9876543210", ::getpid());
  for (const std::string& n : {dead, live}) {
    const int fd = ::shm_open(n.c_str(), O_CREAT | O_RDWR, 0600);
    ASSERT_GE(fd, 0) << n;
    ::close(fd);
  }
  plugin::ShmSegment::sweepStale();
  EXPECT_LT(::shm_open(dead.c_str(), O_RDWR, 0), 0) << "stale segment kept";
  const int fd = ::shm_open(live.c_str(), O_RDWR, 0);
  EXPECT_GE(fd, 0) << "a live process's segment removed";
  if (fd >= 0) ::close(fd);
  (void)::shm_unlink(live.c_str());
}

// A segment is named after its process, reserved up front and unlinked once the peer mapped
// it (open) or at the creator's end; an offer whose size exceeds the segment is refused.
TEST(ShmSegment, OpenMapsTheSameBytesAndUnlinksTheName) {
  std::string why;
  auto a = plugin::ShmSegment::create(10000, &why);
  ASSERT_TRUE(a) << why;
  EXPECT_EQ(a->size() % 4096, 0u);
  EXPECT_GE(a->size(), 10000u);
  EXPECT_EQ(a->name().rfind(fmt::format("/crystal-{}-", ::getpid()), 0), 0u) << a->name();
  EXPECT_FALSE(plugin::ShmSegment::open(a->name(), a->size() + 1, &why));
  EXPECT_NE(why.find("the offer said"), std::string::npos) << why;
  auto b = plugin::ShmSegment::open(a->name(), a->size(), &why);
  ASSERT_TRUE(b) << why;
  std::memcpy(a->data(), "crystal", 8);
  EXPECT_STREQ(reinterpret_cast<const char*>(b->data()), "crystal");
  EXPECT_LT(::shm_open(a->name().c_str(), O_RDWR, 0), 0) << "name still in /dev/shm";
  for (const char* other :
       {"not/a/name", "/other-program", "/crystal-12-0123", "/crystal-0-0123456789abcdef",
        "/crystal-12-0123456789abcdef0", "/crystal-12-0123456789abcdeX"}) {
    EXPECT_FALSE(plugin::ShmSegment::open(other, 1, &why)) << other;
    EXPECT_NE(why.find("is not a crystal shared-memory name"), std::string::npos) << other << why;
  }
}

// A receiver whose driver will not register the sender's segment copies each frame into its
// pinned twin first (then host-to-device from there) and says so once; bytes stay exact.
TEST_F(RealShm, ReceiverThatCannotRegisterCopiesThroughItsTwin) {
  void *s = nullptr, *r = nullptr;
  realPair(&s, &r);
  Buffer src(32768), dst(32768);
  src.fill(31);
  regBoth(s, r, src, dst, nccl::NCCL_PTR_CUDA);
  gpu_->register_ok = false;  // from the receiver's first copy on
  ASSERT_EQ(exchangeSteps(s, r, src, dst, 2, 16384), 4u);
  EXPECT_EQ(std::memcmp(src.p.get(), dst.p.get(), 32768), 0);
  const auto twin = gpu_->named("cuMemHostAlloc");
  ASSERT_EQ(twin.size(), 1u) << "the receiver's twin";
  for (const FakeCall& c : gpu_->named("cuMemcpyHtoDAsync"))
    EXPECT_EQ(c.src - twin[0].dst, c.dst - reinterpret_cast<std::uintptr_t>(dst.at(0)))
        << "copied from the twin at the buffer's offset";
  EXPECT_NE(logText().find("copied through the pinned twin"), std::string::npos) << logText();
}

// ---- a malformed peer (raw socket): a clear ncclRemoteError, never a crash or a hang ----

using RealShmBadPeer = RealPairBadPeer;

TEST_F(RealShmBadPeer, BytesFromASegmentNeverOffered) {
  connectRawSender();
  shmData(0, 0, 16);
  expectRemoteError("which it did not offer or this side could not map");
}

TEST_F(RealShmBadPeer, BytesPastTheSegmentsEnd) {
  connectRawSender();
  std::string why;
  auto seg = plugin::ShmSegment::create(4096, &why);
  ASSERT_TRUE(seg) << why;
  offer(*seg, 0);
  shmData(0, 4000, 200);
  expectRemoteError("200 bytes at offset 4000 of a 4096-byte shared memory segment");
}

TEST_F(RealShmBadPeer, OfferOutOfOrder) {
  connectRawSender();
  std::string why;
  auto seg = plugin::ShmSegment::create(4096, &why);
  ASSERT_TRUE(seg) << why;
  offer(*seg, 3);
  expectRemoteError("offered shared memory segment 3 where 0 was next");
}

TEST_F(RealShmBadPeer, FrameOfUnknownKind) {
  connectRawSender();
  plugin::FrameHeader h;
  h.kind = static_cast<plugin::FrameKind>(77);
  peer_.writeAll(&h, sizeof h);
  expectRemoteError("a frame of unknown kind 77");
}

// The plugin sends to the raw socket, which answers its offer and then acknowledges a frame
// the plugin never sent.
TEST_F(RealShmBadPeer, AcknowledgementOfAFrameNeverSent) {
  void* l = nullptr;
  live::NetHandle h = listenHandle(&l);  // a real handle, pointed at our own listener
  const int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sin;
  ASSERT_EQ(::bind(lfd, reinterpret_cast<sockaddr*>(&sin), sizeof sin), 0);
  ASSERT_EQ(::listen(lfd, 1), 0);
  ASSERT_EQ(::getsockname(lfd, reinterpret_cast<sockaddr*>(&sin), &len), 0);
  h.port = sin.sin_port;
  char bytes[live::kNcclHandleSize] = {};
  std::memcpy(bytes, &h, sizeof h);
  void* s = nullptr;
  for (int i = 0; i < 1'000'000 && !s; ++i) {
    ASSERT_EQ(net::connect(ctx_, 0, bytes, &s, nullptr), ncclSuccess);
    if (!s && peer_.fd < 0) peer_.fd = ::accept(lfd, nullptr, nullptr);
  }
  if (peer_.fd < 0) peer_.fd = ::accept(lfd, nullptr, nullptr);  // loopback: connected at once
  ::close(lfd);
  ASSERT_NE(s, nullptr);
  sends_.push_back(s);
  live::Hello hello;
  peer_.readAll(&hello, sizeof hello);
  Buffer src(4096);
  (void)reg(s, src, nccl::NCCL_PTR_CUDA);
  void* sreq = sendPost(s, src.at(0), 4096);
  plugin::FrameHeader offer_hdr;
  plugin::ShmOfferBody body;
  peer_.readAll(&offer_hdr, sizeof offer_hdr);  // the stream opens with its stream page
  peer_.readAll(&body, sizeof body);
  EXPECT_EQ(offer_hdr.kind, plugin::FrameKind::StreamPage);
  peer_.readAll(&offer_hdr, sizeof offer_hdr);
  peer_.readAll(&body, sizeof body);
  EXPECT_EQ(offer_hdr.kind, plugin::FrameKind::ShmOffer);
  plugin::Reply yes;
  yes.kind = plugin::ReplyKind::ShmAccepted;
  yes.value = 0;
  plugin::Reply bogus;
  bogus.kind = plugin::ReplyKind::Ack;
  bogus.value = 7;
  peer_.writeAll(&yes, sizeof yes);
  peer_.writeAll(&bogus, sizeof bogus);
  EXPECT_EQ(firstError(sreq), nccl::ncclRemoteError);
  EXPECT_NE(logText().find("acknowledged shared-memory frame 7 of"), std::string::npos)
      << logText();
}

}  // namespace
}  // namespace crystal::test
