// Error paths return NCCL error codes and never crash: bad handle bytes, oversized send,
// use after close, bad arguments.
#include <unistd.h>

#include <cstring>
#include <vector>

#include "abi_harness.h"

namespace crystal::test {
namespace {

class PluginErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    n = Plugin::get().v11;
    ASSERT_NE(n, nullptr);
    ASSERT_EQ(n->init(&ctx, 0x55, nullptr, testLogger, nullptr), ncclSuccess);
  }
  void TearDown() override { EXPECT_EQ(n->finalize(ctx), ncclSuccess); }
  const ncclNet_v11_t* n = nullptr;
  void* ctx = nullptr;
};

TEST_F(PluginErrors, BadHandleBytes) {
  char junk[128];
  for (int i = 0; i < 128; ++i) junk[i] = static_cast<char>(i * 37);
  void* sc = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(n->connect(ctx, 0, junk, &sc, nullptr), ncclInvalidArgument);
  EXPECT_EQ(sc, nullptr);
  EXPECT_TRUE(logged("not a crystal handle"));
  live::NetHandle h = virtualPeerHandle(1, 2);
  h.version = 99;  // a handle of another wire version
  EXPECT_EQ(n->connect(ctx, 0, &h, &sc, nullptr), ncclInvalidArgument);
  live::NetHandle e = virtualPeerHandle(1, 2);
  e.emulation = 42;  // another emulation's handle
  EXPECT_EQ(n->connect(ctx, 0, &e, &sc, nullptr), ncclInvalidArgument);
  EXPECT_EQ(n->connect(ctx, 0, nullptr, &sc, nullptr), ncclInvalidArgument);
}

TEST_F(PluginErrors, BadDeviceAndContext) {
  ncclNetProperties_v11_t p{};
  EXPECT_EQ(n->getProperties(8, &p), ncclInvalidArgument);
  EXPECT_EQ(n->getProperties(-1, &p), ncclInvalidArgument);
  live::NetHandle h = virtualPeerHandle(1, 2);
  void* sc = nullptr;
  EXPECT_EQ(n->connect(ctx, 99, &h, &sc, nullptr), ncclInvalidArgument);
  int bogus_ctx = 0;
  EXPECT_EQ(n->connect(&bogus_ctx, 0, &h, &sc, nullptr), ncclInvalidUsage);
}

TEST_F(PluginErrors, OversizedAndUnregisteredSend) {
  live::NetHandle h = virtualPeerHandle(1, 2);
  void* sc = nullptr;
  ASSERT_EQ(n->connect(ctx, 0, &h, &sc, nullptr), ncclSuccess);
  std::vector<char> buf(4096);
  void* mr = nullptr;
  ASSERT_EQ(n->regMr(sc, buf.data(), buf.size(), NCCL_PTR_HOST, &mr), ncclSuccess);
  void* req = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(n->isend(sc, buf.data(), (std::size_t{1} << 40) + 1, 0, mr, nullptr, &req),
            ncclInvalidArgument);
  EXPECT_EQ(req, nullptr);
  EXPECT_EQ(n->isend(sc, buf.data(), 8192, 0, mr, nullptr, &req), ncclInvalidArgument);
  int other = 0;
  EXPECT_EQ(n->isend(sc, buf.data(), 16, 0, &other, nullptr, &req), ncclInvalidArgument);
  EXPECT_EQ(n->regMr(sc, buf.data(), buf.size(), NCCL_PTR_DMABUF, &mr), ncclInvalidArgument);
  EXPECT_EQ(n->deregMr(sc, &other), ncclInvalidUsage);
  EXPECT_EQ(n->irecv(sc, 1, nullptr, nullptr, nullptr, nullptr, nullptr, &req), ncclInvalidUsage);
  EXPECT_EQ(n->closeSend(sc), ncclSuccess);
}

TEST_F(PluginErrors, UseAfterClose) {
  live::NetHandle h = virtualPeerHandle(1, 2);
  void* sc = nullptr;
  ASSERT_EQ(n->connect(ctx, 0, &h, &sc, nullptr), ncclSuccess);
  std::vector<char> buf(4096);
  void* mr = nullptr;
  ASSERT_EQ(n->regMr(sc, buf.data(), buf.size(), NCCL_PTR_HOST, &mr), ncclSuccess);
  void* req = nullptr;
  ASSERT_EQ(n->isend(sc, buf.data(), 4096, 0, mr, nullptr, &req), ncclSuccess);
  ASSERT_NE(req, nullptr);
  ASSERT_EQ(n->closeSend(sc), ncclSuccess);
  int done = 0;
  EXPECT_EQ(n->test(req, &done, nullptr), ncclInvalidUsage);
  EXPECT_EQ(n->isend(sc, buf.data(), 16, 0, mr, nullptr, &req), ncclInvalidUsage);
  EXPECT_EQ(n->regMr(sc, buf.data(), 16, NCCL_PTR_HOST, &mr), ncclInvalidUsage);
  EXPECT_EQ(n->closeSend(sc), ncclInvalidUsage);
  EXPECT_EQ(n->closeRecv(sc), ncclInvalidUsage);
  // A new comm reusing the slot does not revive the old token.
  void* sc2 = nullptr;
  ASSERT_EQ(n->connect(ctx, 0, &h, &sc2, nullptr), ncclSuccess);
  EXPECT_NE(sc2, sc);
  EXPECT_EQ(n->isend(sc, buf.data(), 16, 0, mr, nullptr, &req), ncclInvalidUsage);
  EXPECT_EQ(n->test(nullptr, &done, nullptr), ncclInvalidUsage);
  EXPECT_EQ(n->test(reinterpret_cast<void*>(0xdeadbeef), &done, nullptr), ncclInvalidUsage);
  EXPECT_EQ(n->closeSend(sc2), ncclSuccess);
}

TEST_F(PluginErrors, ForeignHelloAndTooManyGroupedRecvs) {
  char lh[128] = {};
  void* lc = nullptr;
  ASSERT_EQ(n->listen(ctx, 0, lh, &lc), ncclSuccess);
  live::NetHandle h;
  ASSERT_TRUE(live::decodeHandle(lh, h));
  const int sock = openHello(h, live::PeerKind::Virtual, h.listen_id + 1000);
  ncclResult_t r = ncclSuccess;
  void* rc = nullptr;
  for (int i = 0; i < 1'000'000 && r == ncclSuccess; ++i) r = n->accept(lc, &rc, nullptr);
  EXPECT_EQ(r, ncclRemoteError);
  EXPECT_EQ(rc, nullptr);
  ::close(sock);
  const int good = openHello(h, live::PeerKind::Virtual);
  rc = pollUntil([&](void** out) { return n->accept(lc, out, nullptr); });
  ASSERT_NE(rc, nullptr);
  void* data[9] = {};
  std::size_t sizes[9] = {};
  int tags[9] = {};
  void* req = nullptr;
  EXPECT_EQ(n->irecv(rc, 9, data, sizes, tags, data, nullptr, &req), ncclInvalidArgument);
  EXPECT_EQ(n->isend(rc, data, 0, 0, nullptr, nullptr, &req), ncclInvalidUsage);
  EXPECT_EQ(n->closeRecv(rc), ncclSuccess);
  EXPECT_EQ(n->closeListen(lc), ncclSuccess);
  ::close(good);
}

}  // namespace
}  // namespace crystal::test
