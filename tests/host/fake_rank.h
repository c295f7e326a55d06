// A fake real rank for CPU tests: speaks the real-rank side of NCCL 2.28.9's bootstrap the
// way bootstrap.cc / transport.cc do (blocking sockets, same message order), so the host can
// be tested without a GPU. Every wait has a timeout: a host bug fails the test, never hangs it.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "crystal/host/bootstrap_host.h"
#include "crystal/live/handle.h"
#include "wire.h"

namespace crystal::host::test {

// Owned blocking socket with 10 s send/recv timeouts.
class Sock {
 public:
  Sock() = default;
  explicit Sock(int fd);
  Sock(Sock&& o) noexcept;
  Sock& operator=(Sock&& o) noexcept;
  ~Sock();
  [[nodiscard]] int fd() const { return fd_; }
  void sendAll(std::span<const std::byte> b) const;
  void recvAll(std::span<std::byte> b) const;
  template <typename T>
  void sendValue(const T& v) const {
    sendAll(std::as_bytes(std::span<const T, 1>(&v, 1)));
  }
  template <typename T>
  T recvValue() const {
    T v;
    recvAll(std::as_writable_bytes(std::span<T, 1>(&v, 1)));
    return v;
  }
  [[nodiscard]] bool atEof() const;  // blocks until EOF (true) or data (false)
  void close();

 private:
  int fd_ = -1;
};

Sock listenLoopback();                           // 127.0.0.1, ephemeral port
wire::SocketAddress sockAddress(const Sock& s);  // getsockname
Sock acceptOne(const Sock& listener, int timeout_ms = 10000);
Sock connectTo(const wire::SocketAddress& a, std::uint64_t magic, std::int32_t type = 1);

struct Received {  // one bootstrapRecv'd message
  int peer = -1;
  int tag = 0;
  std::vector<std::byte> payload;
};

class FakeRank {
 public:
  FakeRank(UniqueId id, int rank, int nranks);

  // bootstrapInit: listeners, check-in, root reply, ring connect. Returns the next's address.
  wire::SocketAddress init();
  // socketRingAllGather: returns all n slices (own slice = `mine`).
  std::vector<std::vector<std::byte>> allGather(std::span<const std::byte> mine);
  // The three init all-gathers with real-looking slices; results kept below.
  void initAllGathers(int version = kSupportedNcclVersion);
  // The same with this rank's allGatherInfo slice given, and `before_graph` run where NCCL
  // builds its topology (between the peerInfo and allGatherInfo all-gathers).
  void initAllGathersWith(const wire::AllGatherInfo& graph, int version = kSupportedNcclVersion,
                          const std::function<void()>& before_graph = {});
  // bootstrapIntraNodeAllGather over `members` (global ranks, this rank among them): every
  // member's slice, in member order.
  std::vector<std::vector<std::byte>> intraNodeAllGather(const std::vector<int>& members,
                                                         std::span<const std::byte> mine);
  // bootstrapIntraNodeBarrier over `members` (tag = members[0], as init.cc passes it).
  void intraNodeBarrier(const std::vector<int>& members);
  // ncclTransportP2pSetup for a ring graph (id 0) over `channels` channels: peers r-1/r+1.
  // Returns what the peers replied (recv entries from sendPeer, send entries from recvPeer).
  struct SetupResult {
    std::vector<wire::ConnectEntry> from_send_peer, from_recv_peer;
  };
  SetupResult ringSetup(int channels);
  // ncclTransportP2pSetup(graph = NULL, connIndex 1) after send/recv calls: one channel per
  // peer. Returns, per peer, the entries it replied (recv entries for our sends, send entries
  // for our receives).
  struct P2pResult {
    std::map<int, wire::ConnectEntry> recv_entry_of, send_entry_of;
  };
  P2pResult p2pSetup(const std::vector<int>& send_to, const std::vector<int>& recv_from);
  void barrier();
  // Accepts `n` data streams on the plugin data listener; returns their Hellos.
  std::vector<live::Hello> acceptHellos(int n);

  void bootstrapSend(int peer, int tag, std::span<const std::byte> data);
  std::vector<std::byte> bootstrapRecv(int peer, int tag);

  // ncclCommSplit from this rank: split all-gather, COMMSPLIT exchange, child ring. Returns the
  // child (already ring-connected) or nullptr for NOCOLOR.
  std::unique_ptr<FakeRank> split(int color, int key);

  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] int nranks() const { return nranks_; }
  [[nodiscard]] std::uint64_t commHash() const { return hash_; }
  [[nodiscard]] std::uint64_t magic() const { return magic_; }
  void close();  // ncclCommDestroy: close every socket
  // Raw bytes on the ring socket to next (fault tests).
  void sendOnRing(std::span<const std::byte> bytes) { next_.sendAll(bytes); }

  std::vector<wire::RingData> ring_data;
  std::vector<wire::PeerInfo> peer_info;
  std::vector<wire::AllGatherInfo> graph_info;
  wire::SocketAddress next_address;
  std::uint32_t next_listen_id = 100;
  int split_count = 0;

 private:
  FakeRank(int rank, int nranks, std::uint64_t magic, std::uint64_t hash);
  void ringConnect(const wire::SocketAddress& next);
  wire::ConnectEntry recvEntry();
  wire::ConnectEntry sendEntry() const;

  int rank_, nranks_;
  std::uint64_t magic_ = 0, root_magic_ = 0, hash_ = 0;
  wire::SocketAddress root_addr_;
  Sock ring_listen_, p2p_listen_, data_listen_, next_, prev_;
  std::vector<Received> unexpected_;
};

// Real-looking slices of a fake rank.
wire::PeerInfo fakePeerInfo(int rank, std::uint64_t comm_hash, int version);
wire::AllGatherInfo fakeGraphInfo(int rank);

}  // namespace crystal::host::test
