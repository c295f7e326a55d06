// The virtual ranks of a real rank's target node, played as GPUs of the real rank's own host
// (HostOptions::p2p_peers; docs/research/nccl-2.28.9-p2p-virtual-peers.md §9): NCCL 2.28.9
// then runs two exchanges among the node's ranks that it never runs across hosts.
//
// 1. The intra-node all-gather of topology XML (graph/topo.cc ncclTopoGetSystem →
//    bootstrap.cc bootstrapIntraNodeAllGather): the real rank R at local index L dials its
//    next member (tag 1 << 28), accepts from its prev, and runs the bidirectional socket ring
//    of socketRingAllGather over the node's n members with one 2,562,056-byte slot each. Only
//    R's own slot is real; every other member's is R's cloned with that member's busId, rank
//    and NVML index (topo_xml.h), so NCCL fuses n GPUs under R's CPU. The host is R's next
//    (side 0) and its prev (side 1), and sends every clone as soon as R's slot arrived:
//    frame s on side 1 carries slice L-s-1 (ring 0), on side 0 slice L+s+1 (ring 1).
// 2. The intra-node barrier at the end of init (bootstrapIntraNodeBarrier): dissemination
//    over the node's members with tag = the node's first global rank.
#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "comm.h"
#include "crystal/base/error.h"
#include "crystal/base/log.h"
#include "net.h"
#include "node_graph.h"
#include "topo_xml.h"

