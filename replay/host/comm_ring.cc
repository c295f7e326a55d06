// The bootstrap ring and NCCL 2.28.9's bidirectional ring all-gather
// (bootstrap.cc socketRingAllGather) from the side of the virtual neighbours of real ranks.
//
// At step s of an n-rank all-gather (T = n/2 steps; ring 1 skips the last step when n is
// even) real rank r sends slice r-s to next and slice r+s to prev, and receives r-s-1 from
// prev and r+s+1 from next, each as [int32 size][slice]. The host is r's "next" (it accepted
// r's ring connection, acting as r+1) and/or r's "prev" (it dialled r's ring listener, acting
// as r-1). It sends a step's frame as soon as it knows the slice: virtual slices are made on
// demand, real ones once some real rank has passed them to the host. This is never later than
// the real ring would deliver them, so it cannot deadlock; and the size is sent ahead, since a
// real rank exchanges sizes with its prev before it sends anything to its prev.
#include <fmt/core.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "comm.h"
#include "crystal/base/error.h"
#include "crystal/base/log.h"
#include "net.h"

namespace crystal::host {

// ---- ring endpoints -----------------------------------------------------------------------

void Comm::connectAsPrev(int rank, const wire::SocketAddress& ring_listen) {
  if (phase_ == CommPhase::Failed) return;
  std::vector<std::byte> hs;
  wire::appendHandshake(hs, magic_, wire::kSocketTypeBootstrap);
  StreamId id = 0;
  try {
    id =
        ctx_.loop->adopt(connectTcp(ring_listen), true, fmt::format("ring {}->{}", rank - 1, rank));
  } catch (const ProtocolError& e) {
    fail(rank, fmt::format("ring connect to {}: {}", ring_listen.str(), e.what()));
    return;
  }
  addEndpoint(id, rank, /*host_is_next=*/false)->send(hs);
  if (phase_ == CommPhase::Declared || phase_ == CommPhase::CheckIn) phase_ = CommPhase::Ring;
  pumpEndpoint(endpoints_.back());
}

void Comm::onRingAccept(StreamId id, int target) {
  if (phase_ == CommPhase::Failed) {
    ctx_.loop->close(id);
    return;
  }
  const int r = (target - 1 + nranks_) % nranks_;
  if (target < 0 || target >= nranks_ || isReal(target) || !isReal(r)) {
    ctx_.loop->close(id);
    fail(r, fmt::format("ring connection to rank {}, which is not the virtual next of a real rank",
                        target));
    return;
  }
  for (const auto& e : endpoints_)
    if (e.host_is_next && e.rank == r && !e.closed) {
      ctx_.loop->close(id);
      fail(r, "opened a second ring connection to its next");
      return;
    }
  Stream* s = addEndpoint(id, r, /*host_is_next=*/true);
  if (phase_ == CommPhase::Declared || phase_ == CommPhase::CheckIn) phase_ = CommPhase::Ring;
  pumpEndpoint(endpoints_.back());
  if (!s->rx().empty()) onEndpointData(endpoints_.back(), *s);
}

Stream* Comm::addEndpoint(StreamId id, int rank, bool host_is_next) {
  streams_.insert(id);
  Endpoint e;
  e.rank = rank;
  e.host_is_next = host_is_next;
  e.stream = id;
  endpoints_.push_back(e);
  Stream* s = ctx_.loop->find(id);
  s->on_data = [this, id](Stream& st) {
    if (Endpoint* ep = endpointFor(id)) onEndpointData(*ep, st);
  };
  s->on_closed = [this, id](Stream&, const std::string& why) {
    if (Endpoint* ep = endpointFor(id)) onEndpointClosed(*ep, why);
  };
  return s;
}

Comm::Endpoint* Comm::endpointFor(StreamId stream) {
  for (auto& e : endpoints_)
    if (e.stream == stream && !e.closed) return &e;
  return nullptr;
}

// Ring 0 runs all T = n/2 steps; ring 1 stops one short when n is even.
int Comm::rxCount(const Endpoint& e) const noexcept {
  const int t = nranks_ / 2;
  return e.host_is_next ? t : (nranks_ % 2 == 0 ? t - 1 : t);
}
int Comm::txCount(const Endpoint& e) const noexcept {
  const int t = nranks_ / 2;
  return e.host_is_next ? (nranks_ % 2 == 0 ? t - 1 : t) : t;
}

void Comm::onEndpointData(Endpoint& e, Stream& s) {
  const int r = e.rank;
  const bool host_is_next = e.host_is_next;
  try {
    while (phase_ != CommPhase::Failed) {
      auto rx = s.rx();
      if (e.rx_size < 0) {
        if (rx.size() < 4) break;
        const int size = wire::decodeFrameSize(rx, wire::kMaxMessageBytes, "ring all-gather");
        s.consume(4);
        if (e.rx_ag == static_cast<int>(ags_.size())) {
          AllGather ag;
          ag.index = e.rx_ag;
          ag.slice_bytes = size;
          ag.kind = classifyAllGather(ag.index, size, nranks_);
          ag.data.resize(static_cast<std::size_t>(size) * static_cast<std::size_t>(nranks_));
          ag.have.assign(static_cast<std::size_t>(nranks_), 0);
          ags_.push_back(std::move(ag));
          CRYSTAL_DEBUG("comm {}: all-gather #{} ({}, {} B) started by rank {}", name_,
                        ags_.back().index, kindName(ags_.back().kind), size, r);
        } else if (ags_[static_cast<std::size_t>(e.rx_ag)].slice_bytes != size) {
          throw ProtocolError(fmt::format("all-gather #{} frame of {} bytes, expected {}", e.rx_ag,
                                          size,
                                          ags_[static_cast<std::size_t>(e.rx_ag)].slice_bytes));
        }
        if (rxCount(e) == 0)
          throw ProtocolError("sent on ring 1 of a 2-rank comm, which NCCL never does");
        e.rx_size = size;
        int& started = started_ag_[r];
        started = std::max(started, e.rx_ag);
        // A new all-gather may unblock every endpoint's size header.
        pump();
        continue;
      }
      if (rx.size() < static_cast<std::size_t>(e.rx_size)) break;
      AllGather& ag = ags_[static_cast<std::size_t>(e.rx_ag)];
      const int slice = host_is_next ? ((r - e.rx_step) % nranks_ + nranks_) % nranks_
                                     : (r + e.rx_step) % nranks_;
      storeSlice(ag, slice, rx.first(static_cast<std::size_t>(e.rx_size)));
      s.consume(static_cast<std::size_t>(e.rx_size));
      e.rx_size = -1;
      if (++e.rx_step == rxCount(e)) {
        e.rx_step = 0;
        ++e.rx_ag;
      }
      pump();
    }
  } catch (const ProtocolError& err) {
    fail(r,
         fmt::format("ring from {} {}: {}", host_is_next ? "rank" : "prev of rank", r, err.what()));
    return;
  }
  if (Endpoint* ep = endpointFor(s.id())) updateWaiting(*ep);
}

void Comm::updateWaiting(Endpoint& e) {
  Stream* s = ctx_.loop->find(e.stream);
  if (s == nullptr) return;
  const bool mid_frame = e.rx_size >= 0 || !s->rx().empty();
  // Only an all-gather this rank has itself begun counts: a rank that reaches a collective
  // (e.g. ncclCommSplit) later than another real rank is not stalled, just late.
  // Nor is a rank the host itself keeps waiting (a frame it needs waits for another real
  // rank's slice): NCCL's step s+1 sends only after step s was received.
  auto it = started_ag_.find(e.rank);
  bool begun = it != started_ag_.end() && it->second >= e.rx_ag;
  for (const auto& other : endpoints_)
    if (other.rank == e.rank && !other.closed && other.tx_blocked) begun = false;
  const bool in_allgather = rxCount(e) > 0 && e.rx_ag < static_cast<int>(ags_.size()) && begun;
  s->setWaiting(mid_frame || in_allgather);
}

void Comm::storeSlice(AllGather& ag, int slice, std::span<const std::byte> bytes) {
  if (ag.have[static_cast<std::size_t>(slice)] != 0) return;  // forwarded copy of a known slice
  if (isReal(slice)) {
    if (ag.kind == AllGatherKind::PeerInfo) {
      const auto info = wire::decodeExact<wire::PeerInfo>(bytes, "ncclPeerInfo");
      if (info.version != kSupportedNcclVersion)
        throw ProtocolError(
            fmt::format("rank {} runs NCCL version code {}; the host speaks only NCCL 2.28.9 ({})",
                        slice, info.version, kSupportedNcclVersion));
      if (info.rank != slice)
        throw ProtocolError(fmt::format("peerInfo slice {} says rank {}", slice, info.rank));
      // Before the host's slices let NCCL go on to its graph search.
      if (!writeGraphFile(slice, info)) return;
    }
    if (ag.kind == AllGatherKind::RingAddresses) {
      const auto d = wire::decodeExact<wire::RingData>(bytes, "bootstrapRingData");
      p2p_addr_[slice] = d.peer_address;
    }
    if (ag.template_rank < 0) ag.template_rank = slice;
  }
  std::memcpy(
      ag.data.data() + static_cast<std::size_t>(slice) * static_cast<std::size_t>(ag.slice_bytes),
      bytes.data(), bytes.size());
  ag.have[static_cast<std::size_t>(slice)] = 1;
  if (++ag.have_count == nranks_) finishAllGather(ag);
  if (ag.kind == AllGatherKind::RingAddresses && isReal(slice)) flushPendingReplies();
}

namespace {
std::span<const std::byte> sliceOf(const std::vector<std::byte>& data, int slice_bytes, int r) {
  return std::span(data).subspan(
      static_cast<std::size_t>(r) * static_cast<std::size_t>(slice_bytes),
      static_cast<std::size_t>(slice_bytes));
}
}  // namespace

bool Comm::ensureSlice(AllGather& ag, int slice) {
  const auto sliceOf = [&](const AllGather& a, int r) {
    return host::sliceOf(a.data, a.slice_bytes, r);
  };
  if (ag.have[static_cast<std::size_t>(slice)] != 0) return true;
  if (isReal(slice)) return false;  // arrives through some real rank later
  const auto tmpl = [&]() -> std::span<const std::byte> {
    return std::span(ag.data).subspan(
        static_cast<std::size_t>(ag.template_rank) * static_cast<std::size_t>(ag.slice_bytes),
        static_cast<std::size_t>(ag.slice_bytes));
  };
  const VirtualRankContext v = virtualContext(slice);
  std::vector<std::byte> bytes;
  switch (ag.kind) {
    case AllGatherKind::RingAddresses: {
      const auto d = virtualRingData(v);
      bytes.assign(wire::bytesOf(d).begin(), wire::bytesOf(d).end());
      break;
    }
    case AllGatherKind::PeerInfo: {
      if (ag.template_rank < 0) return false;
      if (const int r = nodeReal(slice); r >= 0) {  // a GPU of real rank r's host
        if (ag.have[static_cast<std::size_t>(r)] == 0) return false;
        const auto members = nodeMembers(slice);
        const auto local = [&](int x) {
          return static_cast<int>(std::find(members.begin(), members.end(), x) - members.begin());
        };
        const auto p = sameNodePeerInfo(
            v, wire::decodeExact<wire::PeerInfo>(sliceOf(ag, r), "ncclPeerInfo"), local(slice),
            local(r));
        bytes.assign(wire::bytesOf(p).begin(), wire::bytesOf(p).end());
        break;
      }
      const auto p = virtualPeerInfo(v, wire::decodeExact<wire::PeerInfo>(tmpl(), "ncclPeerInfo"));
      bytes.assign(wire::bytesOf(p).begin(), wire::bytesOf(p).end());
      break;
    }
    case AllGatherKind::GraphInfo: {
      if (ag.template_rank < 0) return false;
      if (const int r = nodeReal(slice); r >= 0) {
        if (ag.have[static_cast<std::size_t>(r)] == 0) return false;
        const auto real = wire::decodeExact<wire::AllGatherInfo>(sliceOf(ag, r), "allGatherInfo");
        tree_channels_ = std::clamp(std::min(real.graph_info[wire::kAlgoTree].n_channels,
                                             real.graph_info[wire::kAlgoRing].n_channels),
                                    0, 255);
        const auto members = nodeMembers(slice);
        const auto g = sameNodeGraphInfo(v, real, r, members);
        bytes.assign(wire::bytesOf(g).begin(), wire::bytesOf(g).end());
        break;
      }
      if (const int r = mirrorTemplate(slice); r >= 0) {  // a copy of real rank r's node
        if (ag.have[static_cast<std::size_t>(r)] == 0) return false;
        const auto real = wire::decodeExact<wire::AllGatherInfo>(sliceOf(ag, r), "allGatherInfo");
        const auto members = nodeMembers(r);
        const auto g = mirroredGraphInfo(v, real, r, members, nodeMembers(slice).front());
        bytes.assign(wire::bytesOf(g).begin(), wire::bytesOf(g).end());
        break;
      }
      const auto real = wire::decodeExact<wire::AllGatherInfo>(tmpl(), "allGatherInfo");
      // Every rank's graphs get the minimum over ranks, the virtual ones copy the real one's.
      tree_channels_ = std::clamp(std::min(real.graph_info[wire::kAlgoTree].n_channels,
                                           real.graph_info[wire::kAlgoRing].n_channels),
                                  0, 255);
      const auto g = virtualGraphInfo(v, real);
      bytes.assign(wire::bytesOf(g).begin(), wire::bytesOf(g).end());
      break;
    }
    case AllGatherKind::RingConnInfo: {
      if (ag.template_rank < 0) return false;
      auto t = tmpl();
      bytes.assign(t.begin(), t.end());
      break;
    }
    case AllGatherKind::SplitInfo: {
      if (ctx_.resolver == nullptr || !*ctx_.resolver)
        throw ProtocolError("ncclCommSplit, but no split resolver gives virtual ranks' colors");
      const SplitChoice c = (*ctx_.resolver)(hash_, split_count_ + 1, slice);
      const wire::SplitInfo si{c.key, c.color};
      bytes.assign(wire::bytesOf(si).begin(), wire::bytesOf(si).end());
      break;
    }
  }
  storeSlice(ag, slice, bytes);
  return true;
}

void Comm::pump() {
  for (std::size_t i = 0; i < endpoints_.size() && phase_ != CommPhase::Failed; ++i)
    if (!endpoints_[i].closed) pumpEndpoint(endpoints_[i]);
  for (auto& e : endpoints_)
    if (!e.closed) updateWaiting(e);
}

void Comm::pumpEndpoint(Endpoint& e) {
  Stream* s = ctx_.loop->find(e.stream);
  if (s == nullptr) return;
  e.tx_blocked = false;
  try {
    while (e.tx_ag < static_cast<int>(ags_.size()) && phase_ != CommPhase::Failed) {
      AllGather& ag = ags_[static_cast<std::size_t>(e.tx_ag)];
      const int count = txCount(e);
      if (e.tx_step >= count) {
        e.tx_step = 0;
        ++e.tx_ag;
        continue;
      }
      if (!e.tx_header_sent) {
        const std::int32_t size = ag.slice_bytes;
        s->send(std::as_bytes(std::span<const std::int32_t, 1>(&size, 1)));
        e.tx_header_sent = true;
      }
      const int slice = e.host_is_next ? (e.rank + e.tx_step + 1) % nranks_
                                       : ((e.rank - e.tx_step - 1) % nranks_ + nranks_) % nranks_;
      if (!ensureSlice(ag, slice)) {
        e.tx_blocked = true;
        break;
      }
      s->send(std::span(ag.data).subspan(
          static_cast<std::size_t>(slice) * static_cast<std::size_t>(ag.slice_bytes),
          static_cast<std::size_t>(ag.slice_bytes)));
      e.tx_header_sent = false;
      ++e.tx_step;
    }
  } catch (const ProtocolError& err) {
    fail(e.rank, err.what());
    return;
  }
  updateWaiting(e);
}

void Comm::finishAllGather(AllGather& ag) {
  ag.finished = true;
  CRYSTAL_DEBUG("comm {}: all-gather #{} ({}) complete", name_, ag.index, kindName(ag.kind));
  if (ag.kind == AllGatherKind::GraphInfo && phase_ == CommPhase::Ring) phase_ = CommPhase::Ready;
  if (ag.kind == AllGatherKind::SplitInfo) onSplitAllGather(ag);
}

void Comm::onEndpointClosed(Endpoint& e, const std::string& why) {
  e.closed = true;
  streams_.erase(e.stream);
  if (phase_ == CommPhase::Failed || phase_ == CommPhase::Destroyed) return;
  // Done with every all-gather so far, and at least with the three of init: a rank that
  // finished them may close as soon as it is destroyed, even before the host has every
  // slice (adjacent real ranks pass slices to each other directly).
  const int done = std::min(rxCount(e) > 0 ? e.rx_ag : std::numeric_limits<int>::max(), e.tx_ag);
  const bool busy = e.rx_size >= 0 || done < std::max(3, static_cast<int>(ags_.size()));
  if (busy) {
    fail(e.rank, fmt::format("ring connection closed during {}: {}",
                             done >= 3 ? "an all-gather" : "communicator creation", why));
    return;
  }
  maybeDestroyed();
}

// ncclCommDestroy has no bootstrap traffic; its only sign is EOF on the ring sockets.
void Comm::maybeDestroyed() {
  for (const auto& e : endpoints_)
    if (!e.closed) return;
  phase_ = CommPhase::Destroyed;
  for (StreamId id : streams_) ctx_.loop->close(id);  // Hello streams to the real plugins
  streams_.clear();
  ags_.clear();
  ags_.shrink_to_fit();
  intra_.clear();
  CRYSTAL_INFO("comm {} ({:#x}) destroyed by its real ranks", name_, hash_);
}

}  // namespace crystal::host
