#include "fake_rank.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fmt/core.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace crystal::host::test {

namespace {
[[noreturn]] void die(const std::string& what) {
  throw std::runtime_error(fmt::format("fake rank: {}: {}", what, std::strerror(errno)));
}
void setTimeouts(int fd) {
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  const int one = 1;  // NCCL's socketSetFlags sets TCP_NODELAY on every bootstrap socket
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}
}  // namespace

Sock::Sock(int fd) : fd_(fd) {}
Sock::Sock(Sock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
Sock& Sock::operator=(Sock&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}
Sock::~Sock() { close(); }
void Sock::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Sock::sendAll(std::span<const std::byte> b) const {
  std::size_t off = 0;
  while (off < b.size()) {
    const ssize_t n = ::send(fd_, b.data() + off, b.size() - off, MSG_NOSIGNAL);
    if (n <= 0) die("send");
    off += static_cast<std::size_t>(n);
  }
}

void Sock::recvAll(std::span<std::byte> b) const {
  std::size_t off = 0;
  while (off < b.size()) {
    const ssize_t n = ::recv(fd_, b.data() + off, b.size() - off, 0);
    if (n == 0) throw std::runtime_error("fake rank: recv: peer closed");
    if (n < 0) die("recv");
    off += static_cast<std::size_t>(n);
  }
}

bool Sock::atEof() const {
  std::byte b;
  const ssize_t n = ::recv(fd_, &b, 1, 0);
  if (n < 0) die("recv(eof)");
  return n == 0;
}

Sock listenLoopback() {
  Sock s(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(s.fd(), reinterpret_cast<sockaddr*>(&sin), sizeof sin) != 0) die("bind");
  if (::listen(s.fd(), 4096) != 0) die("listen");
  return s;
}

wire::SocketAddress sockAddress(const Sock& s) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(s.fd(), reinterpret_cast<sockaddr*>(&ss), &len);
  wire::SocketAddress a;
  std::memcpy(a.bytes, &ss, sizeof(sockaddr_in));
  return a;
}

Sock acceptOne(const Sock& listener, int timeout_ms) {
  pollfd p{listener.fd(), POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) != 1) throw std::runtime_error("fake rank: accept timed out");
  Sock s(::accept(listener.fd(), nullptr, nullptr));
  if (s.fd() < 0) die("accept");
  setTimeouts(s.fd());
  return s;
}

Sock connectTo(const wire::SocketAddress& a, std::uint64_t magic, std::int32_t type) {
  sockaddr_storage ss{};
  const socklen_t len = a.toSockaddr(ss);
  Sock s(::socket(AF_INET, SOCK_STREAM, 0));
  setTimeouts(s.fd());
  for (int attempt = 0;; ++attempt) {  // NCCL retries refused connects, too
    if (::connect(s.fd(), reinterpret_cast<sockaddr*>(&ss), len) == 0) break;
    if (attempt > 50) die(fmt::format("connect {}", a.str()));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    s = Sock(::socket(AF_INET, SOCK_STREAM, 0));
    setTimeouts(s.fd());
  }
  s.sendValue(magic);  // socketFinalizeConnect: magic, then type
  s.sendValue(type);
  return s;
}

namespace {
void sendFrame(const Sock& s, std::span<const std::byte> data) {
  s.sendValue(static_cast<std::int32_t>(data.size()));
  if (!data.empty()) s.sendAll(data);
}
std::vector<std::byte> recvFrame(const Sock& s, std::size_t max) {
  const auto size = s.recvValue<std::int32_t>();
  if (size < 0 || static_cast<std::size_t>(size) > max)
    throw std::runtime_error(fmt::format("fake rank: message truncated: {} > {}", size, max));
  std::vector<std::byte> out(static_cast<std::size_t>(size));
  if (size > 0) s.recvAll(out);
  return out;
}
// Accepts one connection and checks its handshake like socketFinalizeAccept (wrong magic:
// dropped, keep accepting).
Sock acceptWithMagic(const Sock& listener, std::uint64_t magic) {
  for (;;) {
    Sock s = acceptOne(listener);
    const auto m = s.recvValue<std::uint64_t>();
    const auto t = s.recvValue<std::int32_t>();
    if (m != magic) continue;
    if (t != 1) throw std::runtime_error("fake rank: wrong socket type");
    return s;
  }
}
}  // namespace

FakeRank::FakeRank(UniqueId id, int rank, int nranks) : rank_(rank), nranks_(nranks) {
  wire::BootstrapHandle h;
  std::memcpy(&h, id.bytes.data(), sizeof h);
  magic_ = root_magic_ = h.magic;
  root_addr_ = h.addr;
  hash_ = commHashOf(id);
}