namespace crystal::host {

int Comm::nodeGpus() const noexcept {
  if (ctx_.options == nullptr || !ctx_.options->p2p_peers || !whole_nodes_) return 0;
  return ctx_.options->gpus_per_node >= 2 ? ctx_.options->gpus_per_node : 0;
}

int Comm::nodeOf(int rank) const noexcept {
  if (!node_of_.empty()) return node_of_[static_cast<std::size_t>(rank)];
  const int gpn = ctx_.options != nullptr ? std::max(1, ctx_.options->gpus_per_node) : 1;
  return rank / gpn;
}

void Comm::setNodes(std::vector<int> node_of) {
  if (static_cast<int>(node_of.size()) != nranks_)
    throw ProtocolError(
        fmt::format("comm {}: {} node indices for {} ranks", name_, node_of.size(), nranks_));
  const int gpn = ctx_.options != nullptr ? std::max(1, ctx_.options->gpus_per_node) : 1;
  // Whole nodes in rank order: each block of gpn consecutive ranks on one node, no node in
  // two blocks (a block may be short only at the end: the parent's last node is).
  std::set<int> seen;
  whole_nodes_ = true;
  for (int base = 0; base < nranks_ && whole_nodes_; base += gpn) {
    const int node = node_of[static_cast<std::size_t>(base)];
    whole_nodes_ = seen.insert(node).second;
    for (int r = base; r < std::min(base + gpn, nranks_) && whole_nodes_; ++r)
      whole_nodes_ = node_of[static_cast<std::size_t>(r)] == node;
  }
  node_of_ = std::move(node_of);
  if (!whole_nodes_ && ctx_.options != nullptr && ctx_.options->p2p_peers)
    CRYSTAL_INFO(
        "comm {}: its ranks are not whole target nodes of {} in rank order; every "
        "rank stays a host of its own (NET)",
        name_, gpn);
}

int Comm::nodeReal(int rank) const noexcept {
  const int gpn = nodeGpus();
  if (gpn == 0 || rank < 0 || rank >= nranks_) return -1;
  const int base = rank / gpn * gpn;
  int real = -1;
  for (int r = base; r < std::min(base + gpn, nranks_); ++r) {
    if (!isReal(r)) continue;
    if (real >= 0) return -1;  // two real ranks on one node: each stays a host of its own
    real = r;
  }
  return real;
}

std::vector<int> Comm::nodeMembers(int rank) const {
  const int gpn = std::max(1, ctx_.options->gpus_per_node);
  const int base = rank / gpn * gpn;
  std::vector<int> out;
  for (int r = base; r < std::min(base + gpn, nranks_); ++r) out.push_back(r);
  return out;
}

int Comm::mirrorTemplate(int rank) const noexcept {
  const int gpn = nodeGpus();
  if (gpn == 0 || rank < 0 || rank >= nranks_) return -1;
  const auto fullWithoutReal = [&](int base) {
    if (base + gpn > nranks_) return false;
    for (int r = base; r < base + gpn; ++r)
      if (isReal(r)) return false;
    return true;
  };
  if (!fullWithoutReal(rank / gpn * gpn)) return -1;
  // The lowest real rank alone on a full node; real ranks are fixed once slices are made
  // (addRealRanks refuses after the first check-in), so it is found once, not per slice.
  if (mirror_template_ == -2) {
    mirror_template_ = -1;
    for (int r = 0; r < nranks_ && mirror_template_ < 0; ++r)
      if (isReal(r) && nodeReal(r) == r && r / gpn * gpn + gpn <= nranks_) mirror_template_ = r;
  }
  return mirror_template_;
}

bool Comm::writeGraphFile(int rank, const wire::PeerInfo& info) {
  const std::string* path = graphFile(rank);
  if (path == nullptr) return true;  // no NCCL_GRAPH_FILE named for that process
  std::string text = emptyGraphXml();
  std::string what = "no graph (NCCL searches)";
  if (nodeReal(rank) == rank) {
    const std::vector<int> members = nodeMembers(rank);
    const int n = static_cast<int>(members.size());
    // One node: the ring closes on the node and no chain has a NET end; NCCL's own search.
    if (n >= 2 && n < nranks_) {
      NodeGraph g;
      g.real_local = static_cast<int>(std::find(members.begin(), members.end(), rank) -
                                      members.begin());
      for (int j = 0; j < n; ++j)
        g.devs.push_back(j == g.real_local ? info.nvml_dev
                                           : sameNodeDev(j, g.real_local, info.nvml_dev));
      try {
        text = nodeGraphXml(g);
      } catch (const InputError& e) {
        fail(rank, fmt::format("NCCL_GRAPH_FILE for its node: {}", e.what()));
        return false;
      }
      const auto order = nodeRingOrder(n, g.real_local, true);
      what = fmt::format("ring chain from local {} to {}, tree in rank order", order.front(),
                         order.back());
    }
  }
  // Written whole under another name, then renamed: NCCL never reads half a file.
  const std::string tmp = *path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  bool ok = f != nullptr && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (f != nullptr && std::fclose(f) != 0) ok = false;
  if (!ok || std::rename(tmp.c_str(), path->c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    fail(rank, fmt::format("cannot write its NCCL_GRAPH_FILE {}: {}", *path, why));
    return false;
  }
  CRYSTAL_INFO("comm {}: rank {}'s NCCL_GRAPH_FILE {}: {}", name_, rank, *path, what);
  return true;
}

void Comm::onIntraNodeAccept(StreamId id, int sender, int target) {
  if (phase_ == CommPhase::Failed || phase_ == CommPhase::Destroyed) {
    ctx_.loop->close(id);
    return;
  }
  if (!isReal(sender) || nodeReal(sender) != sender) {
    ctx_.loop->close(id);
    fail(sender,
         "intra-node all-gather with a virtual rank: the real rank shares its host hash with "
         "virtual ranks (set a unique NCCL_HOSTID per real process, or emulation.p2p_peers)");
    return;
  }
  IntraGather g;
  g.real = sender;
  g.members = nodeMembers(sender);
  const int n = static_cast<int>(g.members.size());
  g.local = static_cast<int>(std::find(g.members.begin(), g.members.end(), sender) -
                             g.members.begin());
  if (target != g.members[static_cast<std::size_t>((g.local + 1) % n)]) {
    ctx_.loop->close(id);
    fail(sender, fmt::format("intra-node all-gather: dialled rank {}, its next on the node is {}",
                             target, g.members[static_cast<std::size_t>((g.local + 1) % n)]));
    return;
  }
  auto addr = p2p_addr_.find(sender);
  if (addr == p2p_addr_.end()) {
    ctx_.loop->close(id);
    fail(sender, "intra-node all-gather before the host knows the rank's P2P listener");
    return;
  }
  // socketRingAllGather: T = n/2 steps; ring 1 skips the last one when n is even.
  const int steps = n / 2, ring1 = n % 2 == 0 ? steps - 1 : steps;
  g.side[0].stream = id;
  g.side[0].rx_expected = steps;  // ring 0 from R
  g.side[1].rx_expected = ring1;  // ring 1 from R
  const int prev = g.members[static_cast<std::size_t>((g.local - 1 + n) % n)];
  StreamId pid = 0;
  try {
    pid = ctx_.loop->adopt(connectTcp(addr->second), true,
                           fmt::format("intra {}->{}", prev, sender));
  } catch (const ProtocolError& e) {
    ctx_.loop->close(id);
    fail(sender, fmt::format("intra-node all-gather: connect to {}: {}", addr->second.str(),
                             e.what()));
    return;
  }
  g.side[1].stream = pid;
  streams_.insert(id);
  streams_.insert(pid);
  intra_.push_back(std::move(g));
  CRYSTAL_DEBUG("comm {}: intra-node all-gather #{} of rank {} over {} ranks", name_,
                intra_.size(), sender, n);

  std::vector<std::byte> hello;
  wire::appendHandshake(hello, magic_, wire::kSocketTypeBootstrap);
  const wire::SocketAck ack{prev, wire::kTagIntraNodeAllGather};
  wire::appendFrame(hello, wire::bytesOf(ack));
  // The first size goes ahead: R swaps sizes with its prev before it sends any data.
  const std::int32_t size = static_cast<std::int32_t>(topo_xml::kSlotBytes);
  const auto size_bytes = std::as_bytes(std::span<const std::int32_t, 1>(&size, 1));
  hello.insert(hello.end(), size_bytes.begin(), size_bytes.end());
  Stream* ps = ctx_.loop->find(pid);
  ps->send(hello);
  Stream* ns = ctx_.loop->find(id);
  if (ring1 > 0) ns->send(size_bytes);
  for (int side : {0, 1}) {
    Stream* s = side == 0 ? ns : ps;
    const StreamId sid = side == 0 ? id : pid;
    s->on_data = [this, sid](Stream& st) {
      int sd = 0;
      if (IntraGather* ig = intraFor(sid, sd)) onIntraData(*ig, sd, st);
    };
    s->on_closed = [this, sid](Stream&, const std::string& why) {
      int sd = 0;
      if (IntraGather* ig = intraFor(sid, sd)) onIntraClosed(*ig, sd, why);
    };
    s->setWaiting(true);
  }
  if (!ns->rx().empty()) onIntraData(intra_.back(), 0, *ns);
}

Comm::IntraGather* Comm::intraFor(StreamId stream, int& side) {
  for (auto& g : intra_)
    for (int k : {0, 1})
      if (g.side[k].stream == stream && !g.side[k].closed) {
        side = k;
        return &g;
      }
  return nullptr;
}

void Comm::onIntraData(IntraGather& g, int side, Stream& s) {
  IntraSide& sd = g.side[side];
  try {
    while (phase_ != CommPhase::Failed) {
      const auto rx = s.rx();
      if (sd.rx_left < 0) {
        if (rx.empty()) break;
        if (sd.rx_frames == sd.rx_expected)
          throw ProtocolError(fmt::format("{} bytes after the last of {} slots", rx.size(),
                                          sd.rx_expected));
        if (rx.size() < 4) break;
        const auto limit = static_cast<std::int32_t>(topo_xml::kSlotBytes);
        const std::int32_t size = wire::decodeFrameSize(rx, limit, "intra-node all-gather");
        if (size != limit)
          throw ProtocolError(fmt::format(
              "a {}-byte topology slot; NCCL 2.28.9 sends {} (xmlMemSize of 256 nodes)", size,
              limit));
        s.consume(4);
        sd.rx_left = size;
        continue;
      }
      // Side 0's first frame is R's own slot (ring 0, step 0); the rest are forwarded copies
      // of the host's own clones, read and dropped as they come.
      const bool own = side == 0 && sd.rx_frames == 0;
      if (own) {
        if (rx.size() < static_cast<std::size_t>(sd.rx_left)) break;
        g.slot.assign(rx.begin(), rx.begin() + sd.rx_left);
        s.consume(static_cast<std::size_t>(sd.rx_left));
        sd.rx_left = 0;
      } else {
        const std::size_t n = std::min(rx.size(), static_cast<std::size_t>(sd.rx_left));
        s.consume(n);
        sd.rx_left -= static_cast<long>(n);
        if (sd.rx_left > 0) break;
      }
      sd.rx_left = -1;
      ++sd.rx_frames;
      if (own) sendIntraClones(g);
    }
  } catch (const ProtocolError& e) {
    fail(g.real, fmt::format("intra-node all-gather ({} side): {}", side == 0 ? "next" : "prev",
                             e.what()));
    return;
  }
  if (Stream* st = ctx_.loop->find(sd.stream))
    st->setWaiting(sd.rx_left >= 0 || sd.rx_frames < sd.rx_expected);
}

void Comm::sendIntraClones(IntraGather& g) {
  const auto real = realSlice<wire::PeerInfo>(AllGatherKind::PeerInfo, g.real, "ncclPeerInfo");
  if (!real)
    throw ProtocolError("topology slot before the rank's peerInfo reached the host");
  (void)topo_xml::findGpu(g.slot, g.real);  // validates once, with a precise message
  const int n = static_cast<int>(g.members.size());
  const int steps = n / 2, ring1 = n % 2 == 0 ? steps - 1 : steps;
  const auto clone = [&](int local) {
    return topo_xml::cloneSlotFor(g.slot, g.real, g.members[static_cast<std::size_t>(local)],
                                  sameNodeDev(local, g.local, real->nvml_dev),
                                  sameNodeBusId(local));
  };
  const std::int32_t size = static_cast<std::int32_t>(topo_xml::kSlotBytes);
  const auto size_bytes = std::as_bytes(std::span<const std::int32_t, 1>(&size, 1));
  for (int side : {0, 1}) {
    Stream* s = ctx_.loop->find(g.side[side].stream);
    if (s == nullptr) continue;
    const int frames = side == 0 ? ring1 : steps;
    for (int k = 0; k < frames; ++k) {
      if (k > 0) s->send(size_bytes);  // frame 0's size went ahead
      const int local = side == 0 ? (g.local + k + 1) % n : ((g.local - k - 1) % n + n) % n;
      s->send(clone(local));
    }
  }
  g.sent = true;
  g.slot.clear();
  g.slot.shrink_to_fit();
}

void Comm::onIntraClosed(IntraGather& g, int side, const std::string& why) {
  IntraSide& sd = g.side[side];
  sd.closed = true;
  streams_.erase(sd.stream);
  if (phase_ == CommPhase::Failed || phase_ == CommPhase::Destroyed) return;
  if (!g.sent || sd.rx_frames < sd.rx_expected || sd.rx_left >= 0)
    fail(g.real, fmt::format("intra-node all-gather: {} connection closed after {} of {} slots: {}",
                             side == 0 ? "next" : "prev", sd.rx_frames, sd.rx_expected, why));
}

// bootstrapP2PBarrier over the node's members: in round `mask` member L sends to L+mask and
// waits for L-mask. R's messages all go to virtual members (R is the node's only real rank),
// so R's first message of an instance answers every receive R will wait for in it.
void Comm::onIntraNodeBarrier(int sender, int target) {
  const std::vector<int> members = nodeMembers(sender);
  const int n = static_cast<int>(members.size());
  const int local = static_cast<int>(std::find(members.begin(), members.end(), sender) -
                                     members.begin());
  const int to = static_cast<int>(std::find(members.begin(), members.end(), target) -
                                  members.begin());
  const int mask = (to - local + n) % n;
  if (to == n || mask == 0 || (mask & (mask - 1)) != 0)
    throw ProtocolError(fmt::format(
        "intra-node barrier message to rank {}: not a power-of-two distance on the node", target));
  int rounds = 0;
  for (int m = 1; m < n; m <<= 1) ++rounds;
  if (intra_barrier_msgs_[sender]++ % rounds != 0) return;
  for (int m = 1; m < n; m <<= 1) {
    const int src = members[static_cast<std::size_t>((local - m + n) % n)];
    reply(sender, src, members.front(), std::vector<std::byte>(4, std::byte{0}));
  }
}

}  // namespace crystal::host
