// One communicator as the host sees it: which ranks are real, the real ranks' check-ins,
// the host's ring endpoints next to real ranks, the all-gathers in flight, and the P2P
// messages addressed to its virtual ranks. Everything runs on the host's loop thread.
//
// Split across files by job: comm.cc (lifecycle, root check-in, stalls), comm_ring.cc (ring,
// all-gathers), comm_p2p.cc (bootstrapSend/Recv answers: connection setup, syncs, barrier),
// comm_split.cc (split).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "crystal/host/bootstrap_host.h"
#include "loop.h"
#include "virtual_slices.h"
#include "wire.h"

namespace crystal::host {

class Comm;

// What a Comm needs from the host around it.
struct HostContext {
  Loop* loop = nullptr;
  const HostOptions* options = nullptr;
  std::uint16_t ring_port = 0;
  std::uint16_t p2p_port = 0;
  std::function<void(const HostError&)> report;  // error sink
  std::function<void(const VirtualConnection&)> on_virtual_connection;
  const SplitResolver* resolver = nullptr;
  // Registers a split child (magic = its hash) and returns it.
  std::function<Comm*(std::uint64_t hash, int nranks, std::vector<int> real_ranks,
                      std::string name)>
      create_child;
};

class Comm {
 public:
  Comm(HostContext& ctx, std::uint64_t hash, std::uint64_t magic, std::uint64_t root_magic,
       int nranks, std::vector<int> real_ranks, std::string name);

  [[nodiscard]] std::uint64_t hash() const noexcept { return hash_; }
  [[nodiscard]] std::uint64_t magic() const noexcept { return magic_; }
  [[nodiscard]] std::uint64_t rootMagic() const noexcept { return root_magic_; }
  [[nodiscard]] int nranks() const noexcept { return nranks_; }
  [[nodiscard]] bool isReal(int rank) const noexcept {
    return rank >= 0 && rank < nranks_ && real_[static_cast<std::size_t>(rank)] != 0;
  }
  [[nodiscard]] CommStatus status() const;
  [[nodiscard]] bool failed() const noexcept { return phase_ == CommPhase::Failed; }
  void addRealRanks(const std::vector<int>& ranks);
  void setParent(std::uint64_t parent_hash) noexcept { parent_hash_ = parent_hash; }
  // A split child's target nodes: `node_of[c]` is the parent's node of the child's rank c
  // (nodeOf). A child whose ranks do not come in whole nodes, in rank order, of
  // gpus_per_node each keeps every rank a host of its own (nodeGpus 0), as the plugin's
  // model takes a comm's nodes as blocks of consecutive ranks (live::commLinks).
  void setNodes(std::vector<int> node_of);
  // The target node of `rank`: rank / gpus_per_node for a root-created comm.
  [[nodiscard]] int nodeOf(int rank) const noexcept;
  // NCCL_GRAPH_FILE of real rank `rank`'s process (BootstrapHost::setGraphFile).
  void setGraphFile(int rank, std::string path) { graph_files_[rank] = std::move(path); }
  [[nodiscard]] const std::string* graphFile(int rank) const {
    const auto it = graph_files_.find(rank);
    return it == graph_files_.end() ? nullptr : &it->second;
  }

  // ---- comm.cc
  void onCheckIn(const wire::ExtInfo& info);
  void checkStall(Clock::time_point now);
  // Fails the comm: one error line, every socket of the comm closed (real ranks see EOF and
  // return an NCCL error instead of hanging). Other comms are untouched.
  void fail(int rank, const std::string& message);

  // ---- comm_ring.cc
  // A real rank dialled the ring alias of virtual rank `target` (its "next").
  void onRingAccept(StreamId stream, int target);
  // Ring address of real rank `rank`'s ring listener (from check-in or split message).
  void connectAsPrev(int rank, const wire::SocketAddress& ring_listen);

  // ---- comm_p2p.cc: one complete bootstrapSend message to virtual rank `target`.
  void onP2pMessage(int target, const wire::SocketAck& ack, std::span<const std::byte> payload);