FakeRank::FakeRank(int rank, int nranks, std::uint64_t magic, std::uint64_t hash)
    : rank_(rank), nranks_(nranks), magic_(magic), hash_(hash) {}

wire::SocketAddress FakeRank::init() {
  ring_listen_ = listenLoopback();
  Sock root_listen = listenLoopback();
  wire::ExtInfo info;
  info.rank = rank_;
  info.nranks = nranks_;
  info.iroot = 0;
  info.nroots = 1;
  info.listen_root_address = sockAddress(root_listen);
  info.connect_info = wire::RingConnectInfo::fromAddr(sockAddress(ring_listen_));
  {
    Sock root = connectTo(root_addr_, root_magic_);
    sendFrame(root, wire::bytesOf(info));
  }
  Sock reply = acceptWithMagic(root_listen, root_magic_);
  const auto next = wire::decodeExact<wire::RingConnectInfo>(recvFrame(reply, 128), "root reply");
  next_address = next.addr();
  ringConnect(next_address);
  p2p_listen_ = listenLoopback();
  data_listen_ = listenLoopback();
  return next_address;
}

void FakeRank::ringConnect(const wire::SocketAddress& next) {
  next_ = connectTo(next, magic_);
  prev_ = acceptWithMagic(ring_listen_, magic_);
}

namespace {
// socketRingAllGather between `next` and `prev` as rank r of n.
std::vector<std::vector<std::byte>> ringAllGather(const Sock& next, const Sock& prev, int r, int n,
                                                  std::span<const std::byte> mine) {
  const int size = static_cast<int>(mine.size());
  std::vector<std::vector<std::byte>> data(static_cast<std::size_t>(n));
  data[static_cast<std::size_t>(r)].assign(mine.begin(), mine.end());
  const int total = n / 2;
  for (int step = 0; step < total; ++step) {
    const bool last_uni = step == total - 1 && n % 2 == 0;
    const int s0 = (r - step + n) % n, r0 = (r - step - 1 + n) % n;
    const int s1 = (r + step) % n, r1 = (r + step + 1) % n;
    // Sizes first (socketDoubleSendRecv / socketSendRecv), then the data.
    next.sendValue(size);
    if (prev.recvValue<std::int32_t>() != size) throw std::runtime_error("fake rank: ring0 size");
    if (!last_uni) {
      prev.sendValue(size);
      if (next.recvValue<std::int32_t>() != size)
        throw std::runtime_error("fake rank: ring1 size");
    }
    next.sendAll(data[static_cast<std::size_t>(s0)]);
    if (!last_uni) prev.sendAll(data[static_cast<std::size_t>(s1)]);
    data[static_cast<std::size_t>(r0)].resize(static_cast<std::size_t>(size));
    prev.recvAll(data[static_cast<std::size_t>(r0)]);
    if (!last_uni) {
      data[static_cast<std::size_t>(r1)].resize(static_cast<std::size_t>(size));
      next.recvAll(data[static_cast<std::size_t>(r1)]);
    }
  }
  return data;
}
}  // namespace

std::vector<std::vector<std::byte>> FakeRank::allGather(std::span<const std::byte> mine) {
  return ringAllGather(next_, prev_, rank_, nranks_, mine);
}

std::vector<std::vector<std::byte>> FakeRank::intraNodeAllGather(const std::vector<int>& members,
                                                                 std::span<const std::byte> mine) {
  const int n = static_cast<int>(members.size());
  const int local =
      static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
  const int next = members[static_cast<std::size_t>((local + 1) % n)];
  const int prev = members[static_cast<std::size_t>((local - 1 + n) % n)];
  // bootstrapIntraNodeAllGather: socketConnect(next), then socketAccept(prev), same tag.
  Sock to_next = connectTo(ring_data.at(static_cast<std::size_t>(next)).peer_address, magic_);
  sendFrame(to_next, wire::bytesOf(wire::SocketAck{rank_, wire::kTagIntraNodeAllGather}));
  Sock from_prev = acceptWithMagic(p2p_listen_, magic_);
  const auto ack = wire::decodeExact<wire::SocketAck>(recvFrame(from_prev, 8), "ack");
  if (ack.rank != prev || ack.tag != wire::kTagIntraNodeAllGather)
    throw std::runtime_error("fake rank: intra-node all-gather accepted rank " +
                             std::to_string(ack.rank) + " tag " + std::to_string(ack.tag));
  return ringAllGather(to_next, from_prev, local, n, mine);
}

