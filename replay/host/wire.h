// NCCL 2.28.9 bootstrap wire format, as byte layouts (x86_64, little-endian).
//
// Every struct here mirrors the memory image NCCL 2.28.9 (commit dbc86fd0) sends verbatim over
// its bootstrap sockets; sizes and offsets are pinned by static_asserts and were checked
// against src/bootstrap.cc, src/include/transport.h, src/include/graph.h, src/init.cc and
// src/transport/net.cc of that commit. Decoders take untrusted bytes and throw
// crystal::ProtocolError on any size mismatch: no read ever leaves the given span.
#pragma once

#include <netinet/in.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace crystal::host::wire {

// misc/socket.cc: the connector writes {uint64 magic; int32 type}; the acceptor nothing.
inline constexpr std::size_t kHandshakeBytes = 12;
inline constexpr std::int32_t kSocketTypeBootstrap = 1;
inline constexpr std::int32_t kSocketTypeProxy = 2;

// bootstrap.cc tags.
inline constexpr std::int32_t kTagCommSplit = 1 << 29;
inline constexpr std::int32_t kTagIntraNodeAllGather = 1 << 28;
inline constexpr std::int32_t kTagBarrier = 0xbeef;  // init.cc / dev_runtime.cc global barrier
inline constexpr std::int32_t kTagSyncBit = 1 << 7;  // transport.cc final sync
inline constexpr int kMaxChannels = 64;              // MAXCHANNELS
inline constexpr int kNumAlgorithms = 7;             // NCCL_NUM_ALGORITHMS
inline constexpr int kAlgoTree = 0, kAlgoRing = 1;   // NCCL_ALGO_TREE, NCCL_ALGO_RING
inline constexpr int kConnectEntryBytes = 256;       // struct ncclConnect (CONNECT_SIZE)
inline constexpr int kNetHandleBytes = 128;          // NCCL_NET_HANDLE_MAXSIZE
// Largest bootstrap message the host accepts: 2 entries per channel, the biggest a
// connection-setup message can be (transport.cc allocates 2*MAXCHANNELS ncclConnect).
inline constexpr std::int32_t kMaxMessageBytes = 2 * kMaxChannels * kConnectEntryBytes;

// union ncclSocketAddress: sockaddr / sockaddr_in / sockaddr_in6 = 28 bytes.
struct alignas(4) SocketAddress {
  std::uint8_t bytes[28] = {};
  [[nodiscard]] static SocketAddress fromIpv4(std::uint32_t host_order_ip, std::uint16_t port);
  [[nodiscard]] bool isZero() const noexcept;
  [[nodiscard]] int family() const noexcept;
  [[nodiscard]] std::uint16_t port() const noexcept;  // host order
  [[nodiscard]] std::uint32_t ipv4() const noexcept;  // host order (family AF_INET)
  // Fills a sockaddr_storage for connect(); throws ProtocolError on a family other than
  // AF_INET/AF_INET6.
  [[nodiscard]] socklen_t toSockaddr(sockaddr_storage& out) const;
  [[nodiscard]] std::string str() const;
};
static_assert(sizeof(SocketAddress) == 28);

// ncclUniqueId's ncclBootstrapHandle: {uint64 magic; ncclSocketAddress addr}.
struct BootstrapHandle {
  std::uint64_t magic = 0;
  SocketAddress addr;
};
static_assert(sizeof(BootstrapHandle) == 40 && offsetof(BootstrapHandle, addr) == 8);

// union ringConnectInfo: a socket address, or a 128-byte net handle with OOB net.
struct RingConnectInfo {
  std::uint8_t bytes[kNetHandleBytes] = {};
  [[nodiscard]] SocketAddress addr() const noexcept;
  [[nodiscard]] static RingConnectInfo fromAddr(const SocketAddress& a) noexcept;
};
static_assert(sizeof(RingConnectInfo) == 128);

// struct extInfo: a rank's check-in with its root.
struct ExtInfo {
  std::int32_t rank = 0;
  std::int32_t nranks = 0;
  std::int32_t iroot = 0;
  std::int32_t nroots = 0;
  SocketAddress listen_root_address;
  RingConnectInfo connect_info;
};
static_assert(sizeof(ExtInfo) == 172 && offsetof(ExtInfo, listen_root_address) == 16 &&
              offsetof(ExtInfo, connect_info) == 44);

