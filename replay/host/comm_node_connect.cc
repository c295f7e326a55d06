// Connection setup from a real rank R to a virtual GPU V of its node (HostOptions::p2p_peers):
// NCCL 2.28.9 connects them with its P2P transport, exchanging one 256-byte p2pConnectInfo per
// connector over bootstrap (transport.cc ncclTransportP2pSetup; research note §11).
//
// V's entries name R itself as the owner of V's blocks (§11.7): NCCL then takes the entry's
// directPtr as a device address of its own process and never contacts V's process (no proxy
// Init, no UDS fd exchange). The addresses come from R's process: its interposer allocated
// them after ncclCommInitRank and offered them as a block pool (control/protocol.h
// BlockPool). R's send connectors get V recv blocks (R writes data and tail there), its
// recv connectors V send blocks (R writes head there).
//
// Without a pool (or once it is used up) the host answers with a reply longer than any
// connect message: R's bootstrapRecv fails ("Message truncated") instead of waiting on its
// listener, which a failed comm's closed sockets would never wake.
#include <fmt/core.h>

#include <algorithm>
#include <cstring>

#include "comm.h"
#include "crystal/base/error.h"
#include "crystal/base/log.h"

namespace crystal::host {
namespace {

// transport/p2p.cc p2pConnectInfo inside a 256-byte ncclConnect (x86_64, research §11.4).
constexpr std::size_t kInfoRank = 0, kInfoRead = 4, kInfoDirectPtr = 8, kInfoSize = 16;

template <typename T>
T field(const wire::ConnectEntry& e, std::size_t at) {
  T v;
  std::memcpy(&v, e.bytes + at, sizeof v);
  return v;
}

wire::ConnectEntry ownedByReal(int real_rank, std::uint64_t address, std::uint64_t bytes) {
  wire::ConnectEntry e{};
  const std::int32_t rank = real_rank, read = 0;
  std::memcpy(e.bytes + kInfoRank, &rank, sizeof rank);
  std::memcpy(e.bytes + kInfoRead, &read, sizeof read);
  std::memcpy(e.bytes + kInfoDirectPtr, &address, sizeof address);
  std::memcpy(e.bytes + kInfoSize, &bytes, sizeof bytes);
  return e;
}

}  // namespace

NodePlace Comm::addBlockPool(int rank, const BlockPoolSpec& pool) {
  // Two real ranks on the node, or a split child not made of whole nodes: every rank of the
  // node stays a host of its own and no P2P connection will ask for a block.
  if (nodeReal(rank) != rank) {
    CRYSTAL_INFO(
        "comm {}: rank {}'s node has no virtual GPUs of its host (another real rank "
        "on it, or a split child not made of whole nodes); its block pool is not used",
        name_, rank);
    return {};
  }
  const std::vector<int> members = nodeMembers(rank);
  BlockPoolState& st = pools_[rank];
  st.spec.recv_block_bytes = pool.recv_block_bytes;
  st.spec.send_block_bytes = pool.send_block_bytes;
  st.spec.recv.insert(st.spec.recv.end(), pool.recv.begin(), pool.recv.end());
  st.spec.send.insert(st.spec.send.end(), pool.send.begin(), pool.send.end());
  NodePlace at{static_cast<int>(members.size())};
  // R's own view of the ring (ncclTopoPreset).
  if (const auto g =
          realSlice<wire::AllGatherInfo>(AllGatherKind::GraphInfo, rank, "allGatherInfo")) {
    const auto& t = g->topo_ranks;
    at.prev = t.ring_prev[0];
    at.next = t.ring_next[0];
    if (at.members == nranks_) {  // one node: the chain's ends meet
      if (at.prev < 0) at.prev = t.ring_send[0];
      if (at.next < 0) at.next = t.ring_recv[0];
    }
  }
  at.tree_channels = tree_channels_;
  return at;
}

std::vector<DeviceWrite> Comm::takeDeviceWrites(int rank, std::size_t max) {
  std::vector<DeviceWrite> out;
  auto it = pools_.find(rank);
  if (it == pools_.end()) return out;
  auto& q = it->second.writes;
  while (!q.empty() && out.size() < max) {
    out.push_back(q.front());
    q.pop_front();
  }
  return out;
}

void Comm::onNodeSetup(int sender, int target, const wire::SetupTag& tag, std::int32_t raw_tag,
                       std::span<const std::byte> payload) {
  auto pool = pools_.find(sender);
  if (pool == pools_.end()) {
    refuseNodeSetup(sender, target, raw_tag,
                    "its process offered no memory for them (CRYSTAL_P2P_POOL unset)");
    return;
  }
  const auto entries = wire::decodeConnectEntries(payload);
  for (const auto& e : entries)
    if (field<std::int32_t>(e, kInfoRead) != 0) {
      refuseNodeSetup(sender, target, raw_tag,
                      "the rank connects in P2P read mode (NCCL_P2P_READ_ENABLE), which the "
                      "block pool does not lay out");
      return;
    }
  const int i = tag.distance;
  const bool to_send_peer = (sender + i) % nranks_ == target;            // R sends to V
  const bool to_recv_peer = (sender - i + nranks_) % nranks_ == target;  // V sends to R
  // R's message: its recv connectors' entries, then its send connectors'. Apart, all are one
  // kind; together (sendPeer == recvPeer) a recv block is the larger one in write mode.
  std::size_t nrecv = 0;
  if (to_send_peer && to_recv_peer) {
    while (nrecv < entries.size() &&
           field<std::uint64_t>(entries[nrecv], kInfoSize) > kP2pSendBlockBytes)
      ++nrecv;
  } else if (to_recv_peer) {
    nrecv = entries.size();
  }
  const std::size_t nsend = entries.size() - nrecv;
  BlockPoolState& st = pool->second;
  if (st.next_recv + nsend > st.spec.recv.size() || st.next_send + nrecv > st.spec.send.size()) {
    refuseNodeSetup(
        sender, target, raw_tag,
        fmt::format("its block pool is used up ({} recv and {} send blocks offered, {} + {} "
                    "more asked; raise CRYSTAL_P2P_POOL)",
                    st.spec.recv.size(), st.spec.send.size(), nsend, nrecv));
    return;
  }
  // Reply = V's recv entries (one per R send connector), then V's send entries (NCCL reads the
  // first sendChannels entries as its send side).
  std::vector<std::byte> out;
  out.reserve(entries.size() * sizeof(wire::ConnectEntry));
  const auto append = [&](const wire::ConnectEntry& e) {
    const auto b = std::as_bytes(std::span(e.bytes));
    out.insert(out.end(), b.begin(), b.end());
  };
  const std::size_t first_recv = st.next_recv, first_send = st.next_send;
  for (std::size_t k = 0; k < nsend; ++k)
    append(ownedByReal(sender, st.spec.recv[st.next_recv++], st.spec.recv_block_bytes));
  for (std::size_t k = 0; k < nrecv; ++k)
    append(ownedByReal(sender, st.spec.send[st.next_send++], st.spec.send_block_bytes));
  // Free-running virtual GPU: R's send connectors never wait for V's head (ncclSendMem.head at
  // 0 of R's send block), its recv connectors never wait for V's tail (ncclRecvMem.tail at 0 of
  // R's recv block). Simple only: LL/LL128 receivers wait on flags inside their buffers. Each
  // store carries its connection, and the pool block where R's GPU moves the other counter
  // (the tail of V's recv block, the head of V's send block): R's process may pace the store
  // by the model instead (plugin/p2p_pacer.h).
  for (std::size_t k = 0; k < entries.size(); ++k) {
    const bool send = k >= nrecv;
    DeviceWrite w;
    w.address = field<std::uint64_t>(entries[k], kInfoDirectPtr);
    w.value = kFreeRunningStep;
    w.watch = send ? st.spec.recv[first_recv + (k - nrecv)] : st.spec.send[first_send + k];
    w.peer = target;
    w.nranks = nranks_;
    w.ordinal = static_cast<std::int32_t>(send ? k - nrecv : k);
    w.send = send;
    w.graph = static_cast<std::uint8_t>(tag.graph);
    st.writes.push_back(w);
  }
  CRYSTAL_DEBUG("comm {}: setup tag {:#x} rank {} <-> node GPU {}: {} recv, {} send blocks",
                name_, raw_tag, sender, target, nsend, nrecv);
  reply(sender, target, raw_tag, std::move(out));
}

void Comm::refuseNodeSetup(int sender, int target, std::int32_t raw_tag, const std::string& why) {
  if (!node_setup_refused_) {
    node_setup_refused_ = true;
    HostError err;
    err.comm_hash = hash_;
    err.rank = sender;
    err.message = fmt::format(
        "comm {} ({:#x}) rank {}: connection setup (tag {:#x}) to rank {}, a virtual GPU of this "
        "rank's node (P2P transport, emulation.p2p_peers), refused: {}. The reply is oversized "
        "so that NCCL fails (\"Message truncated\") instead of waiting",
        name_, hash_, sender, raw_tag, target, why);
    CRYSTAL_ERROR("{}", err.message);
    if (ctx_.report) ctx_.report(err);
  }
  reply(sender, target, raw_tag,
        std::vector<std::byte>(static_cast<std::size_t>(wire::kMaxMessageBytes) +
                               wire::kConnectEntryBytes));
}

}  // namespace crystal::host