void FakeRank::intraNodeBarrier(const std::vector<int>& members) {
  const int n = static_cast<int>(members.size());
  const int local =
      static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
  const std::int32_t zero[1] = {0};
  for (int mask = 1; mask < n; mask <<= 1) {
    bootstrapSend(members[static_cast<std::size_t>((local + mask) % n)], members.front(),
                  std::as_bytes(std::span(zero)));
    const auto got = bootstrapRecv(members[static_cast<std::size_t>((local - mask + n) % n)],
                                   members.front());
    if (got.size() != 4) throw std::runtime_error("fake rank: intra-node barrier message size");
  }
}

wire::PeerInfo fakePeerInfo(int rank, std::uint64_t comm_hash, int version) {
  wire::PeerInfo p;
  p.rank = rank;
  p.cuda_dev = 0;
  p.nvml_dev = 0;
  p.gdr_support = 1;
  p.host_hash = 0xfeed0000ULL + static_cast<std::uint64_t>(rank) + comm_hash;
  p.pid_hash = 0xbeef0000ULL + comm_hash;
  p.bus_id = 0x18000;
  p.comm = 0x7f0000001000ULL;
  p.cuda_comp_cap = 90;
  p.total_global_mem = 150ULL << 30;
  p.cu_mem_support = 1;
  p.version = version;
  return p;
}

wire::AllGatherInfo fakeGraphInfo(int rank) {
  wire::AllGatherInfo g;
  for (int a = 0; a < wire::kNumAlgorithms; ++a) {
    g.graph_info[a].pattern = a == 0 ? 4 : 4;
    g.graph_info[a].n_channels = a == 0 ? 3 : a == 1 ? 2 : 0;  // tree 3, ring 2: NCCL runs 2
    g.graph_info[a].same_channels = 1;
    g.graph_info[a].bw_intra = 40.f;
    g.graph_info[a].bw_inter = 40.f;
    g.graph_info[a].type_intra = 0;
    g.graph_info[a].type_inter = 3;
  }
  for (int c = 0; c < 2; ++c) {  // a lone GPU: its own 1-rank node on its channels
    auto& t = g.topo_ranks;
    t.ring_recv[c] = t.ring_send[c] = rank;
    t.ring_prev[c] = t.ring_next[c] = -1;
    t.tree_to_parent[c] = t.tree_to_child0[c] = t.tree_to_child1[c] = rank;
  }
  g.cpu_arch = 1;
  g.cpu_vendor = 2;
  g.local_ranks = 1;
  return g;
}

namespace {
template <typename T>
std::vector<T> decodeAll(const std::vector<std::vector<std::byte>>& slices) {
  std::vector<T> out;
  for (const auto& s : slices) out.push_back(wire::decodeExact<T>(s, "fake all-gather slice"));
  return out;
}
}  // namespace

void FakeRank::initAllGathers(int version) {
  initAllGathersWith(fakeGraphInfo(rank_), version);
}

void FakeRank::initAllGathersWith(const wire::AllGatherInfo& gi, int version,
                                  const std::function<void()>& before_graph) {
  wire::RingData mine;
  mine.peer_address = sockAddress(p2p_listen_);
  mine.peer_proxy = sockAddress(ring_listen_);
  mine.peer_uds = 0x1234 + static_cast<std::uint64_t>(rank_);
  ring_data = decodeAll<wire::RingData>(allGather(wire::bytesOf(mine)));
  const auto pi = fakePeerInfo(rank_, hash_, version);
  peer_info = decodeAll<wire::PeerInfo>(allGather(wire::bytesOf(pi)));
  if (before_graph) before_graph();  // ncclTopoGetSystem runs between AllGather1 and 3
  graph_info = decodeAll<wire::AllGatherInfo>(allGather(wire::bytesOf(gi)));
}

void FakeRank::bootstrapSend(int peer, int tag, std::span<const std::byte> data) {
  Sock s = connectTo(ring_data.at(static_cast<std::size_t>(peer)).peer_address, magic_);
  const wire::SocketAck ack{rank_, tag};
  sendFrame(s, wire::bytesOf(ack));
  sendFrame(s, data);
}

std::vector<std::byte> FakeRank::bootstrapRecv(int peer, int tag) {
  for (auto it = unexpected_.begin(); it != unexpected_.end(); ++it)
    if (it->peer == peer && it->tag == tag) {
      auto out = std::move(it->payload);
      unexpected_.erase(it);
      return out;
    }
  for (;;) {
    Sock s = acceptWithMagic(p2p_listen_, magic_);
    const auto ack = wire::decodeExact<wire::SocketAck>(recvFrame(s, 8), "ack");
    auto payload = recvFrame(s, 1 << 20);
    if (!s.atEof()) throw std::runtime_error("fake rank: sender did not close after its message");
    if (ack.rank == peer && ack.tag == tag) return payload;
    unexpected_.push_back({ack.rank, ack.tag, std::move(payload)});
  }
}