// struct rasRankInit (all zero when RAS is off).
struct RasRankInit {
  SocketAddress addr;
  std::int32_t pid = 0;
  std::int32_t cuda_dev = 0;
  std::int32_t nvml_dev = 0;
  std::uint64_t host_hash = 0;
  std::uint64_t pid_hash = 0;
};
static_assert(sizeof(RasRankInit) == 56 && offsetof(RasRankInit, host_hash) == 40);

// struct bootstrapRingData: all-gather #0 (ringAllInfo).
struct RingData {
  SocketAddress peer_address;  // P2P listen address (bootstrapSend target)
  SocketAddress peer_proxy;
  std::uint64_t peer_uds = 0;
  RasRankInit ras;
};
static_assert(sizeof(RingData) == 120 && offsetof(RingData, peer_uds) == 56 &&
              offsetof(RingData, ras) == 64);

// struct ncclPeerInfo: all-gather #1.
struct PeerInfo {
  std::int32_t rank = 0;
  std::int32_t cuda_dev = 0;
  std::int32_t nvml_dev = 0;
  std::int32_t gdr_support = 0;
  std::uint64_t host_hash = 0;
  std::uint64_t pid_hash = 0;
  std::uint64_t shm_dev = 0;  // dev_t
  std::int64_t bus_id = 0;
  std::uint64_t comm = 0;  // struct ncclComm* of the sender's process
  std::int32_t cuda_comp_cap = 0;
  std::uint32_t pad0 = 0;
  std::uint64_t total_global_mem = 0;
  std::uint8_t fabric_info[36] = {};  // nvmlGpuFabricInfoV_t
  std::int32_t cu_mem_support = 0;
  std::int32_t version = 0;
  std::uint32_t pad1 = 0;
};
static_assert(sizeof(PeerInfo) == 120 && offsetof(PeerInfo, host_hash) == 16 &&
              offsetof(PeerInfo, bus_id) == 40 && offsetof(PeerInfo, cuda_comp_cap) == 56 &&
              offsetof(PeerInfo, total_global_mem) == 64 && offsetof(PeerInfo, fabric_info) == 72 &&
              offsetof(PeerInfo, cu_mem_support) == 108 && offsetof(PeerInfo, version) == 112);

// init.cc: struct graphInfo inside allGatherInfo.
struct GraphInfo {
  std::int32_t pattern = 0;
  std::int32_t n_channels = 0;
  std::int32_t same_channels = 0;
  float bw_intra = 0;
  float bw_inter = 0;
  std::int32_t type_intra = 0;
  std::int32_t type_inter = 0;
  std::int32_t cross_nic = 0;
};
static_assert(sizeof(GraphInfo) == 32);

// graph.h: struct ncclTopoRanks.
struct TopoRanks {
  std::int32_t cross_nic_ring = 0;
  std::int32_t ring_recv[kMaxChannels] = {};
  std::int32_t ring_send[kMaxChannels] = {};
  std::int32_t ring_prev[kMaxChannels] = {};
  std::int32_t ring_next[kMaxChannels] = {};
  std::int32_t tree_to_parent[kMaxChannels] = {};
  std::int32_t tree_to_child0[kMaxChannels] = {};
  std::int32_t tree_to_child1[kMaxChannels] = {};
  std::int32_t nvls_heads[kMaxChannels] = {};
  std::int32_t nvls_head_num = 0;
};
static_assert(sizeof(TopoRanks) == 2056 && offsetof(TopoRanks, ring_send) == 260 &&
              offsetof(TopoRanks, tree_to_parent) == 1028 &&
              offsetof(TopoRanks, nvls_head_num) == 2052);

