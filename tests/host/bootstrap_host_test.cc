// The host against fake real ranks that speak NCCL 2.28.9's real-rank side: check-in, ring,
// the three init all-gathers, ring connection exchange over 2 channels with syncs, barrier,
// split into 2 colors, destroy — for 2..1024 ranks with 1 or 2 real ones. Asserts the exact
// bytes the real ranks receive for their virtual peers.
#include "crystal/host/bootstrap_host.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <thread>

#include "crystal/live/handle.h"
#include "fake_rank.h"
#include "net.h"
#include "virtual_slices.h"

namespace crystal::host {
namespace {

using test::FakeRank;

struct RankOutcome {
  int rank = -1;
  wire::SocketAddress next;
  std::vector<wire::RingData> ring_data;
  std::vector<wire::PeerInfo> peer_info;
  std::vector<wire::AllGatherInfo> graph_info;
  FakeRank::SetupResult setup;
  std::vector<live::Hello> hellos;
  std::uint32_t first_listen_id = 0;
  wire::SocketAddress own_p2p;
  bool ring_conn_info_ok = true;
  // child of the split (if any)
  int child_rank = -1, child_n = 0;
  std::uint64_t child_hash = 0;
  wire::SocketAddress child_next;
  std::vector<wire::RingData> child_ring_data;
  std::vector<wire::PeerInfo> child_peer_info;
};

// The whole lifetime of one real rank, in its own thread.
RankOutcome runRank(const UniqueId& id, int rank, int n, bool split, bool prev_virtual) {
  RankOutcome out;
  out.rank = rank;
  FakeRank f(id, rank, n);
  out.next = f.init();
  f.initAllGathers();
  out.ring_data = f.ring_data;
  out.peer_info = f.peer_info;
  out.graph_info = f.graph_info;
  out.first_listen_id = f.next_listen_id;
  out.setup = f.ringSetup(2);
  // A virtual sender opens one data stream per channel to this rank's plugin listener.
  if (prev_virtual) out.hellos = f.acceptHellos(2);
  f.barrier();
  // Runtime connect's 2-byte ringConnInfo all-gather: virtual ranks echo the real choice.
  const std::array<std::byte, 2> rci{std::byte{0}, std::byte{1}};
  for (const auto& slice : f.allGather(rci))
    out.ring_conn_info_ok &=
        slice.size() == 2 && slice[1] == std::byte{1} && slice[0] == std::byte{0};
  if (split) {
    auto child = f.split(rank % 2, rank);
    if (child) {
      out.child_rank = child->rank();
      out.child_n = child->nranks();
      out.child_hash = child->commHash();
      out.child_next = child->next_address;
      child->initAllGathers();
      out.child_ring_data = child->ring_data;
      out.child_peer_info = child->peer_info;
      child->barrier();
      child->close();
    }
  }
  f.close();
  return out;
}

class HostTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HostOptions o;
    o.stall_timeout = std::chrono::milliseconds(20000);
    o.emulation_id = 77;
    host = std::make_unique<BootstrapHost>(o);
    host->setSplitResolver([](std::uint64_t, int, int r) { return SplitChoice{r % 2, r}; });
    host->start();
  }
  std::unique_ptr<BootstrapHost> host;