wire::ConnectEntry FakeRank::recvEntry() {
  wire::ConnectEntry e;
  live::NetHandle h;
  h.kind = live::HandleKind::RealListen;
  h.comm_id = hash_;
  h.listen_id = next_listen_id++;
  h.pid = 4242;
  h.family = 4;
  const auto a = sockAddress(data_listen_);
  h.port = htons(a.port());
  const std::uint32_t ip = htonl(a.ipv4());
  std::memcpy(h.addr, &ip, 4);
  std::memcpy(e.bytes, &h, sizeof h);
  e.setUseGdr(1);
  return e;
}

wire::ConnectEntry FakeRank::sendEntry() const {
  wire::ConnectEntry e;
  std::memcpy(e.bytes, &rank_, sizeof rank_);
  e.setUseGdr(1);
  return e;
}

FakeRank::SetupResult FakeRank::ringSetup(int channels) {
  // Ring: connectRecv[r-1] and connectSend[r+1] on `channels` channels; only i = 1 has peers.
  const int n = nranks_, i = 1;
  const int tag = (i << 8) + 1;  // ring graph id 0
  const int recv_peer = (rank_ - i + n) % n, send_peer = (rank_ + i) % n;
  std::vector<wire::ConnectEntry> recv_entries, send_entries;
  for (int c = 0; c < channels; ++c) recv_entries.push_back(recvEntry());
  for (int c = 0; c < channels; ++c) send_entries.push_back(sendEntry());
  auto asBytes = [](const std::vector<wire::ConnectEntry>& v) {
    return std::as_bytes(std::span(v));
  };
  auto toEntries = [](const std::vector<std::byte>& b) { return wire::decodeConnectEntries(b); };
  SetupResult out;
  if (send_peer == recv_peer) {
    std::vector<wire::ConnectEntry> all = recv_entries;
    all.insert(all.end(), send_entries.begin(), send_entries.end());
    bootstrapSend(recv_peer, tag, asBytes(all));
    auto reply = toEntries(bootstrapRecv(recv_peer, tag));
    out.from_send_peer.assign(reply.begin(), reply.begin() + channels);
    out.from_recv_peer.assign(reply.begin() + channels, reply.end());
  } else {
    bootstrapSend(recv_peer, tag, asBytes(recv_entries));
    bootstrapSend(send_peer, tag, asBytes(send_entries));
    out.from_send_peer = toEntries(bootstrapRecv(send_peer, tag));
    out.from_recv_peer = toEntries(bootstrapRecv(recv_peer, tag));
  }
  const int sync = (i << 8) + (1 << 7) + 1;
  if (send_peer != recv_peer) {
    bootstrapSend(send_peer, sync, {});
    bootstrapSend(recv_peer, sync, {});
    if (!bootstrapRecv(send_peer, sync).empty() || !bootstrapRecv(recv_peer, sync).empty())
      throw std::runtime_error("fake rank: non-empty sync");
  } else {
    bootstrapSend(send_peer, sync, {});
    if (!bootstrapRecv(send_peer, sync).empty())
      throw std::runtime_error("fake rank: non-empty sync");
  }
  return out;
}

