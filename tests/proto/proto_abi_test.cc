// The data policies through the plugin ABI (dlopen of the built library), host buffers
// registered as NCCL's proxy does for a ring connection: LL, LL128, Simple in that order.
// The policy comes from CRYSTAL_DATA (read once per process); ctest runs this binary once per
// policy (tests/proto/CMakeLists.txt), and each test skips unless its policy is the one set.
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "abi_harness.h"
#include "crystal/nccl/profiler_v5.h"

namespace crystal::test {
namespace {

constexpr int kLL = 0, kLL128 = 1, kSimple = 2;
constexpr std::size_t kSlotBytes[3] = {64, 256, 64};  // 4 LL lines, 2 LL128 lines, 64 B

struct Conn {
  void* ctx = nullptr;
  void* send = nullptr;
  void* recv = nullptr;
  void* listen = nullptr;
  void* smr[3] = {};
  void* rmr[3] = {};
  int host_sock = -1;
  std::vector<std::uint64_t> sbuf[3], rbuf[3];  // 8 slots each, 8-byte aligned

  char* sslot(int p, int slot) {
    return reinterpret_cast<char*>(sbuf[p].data()) + slot * kSlotBytes[p];
  }
  char* rslot(int p, int slot) {
    return reinterpret_cast<char*>(rbuf[p].data()) + slot * kSlotBytes[p];
  }
};

bool policyIs(const char* want) {
  const char* v = std::getenv("CRYSTAL_DATA");
  return v && std::string(v) == want;
}

// A real rank's connections to its virtual neighbours: with `ordinal` >= 0 as the host
// writes them for ring channel `ordinal` of real rank 0 of 4 (identity pairing), else
// without identity (creation-order pairing).
void openSend(Conn& c, std::uint64_t comm_id, int ordinal) {
  const ncclNet_v11_t* n = Plugin::get().v11;
  live::NetHandle vh = ordinal >= 0 ? ringPeerHandle(0, 4, ordinal) : virtualPeerHandle(1, 4);
  vh.comm_id = comm_id;
  char hb[128];
  std::memcpy(hb, &vh, sizeof vh);
  ASSERT_EQ(n->connect(c.ctx, 0, hb, &c.send, nullptr), ncclSuccess);
  ASSERT_NE(c.send, nullptr);
}

void openRecv(Conn& c, int ordinal) {
  const ncclNet_v11_t* n = Plugin::get().v11;
  char lh[128] = {};
  ASSERT_EQ(n->listen(c.ctx, 0, lh, &c.listen), ncclSuccess);
  live::NetHandle h;
  ASSERT_TRUE(live::decodeHandle(lh, h));
  c.host_sock =
      ordinal >= 0 ? openRingHello(h, 0, 4, ordinal) : openHello(h, live::PeerKind::Virtual);
  ASSERT_GE(c.host_sock, 0);
  c.recv = pollUntil([&](void** out) { return n->accept(c.listen, out, nullptr); });
  ASSERT_NE(c.recv, nullptr);
}

void registerBuffers(Conn& c) {
  const ncclNet_v11_t* n = Plugin::get().v11;
  for (int p = 0; p < 3; ++p) {
    c.sbuf[p].assign(kSlotBytes[p], 0);  // 8 slots x kSlotBytes / 8 words
    c.rbuf[p].assign(kSlotBytes[p], 0);  // NCCL's host buffers are zeroed
    ASSERT_EQ(n->regMr(c.send, c.sbuf[p].data(), kSlotBytes[p] * 8, NCCL_PTR_HOST, &c.smr[p]),
              ncclSuccess);
    ASSERT_EQ(n->regMr(c.recv, c.rbuf[p].data(), kSlotBytes[p] * 8, NCCL_PTR_HOST, &c.rmr[p]),
              ncclSuccess);
  }
}

// One channel of a real rank between two virtual neighbours, in its own net context.
void open(Conn& c, std::uint64_t comm_id) {
  const ncclNet_v11_t* n = Plugin::get().v11;
  ASSERT_EQ(n->init(&c.ctx, comm_id, nullptr, testLogger, nullptr), ncclSuccess);
  openSend(c, comm_id, -1);
  openRecv(c, -1);
  registerBuffers(c);
}

void close(Conn& c) {
  const ncclNet_v11_t* n = Plugin::get().v11;
  for (int p = 0; p < 3; ++p) {
    EXPECT_EQ(n->deregMr(c.send, c.smr[p]), ncclSuccess);
    EXPECT_EQ(n->deregMr(c.recv, c.rmr[p]), ncclSuccess);
  }
  EXPECT_EQ(n->closeSend(c.send), ncclSuccess);
  EXPECT_EQ(n->closeRecv(c.recv), ncclSuccess);
  EXPECT_EQ(n->closeListen(c.listen), ncclSuccess);
  if (c.ctx) {
    EXPECT_EQ(n->finalize(c.ctx), ncclSuccess);
  }
  ::close(c.host_sock);
}

// The real rank sends step k from (sp, slot) and receives step k into (rp, slot), as a ring
// does; NCCL marks LL/LL128 receives "optional completion" (request preset to 0x1).
void step(Conn& c, int sp, int rp, int slot) {
  const ncclNet_v11_t* n = Plugin::get().v11;
  void* sreq = nullptr;
  ASSERT_EQ(n->isend(c.send, c.sslot(sp, slot), kSlotBytes[sp], 0, c.smr[sp], nullptr, &sreq),
            ncclSuccess);
  ASSERT_NE(sreq, nullptr);
  void* data = c.rslot(rp, slot);
  std::size_t size = kSlotBytes[rp];
  int tag = 1;
  void* rreq = rp == kSimple ? nullptr : reinterpret_cast<void*>(0x1);
  ASSERT_EQ(n->irecv(c.recv, 1, &data, &size, &tag, &c.rmr[rp], nullptr, &rreq), ncclSuccess);
  ASSERT_NE(rreq, nullptr);
  ASSERT_NE(rreq, reinterpret_cast<void*>(0x1));  // a real request: test() writes the lines
  int sizes[8] = {};
  ASSERT_GT(waitDone(n, rreq, sizes), 0);
  EXPECT_EQ(sizes[0], static_cast<int>(kSlotBytes[rp]));
  ASSERT_GT(waitDone(n, sreq), 0);
}

std::vector<std::uint32_t> words32(const char* p, std::size_t bytes) {
  std::vector<std::uint32_t> w(bytes / 4);
  std::memcpy(w.data(), p, bytes);
  return w;
}

std::vector<std::uint64_t> words64(const char* p, std::size_t bytes) {
  std::vector<std::uint64_t> w(bytes / 8);
  std::memcpy(w.data(), p, bytes);
  return w;
}

// The real rank's LL lines of its own send step (flag = sender step + 1).
void fillLL(char* slot, std::uint32_t base, std::uint32_t flag) {
  std::vector<std::uint32_t> w;
  for (int i = 0; i < 4; ++i) w.insert(w.end(), {base + 2u * i, flag, base + 2u * i + 1, flag});
  std::memcpy(slot, w.data(), 64);
}

void fillLL128(char* slot, std::uint64_t base, std::uint64_t flag) {
  std::uint64_t w[32];
  for (int i = 0; i < 32; ++i) w[i] = i % 16 == 15 ? flag : base + i;
  std::memcpy(slot, w, sizeof w);
}

TEST(ProtoAbiMirror, LinesCarryTheRealRanksDataWithTheReceiversFlags) {
  if (!policyIs("mirror")) GTEST_SKIP() << "run with CRYSTAL_DATA=mirror (ctest does)";
  Conn c;
  open(c, 0x6001);
  fillLL(c.sslot(kLL, 0), 0x100, 1);  // step 0 of the send connection
  step(c, kLL, kLL, 0);
  std::vector<std::uint32_t> want;
  for (std::uint32_t i = 0; i < 4; ++i)
    want.insert(want.end(), {0x100 + 2 * i, 1, 0x101 + 2 * i, 1});
  EXPECT_EQ(words32(c.rslot(kLL, 0), 64), want);

  fillLL128(c.sslot(kLL128, 1), 0x5000, 2);
  step(c, kLL128, kLL128, 1);
  auto w = words64(c.rslot(kLL128, 1), 256);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(w[i], i % 16 == 15 ? 2u : 0x5000u + i) << i;

  for (int i = 0; i < 64; ++i) c.sslot(kSimple, 2)[i] = static_cast<char>(i * 3);
  step(c, kSimple, kSimple, 2);
  EXPECT_EQ(std::memcmp(c.rslot(kSimple, 2), c.sslot(kSimple, 2), 64), 0);

  // A receive of another protocol than the paired send: zero data, flags of step 3.
  std::memset(c.rslot(kLL128, 3), 0x77, 256);
  fillLL(c.sslot(kLL, 3), 0x900, 4);
  step(c, kLL, kLL128, 3);
  w = words64(c.rslot(kLL128, 3), 256);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(w[i], i % 16 == 15 ? 4u : 0u) << i;

  // Steps 4..19 wrap the 8 slots twice; each LL receive carries flag = step + 1.
  for (int s = 4; s < 20; ++s) {
    fillLL(c.sslot(kLL, s % 8), 0x1000 * s, static_cast<std::uint32_t>(s + 1));
    step(c, kLL, kLL, s % 8);
    auto got = words32(c.rslot(kLL, s % 8), 64);
    ASSERT_EQ(got[0], 0x1000u * s) << "step " << s;
    ASSERT_EQ(got[1], static_cast<std::uint32_t>(s + 1)) << "step " << s;
    ASSERT_EQ(got[15], static_cast<std::uint32_t>(s + 1)) << "step " << s;
  }
  close(c);
}

// A receive whose mirrored send never comes first (a broadcast from a virtual root: the real
// rank forwards what it receives) is held at most the mirror wait, then gets zeros; the
// next such receive is not held; a send that comes before the receive is tested turns
// mirroring back on.
TEST(ProtoAbiMirror, ReceiveBeforeItsSendFallsBackToZeroWithoutHanging) {
  if (!policyIs("mirror")) GTEST_SKIP() << "run with CRYSTAL_DATA=mirror (ctest does)";
  const ncclNet_v11_t* n = Plugin::get().v11;
  Conn c;
  open(c, 0x6004);
  auto recvOnly = [&](int slot) {
    std::memset(c.rslot(kLL, slot), 0x5a, 64);
    void* data = c.rslot(kLL, slot);
    std::size_t size = 64;
    int tag = 1;
    void* req = nullptr;
    const live::TimeNs t0 = live::nowNs();  // no later than the plugin's post time
    EXPECT_EQ(n->irecv(c.recv, 1, &data, &size, &tag, &c.rmr[kLL], nullptr, &req), ncclSuccess);
    EXPECT_GT(waitDone(n, req), 0);
    return live::nowNs() - t0;
  };
  const live::TimeNs first = recvOnly(0);
  const std::vector<std::uint32_t> zero1 = {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1};
  EXPECT_EQ(words32(c.rslot(kLL, 0), 64), zero1);
  EXPECT_LT(first, 2'000'000'000) << "a receive without its send must not hang";
  EXPECT_GE(first, 200'000) << "held for the mirror wait (VirtualRecvComm::kMirrorWaitNs)";
  // The next receive is not held (its send would wait for it too): zeros, flag of step 1.
  (void)recvOnly(1);
  EXPECT_EQ(words32(c.rslot(kLL, 1), 64)[0], 0u);
  EXPECT_EQ(words32(c.rslot(kLL, 1), 64)[1], 2u);
  // The real rank forwards what it got (sends 0 and 1, as a broadcast does).
  for (int k = 0; k < 2; ++k) {
    fillLL(c.sslot(kLL, k), 0x300, static_cast<std::uint32_t>(k + 1));
    void* sreq = nullptr;
    ASSERT_EQ(n->isend(c.send, c.sslot(kLL, k), 64, 0, c.smr[kLL], nullptr, &sreq), ncclSuccess);
    ASSERT_GT(waitDone(n, sreq), 0);
  }
  // A receive posted ahead of its send (NCCL posts 8 ahead) after holds stopped: not written
  // at its post; its send comes before the proxy tests it, and it is mirrored again.
  void* data = c.rslot(kLL, 2);
  std::size_t size = 64;
  int tag = 1;
  void* rreq = nullptr;
  ASSERT_EQ(n->irecv(c.recv, 1, &data, &size, &tag, &c.rmr[kLL], nullptr, &rreq), ncclSuccess);
  fillLL(c.sslot(kLL, 2), 0x700, 3);
  void* sreq = nullptr;
  ASSERT_EQ(n->isend(c.send, c.sslot(kLL, 2), 64, 0, c.smr[kLL], nullptr, &sreq), ncclSuccess);
  ASSERT_GT(waitDone(n, rreq), 0);
  ASSERT_GT(waitDone(n, sreq), 0);
  EXPECT_EQ(words32(c.rslot(kLL, 2), 64)[0], 0x700u);
  close(c);
}

// An all-gather whose real rank is slower than the (open-loop) virtual side: its receives are
// posted ahead and due long before the real rank forwards step k as send k. The holds last
// while its sends keep coming (here one every 50 us, 300 us in all, more than the 200 us
// wait), so every receive gets its mirrored send's data. (A test thread descheduled for
// more than the wait between two sends may see a hold run out: that step is not judged.)
TEST(ProtoAbiMirror, HoldsLastWhileTheRealRanksSendsKeepComing) {
  if (!policyIs("mirror")) GTEST_SKIP() << "run with CRYSTAL_DATA=mirror (ctest does)";
  const ncclNet_v11_t* n = Plugin::get().v11;
  Conn c;
  open(c, 0x6007);
  constexpr int kSteps = 6;
  void* rreq[kSteps] = {};
  for (int k = 0; k < kSteps; ++k) {  // posted ahead, as NCCL's proxy does (8 slots)
    void* data = c.rslot(kLL, k);
    std::size_t size = 64;
    int tag = 1;
    ASSERT_EQ(n->irecv(c.recv, 1, &data, &size, &tag, &c.rmr[kLL], nullptr, &rreq[k]),
              ncclSuccess);
  }
  bool judged = true;  // no hiccup of this thread so far
  live::TimeNs last_send = live::nowNs();
  for (int k = 0; k < kSteps; ++k) {
    const live::TimeNs until = live::nowNs() + 50'000;  // the GPU's turnaround
    bool early = false;
    for (live::TimeNs t = live::nowNs(); t < until; t = live::nowNs()) {
      judged = judged && t - last_send < 150'000;
      int done = 1;
      ASSERT_EQ(n->test(rreq[k], &done, nullptr), ncclSuccess);
      if (done) {
        early = true;
        break;
      }
    }
    if (early) {
      EXPECT_FALSE(judged) << "receive " << k << " went ahead without its mirrored send";
      close(c);
      return;
    }
    fillLL(c.sslot(kLL, k), 0x900 + 0x10 * static_cast<std::uint32_t>(k),
           static_cast<std::uint32_t>(k + 1));
    // Descheduled after the last poll and before this send (a loaded CI box): the hold may
    // have run out with the test none the wiser; from here on nothing is judged.
    judged = judged && live::nowNs() - last_send < 150'000;
    void* sreq = nullptr;
    ASSERT_EQ(n->isend(c.send, c.sslot(kLL, k), 64, 0, c.smr[kLL], nullptr, &sreq), ncclSuccess);
    last_send = live::nowNs();
    ASSERT_GT(waitDone(n, rreq[k]), 0);
    ASSERT_GT(waitDone(n, sreq), 0);
    if (judged) {
      EXPECT_EQ(words32(c.rslot(kLL, k), 64)[0], 0x900u + 0x10 * k) << k;
    }
  }
  close(c);
}

// Ring channels pair by the identity the host writes (channel ordinal), not by the order in
// which NCCL's proxy happens to complete connect/accept: channel 1's receive accepted first
// still mirrors channel 1's send.
TEST(ProtoAbiMirror, RingChannelsPairByOrdinalNotCreationOrder) {
  if (!policyIs("mirror")) GTEST_SKIP() << "run with CRYSTAL_DATA=mirror (ctest does)";
  const ncclNet_v11_t* n = Plugin::get().v11;
  constexpr std::uint64_t kComm = 0x6005;
  void* ctx = nullptr;
  ASSERT_EQ(n->init(&ctx, kComm, nullptr, testLogger, nullptr), ncclSuccess);
  Conn ch[2];
  for (auto& c : ch) c.ctx = ctx;
  openSend(ch[0], kComm, 0);
  openSend(ch[1], kComm, 1);
  openRecv(ch[1], 1);
  openRecv(ch[0], 0);
  for (auto& c : ch) registerBuffers(c);
  fillLL(ch[0].sslot(kLL, 0), 0xa000, 1);
  fillLL(ch[1].sslot(kLL, 0), 0xb000, 1);
  step(ch[0], kLL, kLL, 0);
  step(ch[1], kLL, kLL, 0);
  EXPECT_EQ(words32(ch[0].rslot(kLL, 0), 64)[0], 0xa000u);
  EXPECT_EQ(words32(ch[1].rslot(kLL, 0), 64)[0], 0xb000u);
  ch[0].ctx = nullptr;  // one finalize for the shared context
  close(ch[0]);
  close(ch[1]);
}

// NCCL shares a ring channel's connection with a tree whose chain runs through the same
// neighbour; the tree's sends on it must not shift the mirror pairing. NCCL's profiler (this
// library as NCCL_PROFILER_PLUGIN) announces each operation's transfers per connection
// before they are posted: a p2p operation (another connection), a tree all-reduce's two sends
// to rank 1 on channel 0, then a ring operation's one send and one receive. The ring receive
// mirrors the ring send.
TEST(ProtoAbiMirror, TreeSendsOnARingConnectionDoNotShiftThePairing) {
  if (!policyIs("mirror")) GTEST_SKIP() << "run with CRYSTAL_DATA=mirror (ctest does)";
  const ncclNet_v11_t* n = Plugin::get().v11;
  const auto* prof =
      static_cast<const ncclProfiler_v5_t*>(dlsym(Plugin::get().dl, "ncclProfiler_v5"));
  ASSERT_NE(prof, nullptr);
  constexpr std::uint64_t kComm = 0x6006;
  Conn c;
  ASSERT_EQ(n->init(&c.ctx, kComm, nullptr, testLogger, nullptr), ncclSuccess);
  openSend(c, kComm, 0);
  openRecv(c, 0);
  registerBuffers(c);
  void* pctx = nullptr;
  int mask = 0;
  ASSERT_EQ(prof->init(&pctx, kComm, &mask, "world", 1, 4, 0, testLogger), ncclSuccess);
  ASSERT_NE(pctx, nullptr);
  ASSERT_NE(mask & ncclProfileProxyOp, 0) << "mirror asks NCCL for proxy-op events";
  ASSERT_NE(mask & ncclProfileColl, 0);
  auto collective = [&](const char* algo) {
    ncclProfilerEventDescr_v5_t d{};
    d.type = ncclProfileColl;
    d.coll.func = "AllReduce";
    d.coll.datatype = "ncclFloat32";
    d.coll.algo = algo;
    d.coll.proto = "LL";
    d.coll.nChannels = 1;
    void* h = nullptr;
    EXPECT_EQ(prof->startEvent(pctx, &h, &d), ncclSuccess);
    EXPECT_NE(h, nullptr);
    return h;
  };
  auto proxyOp = [&](void* parent, int peer, bool send, int transfers) {
    ncclProfilerEventDescr_v5_t d{};
    d.type = ncclProfileProxyOp;
    d.parentObj = parent;
    d.proxyOp.channelId = 0;
    d.proxyOp.peer = peer;
    d.proxyOp.nSteps = transfers;
    d.proxyOp.isSend = send ? 1 : 0;
    void* h = reinterpret_cast<void*>(0x1);
    EXPECT_EQ(prof->startEvent(pctx, &h, &d), ncclSuccess);
    EXPECT_EQ(h, nullptr) << "no event object: NCCL then skips stopEvent";
  };
  // A point-to-point operation (no collective above it) runs on NCCL's p2p connection to
  // the same channel and peer: not counted here.
  proxyOp(nullptr, 1, true, 5);
  void* tree = collective("TREE");
  proxyOp(tree, 1, true, 2);
  for (int slot = 0; slot < 2; ++slot) {
    fillLL(c.sslot(kLL, slot), 0xdead0, static_cast<std::uint32_t>(slot + 1));
    void* req = nullptr;
    ASSERT_EQ(n->isend(c.send, c.sslot(kLL, slot), kSlotBytes[kLL], 0, c.smr[kLL], nullptr, &req),
              ncclSuccess);
    ASSERT_GT(waitDone(n, req), 0);
  }
  EXPECT_EQ(prof->stopEvent(tree), ncclSuccess);
  void* ring = collective("RING");
  // NCCL stops a collective's event once the host enqueued it, usually before its proxy
  // thread appends the operations (which name the stopped event as their parent).
  EXPECT_EQ(prof->stopEvent(ring), ncclSuccess);
  proxyOp(ring, 1, true, 1);
  proxyOp(ring, 3, false, 1);
  fillLL(c.sslot(kLL, 2), 0xa000, 3);
  step(c, kLL, kLL, 2);
  const auto got = words32(c.rslot(kLL, 2), 64);
  EXPECT_EQ(got[0], 0xa000u) << "the ring receive mirrors the ring send, not a tree send";
  EXPECT_EQ(got[2], 0xa001u);
  EXPECT_EQ(prof->finalize(pctx), ncclSuccess);
  close(c);
}

TEST(ProtoAbiZero, LinesCarryZerosAndFlags) {
  if (!policyIs("zero")) GTEST_SKIP() << "run with CRYSTAL_DATA=zero (ctest does)";
  Conn c;
  open(c, 0x6002);
  fillLL(c.sslot(kLL, 0), 0x100, 1);
  std::memset(c.rslot(kLL, 0), 0x5a, 64);
  step(c, kLL, kLL, 0);
  const std::vector<std::uint32_t> zero = {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1};
  EXPECT_EQ(words32(c.rslot(kLL, 0), 64), zero);
  fillLL128(c.sslot(kLL128, 1), 0x5000, 2);
  step(c, kLL128, kLL128, 1);
  auto w = words64(c.rslot(kLL128, 1), 256);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(w[i], i % 16 == 15 ? 2u : 0u) << i;
  for (int i = 0; i < 64; ++i) c.sslot(kSimple, 2)[i] = 1;
  step(c, kSimple, kSimple, 2);
  EXPECT_EQ(words64(c.rslot(kSimple, 2), 64), std::vector<std::uint64_t>(8, 0));
  close(c);
}

TEST(ProtoAbiNone, OnlyFlagsAreWritten) {
  if (!policyIs("none")) GTEST_SKIP() << "run with CRYSTAL_DATA=none (ctest does)";
  Conn c;
  open(c, 0x6003);
  std::memset(c.rslot(kLL, 0), 0xab, 64);
  step(c, kLL, kLL, 0);
  auto got = words32(c.rslot(kLL, 0), 64);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(got[i], i % 2 ? 1u : 0xababababu) << i;
  std::memset(c.rslot(kLL128, 1), 0xcd, 256);
  step(c, kLL128, kLL128, 1);
  auto w = words64(c.rslot(kLL128, 1), 256);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(w[i], i % 16 == 15 ? 2u : 0xcdcdcdcdcdcdcdcdull) << i;
  close(c);
}

}  // namespace
}  // namespace crystal::test