// init.cc: struct allGatherInfo (all-gather #3).
struct AllGatherInfo {
  GraphInfo graph_info[kNumAlgorithms];
  TopoRanks topo_ranks;
  std::int32_t cpu_arch = 0;
  std::int32_t cpu_vendor = 0;
  std::int32_t local_ranks = 0;
};
static_assert(sizeof(AllGatherInfo) == 2292 && offsetof(AllGatherInfo, topo_ranks) == 224 &&
              offsetof(AllGatherInfo, cpu_arch) == 2280 &&
              offsetof(AllGatherInfo, local_ranks) == 2288);

// transport/generic.cc ringConnInfo {bool useNetPXN; bool useGdr}.
struct RingConnInfo {
  std::uint8_t use_net_pxn = 0;
  std::uint8_t use_gdr = 0;
};
static_assert(sizeof(RingConnInfo) == 2);

// init.cc commSplitInfo.
struct SplitInfo {
  std::int32_t key = 0;
  std::int32_t color = 0;
};
static_assert(sizeof(SplitInfo) == 8);

// bootstrap.cc socketAckInfo: first message on a bootstrapSend connection.
struct SocketAck {
  std::int32_t rank = 0;  // sender
  std::int32_t tag = 0;
};
static_assert(sizeof(SocketAck) == 8);

// struct ncclConnect for the NET transport (transport/net.cc sendSetup/recvSetup):
// recv entry: bytes 0..127 = plugin handle; send entry: int32 proxy rank at 0;
// both: int32 useGdr at 128.
struct ConnectEntry {
  std::uint8_t bytes[kConnectEntryBytes] = {};
  [[nodiscard]] std::int32_t useGdr() const noexcept;
  void setUseGdr(std::int32_t v) noexcept;
};
static_assert(sizeof(ConnectEntry) == 256);

// ---- decoding untrusted bytes -------------------------------------------------------------

// Copies exactly sizeof(T) bytes; `what` names the message in the error.
template <typename T>
[[nodiscard]] T decodeExact(std::span<const std::byte> bytes, const char* what);
// Bytes of a trivially copyable struct.
template <typename T>
[[nodiscard]] std::span<const std::byte> bytesOf(const T& v) noexcept {
  return std::as_bytes(std::span<const T, 1>(&v, 1));
}

struct Handshake {
  std::uint64_t magic = 0;
  std::int32_t type = 0;
};
[[nodiscard]] Handshake decodeHandshake(std::span<const std::byte> bytes);
void appendHandshake(std::vector<std::byte>& out, std::uint64_t magic, std::int32_t type);
// Appends the bootstrap framing [int32 size][payload].
void appendFrame(std::vector<std::byte>& out, std::span<const std::byte> payload);
// Reads an int32 frame size at the start of `bytes`; throws if negative or > max.
[[nodiscard]] std::int32_t decodeFrameSize(std::span<const std::byte> bytes, std::int32_t max,
                                           const char* what);
// One complete [int32 size][payload] frame at the start of `bytes` (size <= max): its
// payload, or nullopt while bytes are missing. Throws ProtocolError on a bad size.
[[nodiscard]] std::optional<std::span<const std::byte>> tryParseFrame(
    std::span<const std::byte> bytes, std::int32_t max, const char* what);

// A bootstrapSend message after the handshake: [int32 8][socketAckInfo][int32 n][n bytes].
struct BootstrapMessage {
  SocketAck ack;
  std::span<const std::byte> payload;  // points into the parsed bytes
  std::size_t consumed = 0;
};
[[nodiscard]] std::optional<BootstrapMessage> tryParseBootstrapMessage(
    std::span<const std::byte> bytes);

// Splits a connection-setup payload into entries; throws unless a non-zero multiple of 256.
[[nodiscard]] std::vector<ConnectEntry> decodeConnectEntries(std::span<const std::byte> payload);

// Tag of a connection-setup exchange, transport.cc: (i<<8) + [1<<7 sync] + (graph id + 1).
struct SetupTag {
  int distance = 0;  // i
  bool sync = false;
  int graph = 0;  // graph id + 1 (0 = p2p)
};
// Returns false if `tag` is not a setup/sync tag of a comm with `nranks` ranks.
[[nodiscard]] bool decodeSetupTag(std::int32_t tag, int nranks, SetupTag& out) noexcept;

}  // namespace crystal::host::wire