  // ---- comm_intranode.cc: the virtual ranks of a real rank's node (HostOptions::p2p_peers).
  // The real rank alone on `rank`'s target node when the host plays that node's other ranks
  // as GPUs of the real rank's own host; -1 when `rank` is a host of its own.
  [[nodiscard]] int nodeReal(int rank) const noexcept;
  // gpus_per_node when this comm plays node members as GPUs of a real rank's host, else 0.
  [[nodiscard]] int nodeGpus() const noexcept;
  // Global ranks of `rank`'s target node, in rank order.
  [[nodiscard]] std::vector<int> nodeMembers(int rank) const;
  // For a virtual rank on a full node without real ranks, when some full node holds exactly
  // one real rank R: R (the node copied, virtual_slices.h mirroredGraphInfo); else -1.
  [[nodiscard]] int mirrorTemplate(int rank) const noexcept;
  // Real rank `sender` dialled `target` (its next on the node) for NCCL's intra-node
  // all-gather of topology XML (bootstrap.cc bootstrapIntraNodeAllGather); the socket
  // acknowledgement is consumed, the slot frames follow on `stream`.
  void onIntraNodeAccept(StreamId stream, int sender, int target);
  // ---- comm_node_connect.cc: memory real rank `rank` offers for those connections. Kept,
  // and the rank's place on its node returned, when the host plays that node's other ranks
  // as GPUs of its host; otherwise refused with members 0 (nothing will use the blocks).
  NodePlace addBlockPool(int rank, const BlockPoolSpec& pool);
  [[nodiscard]] std::vector<DeviceWrite> takeDeviceWrites(int rank, std::size_t max);

 private:
  struct AllGather {
    int index = 0;
    int slice_bytes = 0;
    AllGatherKind kind = AllGatherKind::RingAddresses;
    std::vector<std::byte> data;  // nranks * slice_bytes
    std::vector<char> have;
    int have_count = 0;
    int template_rank = -1;  // first real slice received
    bool finished = false;   // every slice known and post-processed
  };
  struct Endpoint {
    int rank = -1;             // the real rank on the other end
    bool host_is_next = true;  // host plays rank+1 (accepted) or rank-1 (dialled)
    StreamId stream = 0;
    int rx_ag = 0, rx_step = 0, rx_size = -1;  // rx_size -1: expecting a frame header
    int tx_ag = 0, tx_step = 0;
    bool tx_header_sent = false;
    bool tx_blocked = false;  // next frame waits for a real slice the host has not seen
    bool closed = false;
  };
  struct PendingReply {
    int to = -1;
    int from = -1;
    std::int32_t tag = 0;
    std::vector<std::byte> payload;
  };
  struct SplitRecord {
    int index = 0;  // NCCL splitCount
    int ag_index = -1;
    bool computed = false;
    std::vector<wire::SplitInfo> infos;       // per parent rank
    std::map<int, Comm*> children;            // color -> child
    std::map<int, std::vector<int>> members;  // color -> parent ranks in child order
    std::set<int> ring_info_seen;             // real parent ranks whose COMMSPLIT arrived
  };

  void sendRootReply(int rank);  // comm.cc
  // ring
  Endpoint* endpointFor(StreamId stream);
  // A ring connection of virtual rank `rank` on `stream` (its prev's when `host_is_next`):
  // the comm owns the stream, whose data and close go to the endpoint. Returns the stream.
  Stream* addEndpoint(StreamId stream, int rank, bool host_is_next);
  void onEndpointData(Endpoint& e, Stream& s);
  void onEndpointClosed(Endpoint& e, const std::string& why);
  void pump();
  void pumpEndpoint(Endpoint& e);
  [[nodiscard]] int rxCount(const Endpoint& e) const noexcept;
  [[nodiscard]] int txCount(const Endpoint& e) const noexcept;
  void storeSlice(AllGather& ag, int slice, std::span<const std::byte> bytes);
  [[nodiscard]] bool ensureSlice(AllGather& ag, int slice);
  void finishAllGather(AllGather& ag);
  void updateWaiting(Endpoint& e);
  void maybeDestroyed();
  [[nodiscard]] VirtualRankContext virtualContext(int rank) const;

  // p2p
  void reply(int to, int from, std::int32_t tag, std::vector<std::byte> payload);
  void flushPendingReplies();
  void onSetup(int sender, int target, const wire::SetupTag& tag, std::int32_t raw_tag,
               std::span<const std::byte> payload);
  void onBarrier(int sender, int target);
  void onIntraNodeBarrier(int sender, int target);  // comm_intranode.cc
  // comm_node_connect.cc: connection setup from a real rank to a virtual GPU of its node,
  // answered from the rank's block pool or refused (its sync is answered like any other).
  void onNodeSetup(int sender, int target, const wire::SetupTag& tag, std::int32_t raw_tag,
                   std::span<const std::byte> payload);
  void refuseNodeSetup(int sender, int target, std::int32_t raw_tag, const std::string& why);
  // Which connection of NCCL's exchange a Hello stands for (live/handle.h, wire version 2).
  struct ConnIdentity {
    int graph = 0;     // setup tag's graph byte (graph id + 1, 0 = p2p)
    int distance = 0;  // i of the exchange
    int ordinal = 0;   // k-th receive entry = k-th connected channel
  };
  void sendHello(int sender_virtual, int real_rank, const wire::ConnectEntry& entry,
                 const ConnIdentity& id);

