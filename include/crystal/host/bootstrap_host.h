// The emulation host's NCCL 2.28.9 bootstrap stand-in: answers, for every virtual rank,
// what a real NCCL rank expects from its peers while a communicator is created (root
// check-in, bootstrap ring and all-gathers, connection exchange, syncs, barriers, split).
//
// The launcher (LD_PRELOAD interposer + `crystal host`) drives it:
//   BootstrapHost host(options);            // binds the root / ring / p2p listeners
//   host.start();                           // epoll loop thread
//   UniqueId id = host.mintUniqueId();      // handed to the real ranks as their ncclUniqueId
//   host.declareComm(id, {nranks, real ranks, version the real rank's ncclGetVersion gave});
//   ... real ranks call ncclCommInitRank(id) ...; ncclCommSplit children appear by themselves
//   host.stop();
//
// Purely reactive: the host sends a virtual rank's message only when a real rank's protocol
// step waits for it, so nothing is left unconsumed when a real rank destroys its comm.
//
// Addressing (documented in docs/host.md): all virtual ranks of all communicators share
// three TCP listeners bound to 0.0.0.0 (root, ring, p2p). Virtual rank v is advertised as
// the loopback alias 127.(v+1)>>16.(v+1)>>8.(v+1) on the ring/p2p port; the host decodes
// the target rank from getsockname() and the communicator from the handshake magic. This
// needs the real ranks on the host's machine (NCCL_SOCKET_IFNAME=lo).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "crystal/live/nccl_slots.h"

namespace crystal::host {

// NCCL's ncclUniqueId: 128 bytes = {uint64 magic; ncclSocketAddress root (28 B)} + zeros.
struct UniqueId {
  std::array<std::byte, 128> bytes{};
  friend bool operator==(const UniqueId&, const UniqueId&) = default;
};

// NCCL's communicator hash of a root-created comm (getHash over the 128 id bytes); the v11
// plugin commId and the key under which the host knows the comm.
[[nodiscard]] std::uint64_t commHashOf(const UniqueId& id) noexcept;
// Child comm hash of ncclCommSplit (parent hash, parent's split count after increment, color).
[[nodiscard]] std::uint64_t splitCommHash(std::uint64_t parent_hash, int split_count,
                                          int color) noexcept;

// NCCL 2.28.9 = 22809; the only version whose wire layout the host has verified.
inline constexpr int kSupportedNcclVersion = 22809;
inline constexpr int kSplitNoColor = -1;  // NCCL_SPLIT_NOCOLOR

struct HostOptions {
  std::string bind_address = "0.0.0.0";    // listeners bind here (INADDR_ANY covers aliases)
  std::string root_address = "127.0.0.1";  // written into minted unique ids
  std::uint16_t root_port = 0;             // 0 = ephemeral
  std::uint16_t ring_port = 0;
  std::uint16_t p2p_port = 0;
  std::uint64_t emulation_id = 0;  // copied into forged handles (NetHandle::emulation)
  // A real rank that leaves a started exchange silent this long fails its communicator:
  // the host logs one error line naming comm/rank/step and closes the comm's sockets, so the
  // real rank's NCCL call returns an error instead of hanging.
  std::chrono::milliseconds stall_timeout{120000};
  int gpus_per_node = 8;  // virtual peerInfo cudaDev/nvmlDev = v % this
  // Virtual ranks on the target node of a real rank (node = rank / gpus_per_node of a comm
  // holding exactly one real rank there; a split child when made of whole nodes) look like
  // GPUs of the real rank's own host: its host hash, their own busId/NVML index, and the real
  // rank's topology XML cloned for them in NCCL's intra-node all-gather, so NCCL picks its P2P
  // transport toward them and connects them with memory from the real rank's block pool
  // (docs/host.md "Virtual GPUs of a real rank's node"). Off: every virtual rank is a host of
  // its own, reached over NET.
  bool p2p_peers = false;
};

// One real rank's declaration, as the interposer learns it before calling NCCL.
struct CommSpec {
  int nranks = 0;
  std::vector<int> real_ranks;               // comm ranks that are real processes (any order)
  int nccl_version = kSupportedNcclVersion;  // ncclGetVersion() in the real rank
  std::string name;                          // for messages ("world", "tp", ...)
};

// An 8-byte store into a real rank's GPU memory (BootstrapHost::takeDeviceWrites): one of its
// P2P counters that the virtual GPU of a pool connection would advance, with that connection's
// identity, so that the rank's process can pace the counter instead (plugin/p2p_pacer.h).
struct DeviceWrite {
  std::uint64_t address = 0, value = 0;
  std::uint64_t watch = 0;  // the pool block's counter the real rank advances (tail / head @0)
  std::int32_t peer = -1;   // the virtual GPU
  std::int32_t nranks = 0;
  std::int32_t ordinal = 0;  // k-th entry of its side in the exchange = k-th connected channel
  bool send = false;         // a send connector of the real rank (address = its head)
  std::uint8_t graph = 0;    // setup tag's graph byte (graph id + 1: ring 1, tree 2; 0 = p2p)
};
// A P2P counter no step of NCCL's will reach (steps count from 0 by at most a few per chunk).
inline constexpr std::uint64_t kFreeRunningStep = std::uint64_t{1} << 62;

// Blocks for P2P connectors to virtual node members (BootstrapHost::addBlockPool).
struct BlockPoolSpec {
  std::uint64_t recv_block_bytes = 0;  // each >= NCCL 2.28.9's recv block (ncclRecvMem + LL +
  std::uint64_t send_block_bytes = 0;  // LL128 + SIMPLE) / send block (ncclSendMem)
  std::vector<std::uint64_t> recv, send;
};
// Where a real rank that offered a block pool stands on its target node: `members` ranks of
// the comm (the rank among them) played as GPUs of its host, or members 0 when the host keeps
// every rank of that node a host of its own (the pool is not used).
struct NodePlace {
  int members = 0;
  // Its neighbours on the node's ring chain (channel 0 of NCCL's ring graph; every channel
  // runs the same chain, node_graph.h): global ranks, -1 where the ring leaves the node over
  // the NET (a comm over several nodes) or unknown. A one-node comm's chain closes on itself.
  int prev = -1;
  int next = -1;
  // NCCL's tree channels before it doubled them (channel c runs tree (c / n) % 2); 0 unknown.
  int tree_channels = 0;
};
using live::kP2pRecvBlockBytes;  // NCCL 2.28.9's P2P block sizes (live/nccl_slots.h)
using live::kP2pSendBlockBytes;

// key/color of a virtual rank for a split of a communicator. `split_index` counts the
// splits of that parent from 1 (NCCL's splitCount after increment).
struct SplitChoice {
  int color = kSplitNoColor;
  int key = 0;
};
using SplitResolver =
    std::function<SplitChoice(std::uint64_t parent_hash, int split_index, int parent_rank)>;

// One problem the host ran into. The comm it names is failed (its sockets closed); other
// communicators keep being served.
struct HostError {
  std::uint64_t comm_hash = 0;
  int rank = -1;        // real rank concerned, -1 if none
  std::string message;  // one line: "comm world (0x…) rank 3: …"
};

// A virtual sender opened a data stream to a real rank's RealListen handle (Hello sent).
struct VirtualConnection {
  std::uint64_t comm_hash = 0;
  int virtual_rank = -1;
  int real_rank = -1;
  std::uint32_t listen_id = 0;
};

enum class CommPhase { Declared, CheckIn, Ring, Ready, Failed, Destroyed };

struct CommStatus {
  std::uint64_t comm_hash = 0;
  std::uint64_t parent_hash = 0;  // 0 for root-created comms
  int nranks = 0;
  CommPhase phase = CommPhase::Declared;
  int allgathers_done = 0;  // global ring all-gathers completed by every real rank
  std::vector<int> real_ranks;
};

class BootstrapHost {
 public:
  explicit BootstrapHost(HostOptions options = {});
  ~BootstrapHost();  // stops the loop, closes every socket
  BootstrapHost(const BootstrapHost&) = delete;
  BootstrapHost& operator=(const BootstrapHost&) = delete;

