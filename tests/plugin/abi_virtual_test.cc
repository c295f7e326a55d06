// Virtual peers driven as NCCL's proxy does: a full ring all-reduce step sequence of one
// real rank, grouped receives, maximum outstanding requests. Completion times must agree
// with the live model (modelNs) within 5 % + 20 us and never come early.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "abi_harness.h"

namespace crystal::test {
namespace {

struct Channel {
  void* send = nullptr;
  void* recv = nullptr;
  void* listen = nullptr;
  void* smr = nullptr;
  void* rmr = nullptr;
  int host_sock = -1;
};

// Channel `dev` of a ring whose both neighbours are virtual: send to virtual next (forged
// VirtualPeer handle), receive from virtual prev (Hello{Virtual} on our listen handle), both
// naming the ring channel as the host does.
Channel openChannel(const ncclNet_v11_t* n, void* ctx, int dev, int nranks, char* sbuf,
                    char* rbuf, std::size_t bytes) {
  Channel c;
  live::NetHandle vh = ringPeerHandle(0, nranks, dev);
  char hbytes[128];
  std::memcpy(hbytes, &vh, sizeof vh);
  EXPECT_EQ(n->connect(ctx, dev, hbytes, &c.send, nullptr), ncclSuccess);
  EXPECT_NE(c.send, nullptr);  // a virtual peer connects at once
  char lh[128] = {};
  EXPECT_EQ(n->listen(ctx, dev, lh, &c.listen), ncclSuccess);
  live::NetHandle h;
  EXPECT_TRUE(live::decodeHandle(lh, h));
  EXPECT_EQ(h.kind, live::HandleKind::RealListen);
  EXPECT_EQ(h.comm_id, 0x77u);
  void* rc = nullptr;
  EXPECT_EQ(n->accept(c.listen, &rc, nullptr), ncclSuccess);
  EXPECT_EQ(rc, nullptr);  // nobody connected yet: NULL, not blocking
  c.host_sock = openRingHello(h, 0, nranks, dev);
  EXPECT_GE(c.host_sock, 0);
  c.recv = pollUntil([&](void** out) { return n->accept(c.listen, out, nullptr); });
  EXPECT_NE(c.recv, nullptr);
  EXPECT_EQ(n->regMr(c.send, sbuf, bytes * 8, NCCL_PTR_HOST, &c.smr), ncclSuccess);
  EXPECT_EQ(n->regMr(c.recv, rbuf, bytes * 8, NCCL_PTR_HOST, &c.rmr), ncclSuccess);
  return c;
}

void closeChannel(const ncclNet_v11_t* n, Channel& c) {
  EXPECT_EQ(n->deregMr(c.send, c.smr), ncclSuccess);
  EXPECT_EQ(n->deregMr(c.recv, c.rmr), ncclSuccess);
  EXPECT_EQ(n->closeSend(c.send), ncclSuccess);
  EXPECT_EQ(n->closeRecv(c.recv), ncclSuccess);
  EXPECT_EQ(n->closeListen(c.listen), ncclSuccess);
  ::close(c.host_sock);
}

// One real rank of an nranks (<= 8: one target node) ring all-reduce on `nch` channels,
// through the built library on the real clock: 2(n-1) steps per channel, step k sent once
// step k-1 arrived, up to 8 receives posted ahead. (Multi-node rings and their chain of
// virtual members: ring_emulation_test.cc, on a virtual clock.)
void ringAllReduce(int nranks, int nch) {
  const ncclNet_v11_t* n = Plugin::get().v11;
  void* ctx = nullptr;
  ASSERT_EQ(n->init(&ctx, 0x77, nullptr, testLogger, nullptr), ncclSuccess);
  constexpr std::size_t kStep = 1 << 20;
  constexpr int kDepth = 8;
  const int steps = 2 * (nranks - 1);
  std::vector<std::vector<char>> sbuf(nch, std::vector<char>(kStep * kDepth));
  std::vector<std::vector<char>> rbuf(nch, std::vector<char>(kStep * kDepth));
  std::vector<Channel> ch;
  for (int c = 0; c < nch; ++c)
    ch.push_back(openChannel(n, ctx, c, nranks, sbuf[c].data(), rbuf[c].data(), kStep));

  struct Progress {
    int sent = 0, send_done = 0, posted = 0, recv_done = 0;
    void* sreq[kDepth] = {};
    void* rreq[kDepth] = {};
    // The plugin reads its clock somewhere inside isend/irecv: between *_post (before the
    // call) and *_post_end (after it).
    std::vector<live::TimeNs> send_post, recv_post, send_post_end, recv_post_end;
    std::vector<live::TimeNs> recv_at, send_at, recv_miss, send_miss;
    live::TimeNs s_miss = 0, r_miss = 0;  // start of the last "not done" test of the head
  };
  std::vector<Progress> pr(nch);
  const live::TimeNs t0 = live::nowNs();
  bool all = false;
  while (!all) {
    all = true;
    for (int c = 0; c < nch; ++c) {
      Progress& p = pr[c];
      while (p.posted < steps && p.posted < p.recv_done + kDepth) {
        void* data = rbuf[c].data() + (p.posted % kDepth) * kStep;
        std::size_t size = kStep;
        int tag = 1;
        void* req = nullptr;
        p.recv_post.push_back(live::nowNs());  // no later than the plugin's own post time
        ASSERT_EQ(n->irecv(ch[c].recv, 1, &data, &size, &tag, &ch[c].rmr, nullptr, &req),
                  ncclSuccess);
        p.recv_post_end.push_back(live::nowNs());
        ASSERT_NE(req, nullptr);
        p.rreq[p.posted % kDepth] = req;
        ++p.posted;
      }
      // Step k leaves once step k-1 has arrived (reduce-and-forward), at most 8 in flight.
      if (p.sent < steps && p.sent <= p.recv_done && p.sent < p.send_done + kDepth) {
        void* req = nullptr;
        p.send_post.push_back(live::nowNs());
        ASSERT_EQ(n->isend(ch[c].send, sbuf[c].data() + (p.sent % kDepth) * kStep, kStep, 0,
                           ch[c].smr, nullptr, &req),
                  ncclSuccess);
        p.send_post_end.push_back(live::nowNs());
        ASSERT_NE(req, nullptr);
        p.sreq[p.sent % kDepth] = req;
        ++p.sent;
      }
      if (p.send_done < p.sent) {
        int done = 0, size = -1;
        const live::TimeNs ts = live::nowNs();
        ASSERT_EQ(n->test(p.sreq[p.send_done % kDepth], &done, &size), ncclSuccess);
        if (done) {
          EXPECT_EQ(size, static_cast<int>(kStep));
          p.send_at.push_back(live::nowNs());
          p.send_miss.push_back(p.s_miss);
          p.s_miss = 0;
          ++p.send_done;
        } else {
          p.s_miss = ts;
        }
      }
      if (p.recv_done < p.posted) {
        int done = 0, size = -1;
        const live::TimeNs ts = live::nowNs();
        ASSERT_EQ(n->test(p.rreq[p.recv_done % kDepth], &done, &size), ncclSuccess);
        if (done) {
          EXPECT_EQ(size, static_cast<int>(kStep));
          p.recv_at.push_back(live::nowNs());
          p.recv_miss.push_back(p.r_miss);
          p.r_miss = 0;
          ++p.recv_done;
        } else {
          p.r_miss = ts;
        }
      }
      all = all && p.recv_done == steps && p.send_done == steps;
    }
  }
  const live::TimeNs total = live::nowNs() - t0;
  // A ring on one node (period 1, crystal/live/ring_timing.h) over the real rank's share of
  // the NVLink (1 to nch channels busy). A send is done when it has left (posted + share):
  // not early. No step is withheld: the last "not done" answer came before the lockstep
  // arrival (send k posted + slowest share + latency) + 5 % + 20 us. Receives have no lower
  // bound here: the virtual members follow an idealised copy of the real rank that never
  // waits (open loop), in slices, so they may deliver before this harness's own (slower,
  // unsliced) send k; their exact times are checked on a virtual clock in
  // ring_emulation_test.cc. (This bound used to pass only because the default policy's
  // 1 MiB zero-fill ran inside test(); under data none it failed.)
  const Config cfg;
  const live::RingHop hop =
      live::commLinks(*live::makeTargetModel(cfg), cfg.cluster, nranks).ring_nvl;
  // The real rank's sends take the link for their bytes (its GPU spent the slice time).
  const live::TimeNs fast = hop.occupancy(kStep, 1, 0, false),
                     slow = hop.occupancy(kStep, nch, 0, false);
  const live::TimeNs step_latency = hop.latency_ns + hop.unit_ns;  // the model's whole α
  const std::int64_t tol = tolerance(slow + step_latency);
  int late = 0;
  for (int c = 0; c < nch; ++c) {
    const Progress& p = pr[c];
    // The real rank's share of the link carries one send at a time: a send posted while the
    // one before still occupies it leaves after that one.
    live::TimeNs link_free = 0;
    for (int k = 0; k < steps; ++k) {
      const live::TimeNs predicted_end =
          std::max(p.recv_post_end[k], p.send_post_end[k] + slow + step_latency);
      EXPECT_LT(p.recv_miss[k], predicted_end + tol) << "recv step " << k << " withheld";
      EXPECT_GE(p.send_at[k], p.send_post[k] + fast) << "send step " << k << " came early";
      link_free = std::max(p.send_post_end[k], link_free) + slow;
      EXPECT_LT(p.send_miss[k], link_free + tol) << "send step " << k << " withheld";
      late += p.recv_at[k] - predicted_end > tol;
    }
  }
  const double lockstep = static_cast<double>(steps) * static_cast<double>(fast + step_latency);
  std::printf("ring n=%d channels=%d: %d steps x %zu B, measured %.1f us, lockstep %.1f us "
              "(%+.2f %%), steps seen late by the harness: %d\n",
              nranks, nch, steps, kStep, total / 1e3, lockstep / 1e3,
              100.0 * (total - lockstep) / lockstep, late);
  for (auto& c : ch) closeChannel(n, c);
  EXPECT_EQ(n->finalize(ctx), ncclSuccess);
}

TEST(PluginVirtual, RingAllReduce8Ranks2Channels) { ringAllReduce(8, 2); }
TEST(PluginVirtual, RingAllReduce4Ranks4Channels) { ringAllReduce(4, 4); }

TEST(PluginVirtual, GroupedReceiveReportsPostedSizesAtModelTime) {
  const ncclNet_v11_t* n = Plugin::get().v11;
  void* ctx = nullptr;
  ASSERT_EQ(n->init(&ctx, 0x78, nullptr, testLogger, nullptr), ncclSuccess);
  char lh[128] = {};
  void* lc = nullptr;
  ASSERT_EQ(n->listen(ctx, 2, lh, &lc), ncclSuccess);
  live::NetHandle h;
  ASSERT_TRUE(live::decodeHandle(lh, h));
  const int sock = openHello(h, live::PeerKind::Virtual);
  void* rc = pollUntil([&](void** out) { return n->accept(lc, out, nullptr); });
  ASSERT_NE(rc, nullptr);
  std::vector<char> buf(3 << 20);
  void* mr = nullptr;
  ASSERT_EQ(n->regMr(rc, buf.data(), buf.size(), NCCL_PTR_HOST, &mr), ncclSuccess);
  void* data[3] = {buf.data(), buf.data() + (1 << 20), buf.data() + (2 << 20)};
  std::size_t sizes[3] = {1 << 20, 512 << 10, 256 << 10};
  int tags[3] = {5, 6, 7};
  void* mrs[3] = {mr, mr, mr};
  void* req = nullptr;
  const live::TimeNs t0 = live::nowNs();
  ASSERT_EQ(n->irecv(rc, 3, data, sizes, tags, mrs, nullptr, &req), ncclSuccess);
  int got[3] = {-1, -1, -1};
  live::TimeNs miss = 0;
  const live::TimeNs t1 = waitDone(n, req, got, &miss);
  EXPECT_EQ(got[0], 1 << 20);
  EXPECT_EQ(got[1], 512 << 10);
  EXPECT_EQ(got[2], 256 << 10);
  const live::TimeNs predicted = modelNs((1 << 20) + (512 << 10) + (256 << 10));
  EXPECT_GE(t1 - t0, predicted);
  EXPECT_LT(miss - t0, predicted + tolerance(predicted));
  EXPECT_EQ(n->irecvConsumed(rc, 3, req), ncclSuccess);
  EXPECT_EQ(n->deregMr(rc, mr), ncclSuccess);
  EXPECT_EQ(n->closeRecv(rc), ncclSuccess);
  EXPECT_EQ(n->closeListen(lc), ncclSuccess);
  ::close(sock);
}

// NCCL 2.28.9 pre-sets *request to (void*)0x1 for a single LL/LL128 receive when
// NCCL_NET_OPTIONAL_RECV_COMPLETION is on (a hint that completion may be skipped) and then
// tests whatever request the plugin returns: the plugin must replace the hint with a real
// request that completes with the posted size, never leave the sentinel behind.
TEST(PluginVirtual, OptionalCompletionHintIsReplacedByARealRequest) {
  const ncclNet_v11_t* n = Plugin::get().v11;
  void* ctx = nullptr;
  ASSERT_EQ(n->init(&ctx, 0x79, nullptr, testLogger, nullptr), ncclSuccess);
  char lh[128] = {};
  void* lc = nullptr;
  ASSERT_EQ(n->listen(ctx, 1, lh, &lc), ncclSuccess);
  live::NetHandle h;
  ASSERT_TRUE(live::decodeHandle(lh, h));
  const int sock = openHello(h, live::PeerKind::Virtual);
  void* rc = pollUntil([&](void** out) { return n->accept(lc, out, nullptr); });
  ASSERT_NE(rc, nullptr);
  std::vector<char> buf(64 << 10);
  void* mr = nullptr;
  ASSERT_EQ(n->regMr(rc, buf.data(), buf.size(), NCCL_PTR_HOST, &mr), ncclSuccess);
  void* data = buf.data();
  std::size_t size = buf.size();
  int tag = 3;
  void* req = reinterpret_cast<void*>(0x1);
  ASSERT_EQ(n->irecv(rc, 1, &data, &size, &tag, &mr, nullptr, &req), ncclSuccess);
  ASSERT_NE(req, nullptr);
  ASSERT_NE(req, reinterpret_cast<void*>(0x1));
  int got = -1;
  ASSERT_GE(waitDone(n, req, &got, nullptr), 0);
  EXPECT_EQ(got, 64 << 10);
  EXPECT_EQ(n->deregMr(rc, mr), ncclSuccess);
  EXPECT_EQ(n->closeRecv(rc), ncclSuccess);
  EXPECT_EQ(n->closeListen(lc), ncclSuccess);
  ::close(sock);
}

TEST(PluginVirtual, MaxOutstandingRequestsThenNull) {
  const ncclNet_v11_t* n = Plugin::get().v11;
  void* ctx = nullptr;
  ASSERT_EQ(n->init(&ctx, 0x79, nullptr, testLogger, nullptr), ncclSuccess);
  live::NetHandle vh = virtualPeerHandle(3, 8);
  void* sc = nullptr;
  ASSERT_EQ(n->connect(ctx, 0, &vh, &sc, nullptr), ncclSuccess);
  std::vector<char> buf(4096);
  void* mr = nullptr;
  ASSERT_EQ(n->regMr(sc, buf.data(), buf.size(), NCCL_PTR_HOST, &mr), ncclSuccess);
  // 32 per comm x maxRecvs (8) on the send side.
  std::vector<void*> reqs;
  for (int i = 0; i < 256; ++i) {
    void* r = nullptr;
    ASSERT_EQ(n->isend(sc, buf.data(), 64, 0, mr, nullptr, &r), ncclSuccess);
    ASSERT_NE(r, nullptr) << i;
    reqs.push_back(r);
  }
  void* extra = reinterpret_cast<void*>(0x1);
  ASSERT_EQ(n->isend(sc, buf.data(), 64, 0, mr, nullptr, &extra), ncclSuccess);
  EXPECT_EQ(extra, nullptr);  // NCCL retries later
  ASSERT_GE(waitDone(n, reqs[0]), 0);
  void* again = nullptr;
  ASSERT_EQ(n->isend(sc, buf.data(), 64, 0, mr, nullptr, &again), ncclSuccess);
  EXPECT_NE(again, nullptr);  // a slot came free
  reqs[0] = again;
  for (void* r : reqs) ASSERT_GE(waitDone(n, r), 0);
  EXPECT_EQ(n->closeSend(sc), ncclSuccess);  // close releases registrations too
}

TEST(PluginVirtual, V8ShimIntSizes) {
  const ncclNet_v8_t* n = Plugin::get().v8;
  ASSERT_EQ(n->init(testLogger), ncclSuccess);
  live::NetHandle vh = virtualPeerHandle(2, 4);
  void* sc = pollUntil([&](void** out) { return n->connect(1, &vh, out, nullptr); });
  ASSERT_NE(sc, nullptr);
  std::vector<char> buf(1 << 20);
  void* mr = nullptr;
  ASSERT_EQ(n->regMr(sc, buf.data(), buf.size(), NCCL_PTR_HOST, &mr), ncclSuccess);
  void* req = nullptr;
  const live::TimeNs t0 = live::nowNs();
  ASSERT_EQ(n->isend(sc, buf.data(), 1 << 20, 0, mr, &req), ncclSuccess);
  int done = 0, size = 0;
  while (!done) ASSERT_EQ(n->test(req, &done, &size), ncclSuccess);
  EXPECT_GE(live::nowNs() - t0, modelNs(1 << 20));
  EXPECT_EQ(size, 1 << 20);
  EXPECT_EQ(n->isend(sc, buf.data(), -1, 0, mr, &req), ncclInvalidArgument);
  EXPECT_EQ(n->closeSend(sc), ncclSuccess);
}

}  // namespace
}  // namespace crystal::test
