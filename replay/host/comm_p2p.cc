// Answers to bootstrapSend messages that real ranks address to virtual ranks
// (bootstrap.cc bootstrapSend/Recv, transport.cc ncclTransportP2pSetup, bootstrapBarrier).
//
// The host only answers what the real rank will wait for: the virtual peer of a
// connection-setup exchange replies with the same tag and entry count, a sync with a
// zero-length message, a barrier round with the 4-byte message from rank r-mask. Every reply
// is a fresh connection to the real rank's P2P listener (handshake, socketAckInfo, payload),
// closed after the last byte, as NCCL's receiver waits for EOF.
#include <fmt/core.h>

#include <cstring>

#include "comm.h"
#include "crystal/base/error.h"
#include "crystal/base/log.h"
#include "crystal/live/handle.h"
#include "net.h"

namespace crystal::host {

void Comm::onP2pMessage(int target, const wire::SocketAck& ack,
                        std::span<const std::byte> payload) {
  if (phase_ == CommPhase::Failed || phase_ == CommPhase::Destroyed) return;
  const int sender = ack.rank;
  if (!isReal(sender)) {
    fail(-1, fmt::format("bootstrap message (tag {:#x}) from rank {}, which is not a real rank",
                         ack.tag, sender));
    return;
  }
  if (target < 0 || target >= nranks_ || isReal(target)) {
    fail(sender, fmt::format("bootstrap message (tag {:#x}) to rank {}, which is not virtual",
                             ack.tag, target));
    return;
  }
  try {
    wire::SetupTag setup;
    if (ack.tag == wire::kTagCommSplit) {
      onSplitRingInfo(sender, target, payload);
    } else if (ack.tag == wire::kTagBarrier) {
      if (payload.size() != 4)
        throw ProtocolError(fmt::format("barrier message of {} bytes, expected 4", payload.size()));
      onBarrier(sender, target);
    } else if (payload.size() == 4 && nodeReal(sender) == sender && nodeReal(target) == sender &&
               ack.tag == nodeMembers(sender).front()) {
      // init.cc: bootstrapIntraNodeBarrier(..., tag = localRankToRank[0]). Its 4 bytes tell
      // it from a setup message (entries of 256 B, or a 0-byte sync) with the same tag.
      onIntraNodeBarrier(sender, target);
    } else if (wire::decodeSetupTag(ack.tag, nranks_, setup)) {
      onSetup(sender, target, setup, ack.tag, payload);
    } else {
      // Broadcasts and intra-node exchanges never involve a rank on another host.
      CRYSTAL_WARN("comm {}: rank {} sent {} bytes with tag {:#x} to virtual rank {}; dropped",
                   name_, sender, payload.size(), ack.tag, target);
    }
  } catch (const ProtocolError& e) {
    fail(sender,
         fmt::format("message (tag {:#x}) to virtual rank {}: {}", ack.tag, target, e.what()));
  }
}

void Comm::reply(int to, int from, std::int32_t tag, std::vector<std::byte> payload) {
  auto it = p2p_addr_.find(to);
  if (it == p2p_addr_.end()) {  // the real rank's ringAllInfo slice has not reached the host yet
    pending_replies_.push_back({to, from, tag, std::move(payload)});
    return;
  }
  std::vector<std::byte> out;
  wire::appendHandshake(out, magic_, wire::kSocketTypeBootstrap);
  const wire::SocketAck ack{from, tag};
  wire::appendFrame(out, wire::bytesOf(ack));
  wire::appendFrame(out, payload);
  const wire::SocketAddress addr = it->second;
  StreamId id = 0;
  try {
    id = ctx_.loop->adopt(connectTcp(addr), true, fmt::format("p2p {}->{}", from, to));
  } catch (const ProtocolError& e) {
    fail(to, fmt::format("connect to its P2P listener {}: {}", addr.str(), e.what()));
    return;
  }
  streams_.insert(id);
  Stream* s = ctx_.loop->find(id);
  s->on_closed = [this, to, addr, tag](Stream& st, const std::string& why) {
    streams_.erase(st.id());
    fail(to, fmt::format("reply (tag {:#x}) to P2P listener {} failed: {}", tag, addr.str(), why));
  };
  s->send(out);
  s->closeAfterFlush();
}

void Comm::flushPendingReplies() {
  auto pending = std::move(pending_replies_);
  pending_replies_.clear();
  for (auto& p : pending) reply(p.to, p.from, p.tag, std::move(p.payload));
}

namespace {
bool isRealListenHandle(const wire::ConnectEntry& e) {
  live::NetHandle h;
  return live::decodeHandle(e.bytes, h) && h.kind == live::HandleKind::RealListen;
}
}  // namespace

void Comm::onSetup(int sender, int target, const wire::SetupTag& tag, std::int32_t raw_tag,
                   std::span<const std::byte> payload) {
  const int i = tag.distance;
  const bool is_send_peer = (sender + i) % nranks_ == target;            // sender sends to target
  const bool is_recv_peer = (sender - i + nranks_) % nranks_ == target;  // sender receives from it
  if (!is_send_peer && !is_recv_peer)
    throw ProtocolError(fmt::format("setup tag distance {} does not lead from rank {} to rank {}",
                                    i, sender, target));
  if (tag.sync) {  // the same for every transport
    if (!payload.empty())
      throw ProtocolError(fmt::format("sync message carries {} bytes, expected 0", payload.size()));
    reply(sender, target, raw_tag, {});
    return;
  }
  // NCCL reaches a GPU of its own host over P2P or SHM, never NET here
  // (NCCL_NET_DISABLE_INTRA=1 with emulation.p2p_peers).
  if (nodeReal(target) == sender) {
    onNodeSetup(sender, target, tag, raw_tag, payload);  // comm_node_connect.cc
    return;
  }
  const auto entries = wire::decodeConnectEntries(payload);
  // Sender's message = its recv entries (plugin listen handles) then its send entries.
  std::size_t nrecv = 0;
  if (is_recv_peer && is_send_peer) {
    while (nrecv < entries.size() && isRealListenHandle(entries[nrecv])) ++nrecv;
  } else if (is_recv_peer) {
    nrecv = entries.size();
  }
  for (std::size_t k = 0; k < nrecv; ++k)
    if (!isRealListenHandle(entries[k]))
      throw ProtocolError(fmt::format(
          "receive entry {} is not a crystal RealListen handle: is NCCL_NET_PLUGIN=crystal loaded?",
          k));
  const std::size_t nsend = entries.size() - nrecv;

  // Reply = target's recv entries (one per sender send entry), then its send entries.
  std::vector<std::byte> out(entries.size() * sizeof(wire::ConnectEntry));
  std::size_t slot = 0;
  for (std::size_t k = nrecv; k < entries.size(); ++k, ++slot) {
    wire::ConnectEntry fe;
    live::NetHandle h;
    h.kind = live::HandleKind::VirtualPeer;
    h.dev = 0;
    h.comm_id = hash_;
    h.emulation = ctx_.options->emulation_id;
    h.rank = target;
    h.nranks = nranks_;
    h.conn_seq = conn_seq_[target]++;
    // Identity of this send connection (the k-th send entry = the k-th connected channel).
    h.self_rank = sender;
    h.distance = i;
    h.ordinal = static_cast<std::uint16_t>(k - nrecv);
    h.graph = static_cast<std::uint8_t>(tag.graph);
    h.tree_channels = static_cast<std::uint8_t>(tree_channels_);
    std::memcpy(fe.bytes, &h, sizeof h);
    fe.setUseGdr(entries[k].useGdr());
    std::memcpy(out.data() + slot * sizeof fe, &fe, sizeof fe);
  }
  for (std::size_t k = 0; k < nrecv; ++k, ++slot) {
    wire::ConnectEntry se;
    const std::int32_t proxy_rank = target;  // net.cc sendSetup: int at 0 = tpRank of the proxy
    std::memcpy(se.bytes, &proxy_rank, sizeof proxy_rank);
    se.setUseGdr(entries[k].useGdr());
    std::memcpy(out.data() + slot * sizeof se, &se, sizeof se);
    sendHello(target, sender, entries[k], ConnIdentity{tag.graph, i, static_cast<int>(k)});
  }
  CRYSTAL_DEBUG("comm {}: setup tag {:#x} rank {} <-> virtual {}: {} recv, {} send entries", name_,
                raw_tag, sender, target, nrecv, nsend);
  reply(sender, target, raw_tag, std::move(out));
}

// A virtual sender "connects" to the real receiver's data listener and introduces itself;
// the stream stays open until the comm is destroyed.
void Comm::sendHello(int sender_virtual, int real_rank, const wire::ConnectEntry& entry,
                     const ConnIdentity& id) {
  live::NetHandle h;
  (void)live::decodeHandle(entry.bytes, h);
  if (h.family != 4)
    throw ProtocolError(
        fmt::format("RealListen handle with address family {} (only IPv4)", h.family));
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = h.port;  // network order in the handle
  std::memcpy(&sin.sin_addr, h.addr, 4);
  wire::SocketAddress to;
  std::memcpy(to.bytes, &sin, sizeof sin);
  live::Hello hello;
  hello.peer = live::PeerKind::Virtual;
  hello.listen_id = h.listen_id;
  hello.sender_rank = sender_virtual;
  hello.comm_id = h.comm_id;
  hello.graph = static_cast<std::uint8_t>(id.graph);
  hello.receiver_rank = real_rank;
  hello.nranks = nranks_;
  hello.distance = id.distance;
  hello.ordinal = static_cast<std::uint16_t>(id.ordinal);
  hello.tree_channels = static_cast<std::uint16_t>(tree_channels_);
  const StreamId sid = ctx_.loop->adopt(connectTcp(to), true,
                                       fmt::format("hello {}->{}", sender_virtual, real_rank));
  streams_.insert(sid);
  Stream* s = ctx_.loop->find(sid);
  s->on_data = [](Stream& st) { st.consume(st.rx().size()); };
  s->on_closed = [this, real_rank, to](Stream& st, const std::string& why) {
    streams_.erase(st.id());
    if (phase_ != CommPhase::Ready)
      CRYSTAL_WARN("comm {}: data stream to rank {} at {} ended: {}", name_, real_rank, to.str(),
                   why);
  };
  s->send(std::as_bytes(std::span<const live::Hello, 1>(&hello, 1)));
  if (ctx_.on_virtual_connection)
    ctx_.on_virtual_connection({hash_, sender_virtual, real_rank, h.listen_id});
}

// Dissemination barrier (bootstrapP2PBarrier): in each round rank r sends to r+mask and waits
// for r-mask. The host cannot see a real rank's messages to real peers, so when any real rank
// enters barrier instance k, it sends every real rank all of instance k's messages from its
// virtual r-mask peers; each is consumed by that rank's own barrier, so none is left over.
void Comm::onBarrier(int sender, int target) {
  const int mask = (target - sender + nranks_) % nranks_;
  if (mask == 0 || (mask & (mask - 1)) != 0)
    throw ProtocolError(
        fmt::format("barrier message to rank {} is not at a power-of-two distance", target));
  long to_virtual = 0;
  for (int m = 1; m < nranks_; m <<= 1)
    if (!isReal((sender + m) % nranks_)) ++to_virtual;
  const long instance = barrier_msgs_[sender]++ / std::max(1L, to_virtual);
  while (barrier_instances_started_ <= instance) {
    ++barrier_instances_started_;
    for (int q = 0; q < nranks_; ++q) {
      if (!isReal(q)) continue;
      for (int m = 1; m < nranks_; m <<= 1) {
        const int src = (q - m + nranks_) % nranks_;
        if (!isReal(src)) reply(q, src, wire::kTagBarrier, std::vector<std::byte>(4, std::byte{0}));
      }
    }
  }
}

}  // namespace crystal::host