  void start();  // starts the event loop thread (idempotent)
  void stop();   // joins it; safe to call twice

  // A unique id whose root is this host (random magic). Thread-safe.
  [[nodiscard]] UniqueId mintUniqueId();
  // Declare (or re-declare with more real ranks) the communicator of `id`. Throws
  // InputError on nranks/real ranks out of range and ProtocolError on an NCCL version other
  // than kSupportedNcclVersion. Returns the comm hash. Thread-safe.
  std::uint64_t declareComm(const UniqueId& id, const CommSpec& spec);

  void setSplitResolver(SplitResolver resolver);  // before the first split
  // Memory a real rank's process allocated for the P2P connections its NCCL makes to the
  // virtual GPUs of its node (HostOptions::p2p_peers; control/protocol.h BlockPool): the host
  // names these blocks, owned by the real rank itself, in the connect entries it answers for
  // those GPUs, one per connector, in order; returns where the rank stands (members 0: the
  // blocks are not kept, as no node member is a GPU of its host). Throws InputError for an
  // unknown comm, a rank that is not real, p2p_peers off, or blocks smaller than NCCL
  // 2.28.9's. Thread-safe.
  NodePlace addBlockPool(std::uint64_t comm_hash, int rank, const BlockPoolSpec& pool);
  // The file the real process of `rank` reads as NCCL_GRAPH_FILE (p2p_peers): the host writes
  // it for each comm of that process when the rank's peerInfo arrives, before NCCL's graph
  // search (node_graph.h). A split child's real ranks keep their parent rank's file. Unknown
  // comm or rank: ignored. Thread-safe.
  void setGraphFile(std::uint64_t comm_hash, int rank, const std::string& path);
  // The 8-byte stores that real rank `rank`'s GPU memory is owed for its pool connections
  // (at most `max`, oldest first; removed from the queue): each pool connection's own counter
  // of the real rank (head of a send connector, tail of a recv connector) set free-running, so
  // the virtual GPU never makes it wait (Comm::onNodeSetup). Empty for an unknown comm.
  [[nodiscard]] std::vector<DeviceWrite> takeDeviceWrites(std::uint64_t comm_hash, int rank,
                                                          std::size_t max);
  void onError(std::function<void(const HostError&)> callback);
  void onVirtualConnection(std::function<void(const VirtualConnection&)> callback);

  [[nodiscard]] std::vector<HostError> errors() const;
  [[nodiscard]] std::vector<CommStatus> comms() const;
  [[nodiscard]] std::uint16_t rootPort() const noexcept;
  [[nodiscard]] std::uint16_t ringPort() const noexcept;
  [[nodiscard]] std::uint16_t p2pPort() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace crystal::host
