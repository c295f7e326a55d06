// Real peers: bytes over loopback TCP through the plugin, in one process (grouped receive,
// tags, receive larger than send) and between two forked harness processes (content).
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "abi_harness.h"

namespace crystal::test {
namespace {

struct Pair {
  void* listen = nullptr;
  void* send = nullptr;
  void* recv = nullptr;
};

// Connect to `peer_handle` and accept on `listen` until both comms exist (the proxy polls
// both without blocking).
void connectAccept(const ncclNet_v11_t* n, void* ctx, char* peer_handle, Pair& p) {
  for (int i = 0; i < 10'000'000 && (!p.send || !p.recv); ++i) {
    if (!p.send) {
      ASSERT_EQ(n->connect(ctx, 0, peer_handle, &p.send, nullptr), ncclSuccess);
    }
    if (!p.recv) {
      ASSERT_EQ(n->accept(p.listen, &p.recv, nullptr), ncclSuccess);
    }
  }
  ASSERT_NE(p.send, nullptr);
  ASSERT_NE(p.recv, nullptr);
}

TEST(PluginReal, LoopbackGroupedReceiveWithTagsAndShortSends) {
  const ncclNet_v11_t* n = Plugin::get().v11;
  void* ctx = nullptr;
  ASSERT_EQ(n->init(&ctx, 0x66, nullptr, testLogger, nullptr), ncclSuccess);
  char lh[128] = {};
  Pair p;
  ASSERT_EQ(n->listen(ctx, 0, lh, &p.listen), ncclSuccess);
  connectAccept(n, ctx, lh, p);
  std::vector<unsigned char> src(300000), dst(3 << 20, 0xEE);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 7 + 1);
  void *smr = nullptr, *rmr = nullptr;
  ASSERT_EQ(n->regMr(p.send, src.data(), src.size(), NCCL_PTR_HOST, &smr), ncclSuccess);
  ASSERT_EQ(n->regMr(p.recv, dst.data(), dst.size(), NCCL_PTR_HOST, &rmr), ncclSuccess);
  void* data[3] = {dst.data(), dst.data() + (1 << 20), dst.data() + (2 << 20)};
  std::size_t sizes[3] = {1 << 20, 1 << 20, 1 << 20};
  int tags[3] = {5, 6, 7};
  void* mrs[3] = {rmr, rmr, rmr};
  void* rreq = nullptr;
  ASSERT_EQ(n->irecv(p.recv, 3, data, sizes, tags, mrs, nullptr, &rreq), ncclSuccess);
  // Sent in tag order 6, 5, 7 with sizes 200000, 100000, 0: matched by tag.
  const live::TimeNs t0 = live::nowNs();
  void* s[3] = {};
  ASSERT_EQ(n->isend(p.send, src.data(), 200000, 6, smr, nullptr, &s[0]), ncclSuccess);
  ASSERT_EQ(n->isend(p.send, src.data() + 200000, 100000, 5, smr, nullptr, &s[1]), ncclSuccess);
  ASSERT_EQ(n->isend(p.send, src.data(), 0, 7, smr, nullptr, &s[2]), ncclSuccess);
  int got[3] = {-1, -1, -1};
  int done_r = 0;
  int done_s[3] = {};
  live::TimeNs t_recv = 0;
  while (!done_r || !done_s[0] || !done_s[1] || !done_s[2]) {
    for (int i = 0; i < 3; ++i)
      if (!done_s[i]) {
        ASSERT_EQ(n->test(s[i], &done_s[i], nullptr), ncclSuccess);
      }
    if (!done_r) {
      ASSERT_EQ(n->test(rreq, &done_r, got), ncclSuccess);
      if (done_r) t_recv = live::nowNs();
    }
  }
  EXPECT_EQ(got[0], 100000);
  EXPECT_EQ(got[1], 200000);
  EXPECT_EQ(got[2], 0);
  EXPECT_EQ(std::memcmp(dst.data(), src.data() + 200000, 100000), 0);
  EXPECT_EQ(std::memcmp(dst.data() + (1 << 20), src.data(), 200000), 0);
  EXPECT_EQ(dst[(1 << 20) + 200000], 0xEE);  // nothing written past the sent bytes
  // Not released before the target would have delivered all 300000 bytes.
  EXPECT_GE(t_recv - t0, modelNs(300000));
  EXPECT_EQ(n->closeSend(p.send), ncclSuccess);
  EXPECT_EQ(n->closeRecv(p.recv), ncclSuccess);
  EXPECT_EQ(n->closeListen(p.listen), ncclSuccess);
}

unsigned char pattern(std::size_t i, int rank) {
  return static_cast<unsigned char>(i * 7 + static_cast<std::size_t>(rank) * 13 + (i >> 12));
}

// One harness rank: exchange `bytes` both ways with the other process; returns 0 on success.
int harnessRank(int rank, int to_peer, int from_peer, std::size_t bytes) {
  Plugin& pl = Plugin::get();
  const ncclNet_v11_t* n = pl.v11;
  if (!n) return 10;
  void* ctx = nullptr;
  if (n->init(&ctx, 0xABC, nullptr, testLogger, nullptr) != ncclSuccess) return 11;
  char mine[128] = {}, theirs[128] = {};
  Pair p;
  if (n->listen(ctx, 0, mine, &p.listen) != ncclSuccess) return 12;
  if (write(to_peer, mine, 128) != 128 || read(from_peer, theirs, 128) != 128) return 13;
  for (long i = 0; i < 100'000'000 && (!p.send || !p.recv); ++i) {
    if (!p.send && n->connect(ctx, 0, theirs, &p.send, nullptr) != ncclSuccess) return 14;
    if (!p.recv && n->accept(p.listen, &p.recv, nullptr) != ncclSuccess) return 15;
  }
  if (!p.send || !p.recv) return 16;
  std::vector<unsigned char> src(bytes), dst(bytes, 0);
  for (std::size_t i = 0; i < bytes; ++i) src[i] = pattern(i, rank);
  void *smr = nullptr, *rmr = nullptr;
  if (n->regMr(p.send, src.data(), bytes, NCCL_PTR_HOST, &smr) != ncclSuccess) return 17;
  if (n->regMr(p.recv, dst.data(), bytes, NCCL_PTR_HOST, &rmr) != ncclSuccess) return 18;
  void* rreq = nullptr;
  void* sreq = nullptr;
  void* d = dst.data();
  std::size_t sz = bytes;
  int tag = 1 - rank;  // NCCL tags a receive with the sender's rank
  if (n->irecv(p.recv, 1, &d, &sz, &tag, &rmr, nullptr, &rreq) != ncclSuccess || !rreq) return 19;
  if (n->isend(p.send, src.data(), bytes, rank, smr, nullptr, &sreq) != ncclSuccess || !sreq)
    return 20;
  int ds = 0, dr = 0, got = -1;
  while (!ds || !dr) {
    if (!ds && n->test(sreq, &ds, nullptr) != ncclSuccess) return 21;
    if (!dr && n->test(rreq, &dr, &got) != ncclSuccess) return 22;
  }
  if (got != static_cast<int>(bytes)) return 23;
  for (std::size_t i = 0; i < bytes; ++i)
    if (dst[i] != pattern(i, 1 - rank)) return 24;
  if (n->closeSend(p.send) != ncclSuccess || n->closeRecv(p.recv) != ncclSuccess ||
      n->closeListen(p.listen) != ncclSuccess || n->finalize(ctx) != ncclSuccess)
    return 25;
  return 0;
}

TEST(PluginReal, TwoProcessesExchangeBytesOverLoopback) {
  int a2b[2], b2a[2];
  ASSERT_EQ(pipe(a2b), 0);
  ASSERT_EQ(pipe(b2a), 0);
  constexpr std::size_t kBytes = (8 << 20) + 3;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) _exit(harnessRank(1, b2a[1], a2b[0], kBytes));
  const int mine = harnessRank(0, a2b[1], b2a[0], kBytes);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_EQ(mine, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace
}  // namespace crystal::test