  // intra-node all-gather (comm_intranode.cc). Side 0: the real rank's connection to its
  // next (accepted; ring 0 in, ring 1 out); side 1: the host's to the real rank as its prev
  // (dialled; ring 1 in, ring 0 out).
  struct IntraSide {
    StreamId stream = 0;
    int rx_expected = 0, rx_frames = 0;
    long rx_left = -1;  // bytes of the current frame still to read; -1: a size comes next
    bool closed = false;
  };
  struct IntraGather {
    int real = -1;             // the node's real rank
    std::vector<int> members;  // the node's global ranks; the local index is the position
    int local = 0;             // the real rank's local index
    IntraSide side[2];
    std::vector<std::byte> slot;  // the real rank's own serialized XML
    bool sent = false;            // every clone queued
  };
  IntraGather* intraFor(StreamId stream, int& side);
  void onIntraData(IntraGather& g, int side, Stream& s);
  void onIntraClosed(IntraGather& g, int side, const std::string& why);
  void sendIntraClones(IntraGather& g);
  // Real rank `rank`'s slice of the first all-gather of `kind` that has it, decoded.
  template <typename T>
  [[nodiscard]] std::optional<T> realSlice(AllGatherKind kind, int rank, const char* what) const {
    for (const auto& ag : ags_) {
      if (ag.kind != kind || ag.have[static_cast<std::size_t>(rank)] == 0) continue;
      const auto at = static_cast<std::size_t>(rank) * static_cast<std::size_t>(ag.slice_bytes);
      return wire::decodeExact<T>(
          std::span(ag.data).subspan(at, static_cast<std::size_t>(ag.slice_bytes)), what);
    }
    return std::nullopt;
  }
  // Writes real rank `rank`'s NCCL_GRAPH_FILE for this comm (node_graph.h) from its peerInfo;
  // false (the comm failed, with the reason) when the file cannot be written.
  bool writeGraphFile(int rank, const wire::PeerInfo& info);

  // split
  void onSplitAllGather(AllGather& ag);
  void onSplitRingInfo(int sender, int target, std::span<const std::byte> payload);
  void deliverSplitRingInfo(SplitRecord& rec, int sender, int target,
                            const wire::RingConnectInfo& info);

  HostContext& ctx_;
  std::uint64_t hash_, magic_, root_magic_;
  std::uint64_t parent_hash_ = 0;
  int nranks_;
  // NCCL's channels per tree before duplication, from a real rank's graph all-gather
  // (min of its tree and ring graphs' nChannels; init.cc): written into the handles and
  // Hellos of later connections (live/handle.h tree_channels). 0 until then.
  int tree_channels_ = 0;
  std::vector<char> real_;
  std::string name_;
  CommPhase phase_ = CommPhase::Declared;

  std::map<int, wire::ExtInfo> check_ins_;
  std::set<int> replied_;
  Clock::time_point first_check_in_{};
  std::deque<Endpoint> endpoints_;  // deque: references stay valid while growing
  std::vector<AllGather> ags_;
  std::map<int, int> started_ag_;                // real rank -> last all-gather it began
  std::map<int, wire::SocketAddress> p2p_addr_;  // real ranks' bootstrap P2P listeners
  std::vector<PendingReply> pending_replies_;
  std::set<StreamId> streams_;             // every socket of this comm
  std::map<int, std::uint32_t> conn_seq_;  // forged handles per virtual rank
  std::map<int, long> barrier_msgs_;       // real rank -> barrier messages received
  std::deque<IntraGather> intra_;          // intra-node all-gathers, in order of arrival
  std::map<int, long> intra_barrier_msgs_;  // real rank -> intra-node barrier messages
  bool node_setup_refused_ = false;         // the refusal's error line was written
  struct BlockPoolState {
    BlockPoolSpec spec;
    std::size_t next_recv = 0, next_send = 0;  // blocks handed out so far
    std::deque<DeviceWrite> writes;             // owed to the rank's GPU memory, oldest first
  };
  std::map<int, BlockPoolState> pools_;  // real rank -> its blocks for node members
  mutable int mirror_template_ = -2;     // mirrorTemplate's real rank; -2: not looked up
  std::vector<int> node_of_;             // setNodes; empty: rank / gpus_per_node
  bool whole_nodes_ = true;              // node_of_ is blocks of gpus_per_node ranks
  std::map<int, std::string> graph_files_;  // real rank -> its process's NCCL_GRAPH_FILE
  long barrier_instances_started_ = 0;
  int split_count_ = 0;
  std::vector<SplitRecord> splits_;
  std::vector<std::tuple<int, int, std::vector<std::byte>>> pending_split_msgs_;
};

}  // namespace crystal::host