FakeRank::P2pResult FakeRank::p2pSetup(const std::vector<int>& send_to,
                                       const std::vector<int>& recv_from) {
  const int n = nranks_;
  auto has = [](const std::vector<int>& v, int x) {
    return std::find(v.begin(), v.end(), x) != v.end();
  };
  P2pResult out;
  for (int i = 1; i < n; ++i) {
    const int tag = i << 8;  // graph NULL
    const int recv_peer = (rank_ - i + n) % n, send_peer = (rank_ + i) % n;
    const bool rc = has(recv_from, recv_peer), sc = has(send_to, send_peer);
    if (send_peer == recv_peer) {
      if (!rc && !sc) continue;
      std::vector<wire::ConnectEntry> all;
      if (rc) all.push_back(recvEntry());
      if (sc) all.push_back(sendEntry());
      bootstrapSend(recv_peer, tag, std::as_bytes(std::span(all)));
      const auto reply = wire::decodeConnectEntries(bootstrapRecv(recv_peer, tag));
      if (reply.size() != all.size()) throw std::runtime_error("fake rank: p2p reply count");
      std::size_t k = 0;
      if (sc) out.recv_entry_of[send_peer] = reply[k++];
      if (rc) out.send_entry_of[recv_peer] = reply[k++];
      continue;
    }
    if (rc) {
      const auto e = recvEntry();
      bootstrapSend(recv_peer, tag, wire::bytesOf(e));
    }
    if (sc) {
      const auto e = sendEntry();
      bootstrapSend(send_peer, tag, wire::bytesOf(e));
    }
    if (sc)
      out.recv_entry_of[send_peer] =
          wire::decodeConnectEntries(bootstrapRecv(send_peer, tag)).at(0);
    if (rc)
      out.send_entry_of[recv_peer] =
          wire::decodeConnectEntries(bootstrapRecv(recv_peer, tag)).at(0);
  }
  for (int i = 1; i < n; ++i) {
    const int tag = (i << 8) + (1 << 7);
    const int recv_peer = (rank_ - i + n) % n, send_peer = (rank_ + i) % n;
    const bool rc = has(recv_from, recv_peer), sc = has(send_to, send_peer);
    if (send_peer != recv_peer) {
      if (sc) bootstrapSend(send_peer, tag, {});
      if (rc) bootstrapSend(recv_peer, tag, {});
      if (sc) (void)bootstrapRecv(send_peer, tag);
      if (rc) (void)bootstrapRecv(recv_peer, tag);
    } else if (sc || rc) {
      bootstrapSend(send_peer, tag, {});
      (void)bootstrapRecv(send_peer, tag);
    }
  }
  return out;
}

void FakeRank::barrier() {
  const std::int32_t zero[1] = {0};
  for (int mask = 1; mask < nranks_; mask <<= 1) {
    const int src = (rank_ - mask + nranks_) % nranks_, dst = (rank_ + mask) % nranks_;
    bootstrapSend(dst, wire::kTagBarrier, std::as_bytes(std::span(zero)));
    const auto got = bootstrapRecv(src, wire::kTagBarrier);
    if (got.size() != 4) throw std::runtime_error("fake rank: barrier message size");
  }
}

std::vector<live::Hello> FakeRank::acceptHellos(int n) {
  std::vector<live::Hello> out;
  std::vector<Sock> keep;
  for (int k = 0; k < n; ++k) {
    Sock s = acceptOne(data_listen_);
    out.push_back(s.recvValue<live::Hello>());
    keep.push_back(std::move(s));
  }
  return out;
}

std::unique_ptr<FakeRank> FakeRank::split(int color, int key) {
  const wire::SplitInfo mine{key, color};
  const auto infos = decodeAll<wire::SplitInfo>(allGather(wire::bytesOf(mine)));
  ++split_count;
  if (color == kSplitNoColor) return nullptr;
  std::vector<int> members;  // commGetSplitInfo: by key, ties by parent rank
  for (int i = 0; i < nranks_; ++i) {
    if (infos[static_cast<std::size_t>(i)].color != color) continue;
    std::size_t at = 0;
    while (at < members.size() && infos[static_cast<std::size_t>(members[at])].key <=
                                      infos[static_cast<std::size_t>(i)].key)
      ++at;
    members.insert(members.begin() + static_cast<std::ptrdiff_t>(at), i);
  }
  const int cn = static_cast<int>(members.size());
  int me = 0;
  for (int c = 0; c < cn; ++c)
    if (members[static_cast<std::size_t>(c)] == rank_) me = c;
  const std::uint64_t child_hash = splitCommHash(hash_, split_count, color);
  auto child = std::unique_ptr<FakeRank>(new FakeRank(me, cn, child_hash, child_hash));
  child->ring_listen_ = listenLoopback();
  child->p2p_listen_ = listenLoopback();
  child->data_listen_ = listenLoopback();
  const int prev = members[static_cast<std::size_t>((me - 1 + cn) % cn)];
  const int next = members[static_cast<std::size_t>((me + 1) % cn)];
  const auto info = wire::RingConnectInfo::fromAddr(sockAddress(child->ring_listen_));
  bootstrapSend(prev, wire::kTagCommSplit, wire::bytesOf(info));
  const auto next_info = wire::decodeExact<wire::RingConnectInfo>(
      bootstrapRecv(next, wire::kTagCommSplit), "COMMSPLIT ring info");
  child->next_address = next_info.addr();
  child->ringConnect(child->next_address);
  return child;
}

void FakeRank::close() {
  next_.close();
  prev_.close();
  ring_listen_.close();
  p2p_listen_.close();
  data_listen_.close();
}

}  // namespace crystal::host::test