  CommStatus statusOf(std::uint64_t hash) {
    for (const auto& s : host->comms())
      if (s.comm_hash == hash) return s;
    return {};
  }
  bool waitPhase(std::uint64_t hash, CommPhase p) {
    for (int i = 0; i < 400; ++i) {
      if (statusOf(hash).phase == p) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  void scenario(int n, std::vector<int> real, bool split) {
    const UniqueId id = host->mintUniqueId();
    const std::uint64_t hash = host->declareComm(id, {n, real, kSupportedNcclVersion, "world"});
    EXPECT_EQ(hash, commHashOf(id));
    std::vector<std::future<RankOutcome>> futs;
    auto isReal = [&](int r) { return std::find(real.begin(), real.end(), r) != real.end(); };
    for (int r : real)
      futs.push_back(
          std::async(std::launch::async, runRank, id, r, n, split, !isReal((r - 1 + n) % n)));
    std::vector<RankOutcome> outs;
    for (auto& f : futs) outs.push_back(f.get());
    const std::uint16_t ring_port = host->ringPort(), p2p_port = host->p2pPort();

    for (const auto& o : outs) {
      const int r = o.rank;
      const int next = (r + 1) % n, prev = (r - 1 + n) % n;
      if (!isReal(next)) {
        EXPECT_EQ(o.next.str(), aliasAddress(next, ring_port).str());
      }
      ASSERT_EQ(o.ring_data.size(), static_cast<std::size_t>(n));
      ASSERT_EQ(o.peer_info.size(), static_cast<std::size_t>(n));
      for (int v = 0; v < n; ++v) {
        const auto& pi = o.peer_info[static_cast<std::size_t>(v)];
        EXPECT_EQ(pi.rank, v);
        EXPECT_EQ(pi.version, 22809);
        EXPECT_EQ(pi.cuda_comp_cap, 90);
        EXPECT_EQ(pi.total_global_mem, 150ULL << 30);
        EXPECT_EQ(pi.cu_mem_support, 1);
        if (isReal(v)) continue;
        EXPECT_EQ(o.ring_data[static_cast<std::size_t>(v)].peer_address.str(),
                  aliasAddress(v, p2p_port).str());
        EXPECT_EQ(pi.host_hash, virtualHostHash(hash, v));
        EXPECT_NE(pi.host_hash, o.peer_info[static_cast<std::size_t>(r)].host_hash);
        const auto& g = o.graph_info[static_cast<std::size_t>(v)];
        EXPECT_EQ(g.topo_ranks.ring_recv[0], v);
        EXPECT_EQ(g.topo_ranks.ring_send[63], v);
        EXPECT_EQ(g.topo_ranks.ring_next[17], -1);
        EXPECT_EQ(g.topo_ranks.tree_to_child1[5], v);
        EXPECT_EQ(g.graph_info[1].n_channels, 2);
        EXPECT_EQ(g.cpu_vendor, 2);
      }
      EXPECT_TRUE(o.ring_conn_info_ok);
      // Real peers' slices arrive intact through the host.
      for (const auto& q : outs)
        EXPECT_EQ(o.peer_info[static_cast<std::size_t>(q.rank)].host_hash,
                  q.peer_info[static_cast<std::size_t>(q.rank)].host_hash);
      // Connection exchange: forged recv entries from a virtual sendPeer, send entries from a
      // virtual recvPeer.
      if (!isReal(next)) {
        ASSERT_EQ(o.setup.from_send_peer.size(), 2u);
        for (std::size_t k = 0; k < o.setup.from_send_peer.size(); ++k) {
          const auto& e = o.setup.from_send_peer[k];
          live::NetHandle h;
          ASSERT_TRUE(live::decodeHandle(e.bytes, h));
          EXPECT_EQ(h.kind, live::HandleKind::VirtualPeer);
          EXPECT_EQ(h.rank, next);
          EXPECT_EQ(h.nranks, n);
          EXPECT_EQ(h.comm_id, hash);
          EXPECT_EQ(h.emulation, 77u);
          EXPECT_EQ(e.useGdr(), 1);
          // Identity of the connection (wire v2): ring graph, distance 1, k-th channel.
          EXPECT_EQ(h.self_rank, r);
          EXPECT_EQ(h.distance, 1);
          EXPECT_EQ(h.ordinal, k);
          EXPECT_EQ(h.graph, live::kGraphRing);
          // NCCL's channels per tree before duplication: min(tree, ring) of the graph info.
          EXPECT_EQ(h.tree_channels, 2);
        }
      }
      if (!isReal(prev)) {
        ASSERT_EQ(o.setup.from_recv_peer.size(), 2u);
        for (const auto& e : o.setup.from_recv_peer) {
          std::int32_t proxy_rank = -1;
          std::memcpy(&proxy_rank, e.bytes, 4);
          EXPECT_EQ(proxy_rank, prev);
          EXPECT_EQ(e.useGdr(), 1);
        }
        ASSERT_EQ(o.hellos.size(), 2u);
        for (std::size_t k = 0; k < 2; ++k) {
          const auto& h = o.hellos[k];
          EXPECT_EQ(h.magic, live::kHandleMagic);
          EXPECT_EQ(h.peer, live::PeerKind::Virtual);
          EXPECT_EQ(h.sender_rank, prev);
          EXPECT_EQ(h.comm_id, hash);
          EXPECT_GE(h.listen_id, o.first_listen_id);
          EXPECT_LT(h.listen_id, o.first_listen_id + 2);
          // The k-th receive entry (listen k) is channel ordinal k of the ring exchange.
          EXPECT_EQ(h.ordinal, h.listen_id - o.first_listen_id);
          EXPECT_EQ(h.receiver_rank, r);
          EXPECT_EQ(h.nranks, n);
          EXPECT_EQ(h.distance, 1);
          EXPECT_EQ(h.graph, live::kGraphRing);
          EXPECT_EQ(h.tree_channels, 2);
        }
        EXPECT_NE(o.hellos[0].listen_id, o.hellos[1].listen_id);
      }
      if (split && o.child_rank >= 0) {
        EXPECT_EQ(o.child_hash, splitCommHash(hash, 1, r % 2));
        const int cn = o.child_n;
        EXPECT_EQ(cn, n / 2 + ((n % 2 == 1 && r % 2 == 0) ? 1 : 0));
        EXPECT_EQ(o.child_rank, r / 2);
        const int cnext = (o.child_rank + 1) % cn;
        if (!isReal(cnext * 2 + r % 2) && cn > 1) {
          EXPECT_EQ(o.child_next.str(), aliasAddress(cnext, ring_port).str());
        }
        ASSERT_EQ(o.child_peer_info.size(), static_cast<std::size_t>(cn));
        for (int v = 0; v < cn; ++v) {
          EXPECT_EQ(o.child_peer_info[static_cast<std::size_t>(v)].rank, v);
          if (isReal(v * 2 + r % 2)) continue;
          EXPECT_EQ(o.child_ring_data[static_cast<std::size_t>(v)].peer_address.str(),
                    aliasAddress(v, p2p_port).str());
          EXPECT_EQ(o.child_peer_info[static_cast<std::size_t>(v)].host_hash,
                    virtualHostHash(o.child_hash, v));
        }
      }
    }
    EXPECT_TRUE(host->errors().empty()) << host->errors().front().message;
    EXPECT_TRUE(waitPhase(hash, CommPhase::Destroyed)) << "comm not released after destroy";
  }
};

// The host's thread carries a name (`top -H`, `ps -L`, thread_sample.py tell it from NCCL's
// and the program's): it names itself as it starts, so it is looked for a while.
TEST_F(HostTest, ItsThreadIsNamed) {
  auto named = [] {
    for (const auto& t : std::filesystem::directory_iterator("/proc/self/task")) {
      std::ifstream f(t.path() / "comm");
      std::string name;
      if (std::getline(f, name) && name == "crystal host") return true;
    }
    return false;
  };
  bool found = named();
  for (int i = 0; i < 200 && !found; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    found = named();
  }
  EXPECT_TRUE(found) << "no thread of this process is named \"crystal host\"";
}

// All-to-all from one real rank: a NET connection each way with every virtual peer (send/recv
// setup, graph NULL, tags (i<<8)), plus one Hello per virtual sender.
TEST_F(HostTest, AllToAllFromOneRealRank) {
  const int n = 64, me = 5;
  const UniqueId id = host->mintUniqueId();
  const std::uint64_t hash = host->declareComm(id, {n, {me}, kSupportedNcclVersion, "world"});
  FakeRank f(id, me, n);
  f.init();
  f.initAllGathers();
  std::vector<int> peers;
  for (int p = 0; p < n; ++p)
    if (p != me) peers.push_back(p);
  const auto res = f.p2pSetup(peers, peers);
  ASSERT_EQ(res.recv_entry_of.size(), peers.size());
  ASSERT_EQ(res.send_entry_of.size(), peers.size());
  for (int p : peers) {
    live::NetHandle h;
    ASSERT_TRUE(live::decodeHandle(res.recv_entry_of.at(p).bytes, h));
    EXPECT_EQ(h.kind, live::HandleKind::VirtualPeer);
    EXPECT_EQ(h.rank, p);
    EXPECT_EQ(h.conn_seq, 0u);  // first connection forged for (comm, p)
    std::int32_t proxy_rank = -1;
    std::memcpy(&proxy_rank, res.send_entry_of.at(p).bytes, 4);
    EXPECT_EQ(proxy_rank, p);
  }
  const auto hellos = f.acceptHellos(static_cast<int>(peers.size()));
  std::set<int> senders;
  for (const auto& h : hellos) {
    EXPECT_EQ(h.peer, live::PeerKind::Virtual);
    EXPECT_EQ(h.comm_id, hash);
    senders.insert(h.sender_rank);
  }
  EXPECT_EQ(senders, std::set<int>(peers.begin(), peers.end()));
  f.barrier();
  f.close();
  EXPECT_TRUE(host->errors().empty());
  EXPECT_TRUE(waitPhase(hash, CommPhase::Destroyed));
}

// Two root-created communicators initialised at the same time on one host, told apart by
// their magic only (same three listeners, same alias addresses).
TEST_F(HostTest, TwoCommunicatorsAtOnce) {
  const UniqueId a = host->mintUniqueId(), b = host->mintUniqueId();
  const auto ha = host->declareComm(a, {16, {2}, kSupportedNcclVersion, "a"});
  const auto hb = host->declareComm(b, {32, {2}, kSupportedNcclVersion, "b"});
  auto fa = std::async(std::launch::async, runRank, a, 2, 16, true, true);
  auto fb = std::async(std::launch::async, runRank, b, 2, 32, true, true);
  const RankOutcome oa = fa.get(), ob = fb.get();
  EXPECT_EQ(oa.peer_info.size(), 16u);
  EXPECT_EQ(ob.peer_info.size(), 32u);
  EXPECT_EQ(oa.peer_info[3].host_hash, virtualHostHash(ha, 3));
  EXPECT_EQ(ob.peer_info[3].host_hash, virtualHostHash(hb, 3));
  EXPECT_EQ(oa.child_n, 8);
  EXPECT_EQ(ob.child_n, 16);
  EXPECT_TRUE(host->errors().empty());
  EXPECT_TRUE(waitPhase(ha, CommPhase::Destroyed));
  EXPECT_TRUE(waitPhase(hb, CommPhase::Destroyed));
  EXPECT_EQ(host->comms().size(), 4u);  // two roots + one child each with a real member
}

TEST_F(HostTest, TwoRanksOneReal) { scenario(2, {0}, false); }
TEST_F(HostTest, ThreeRanksOneReal) { scenario(3, {1}, true); }
TEST_F(HostTest, EightRanksTwoAdjacentReal) { scenario(8, {3, 4}, true); }
TEST_F(HostTest, EightRanksTwoApartReal) { scenario(8, {0, 5}, true); }
TEST_F(HostTest, SixtyFourRanksRankZeroReal) { scenario(64, {0}, true); }
TEST_F(HostTest, SixtyFourRanksOnlyRankFiveReal) { scenario(64, {5}, true); }
TEST_F(HostTest, ThousandTwentyFourRanksTwoReal) { scenario(1024, {0, 513}, true); }

}  // namespace
}  // namespace crystal::host
