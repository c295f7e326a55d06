// Wire contract between the plugin (plugin/) and the emulation host (replay/host/).
//
// NCCL passes the 128-byte net handle verbatim from the receiver's listen() to the sender's
// connect() through its bootstrap, which the host answers for virtual ranks. So a handle is
// the only place a peer's identity can travel:
//   - RealListen: written by the plugin's listen(); says where its data listener is. A real
//     sender connects there over TCP; the host, acting for a *virtual* sender, connects there
//     too, so accept() learns that the peer is virtual from the Hello that opens the stream.
//   - VirtualPeer: forged by the host for a virtual receiver; connect() on it never opens a
//     socket and yields a virtual send comm whose completions the replay model times.
// Connection identity (wire version 2): the host answers NCCL's connection exchange
// (transport.cc ncclTransportP2pSetup), whose bootstrap tag names the graph and the ring
// distance, and whose entries come one per connected channel in ascending order. It copies
// that identity into every VirtualPeer handle (send to a virtual rank) and every Hello
// (receive from a virtual rank), so the plugin pairs a ring's receive (channel c, from
// prev) with the same ring's send (channel c, to next) exactly (docs/plugin.md "Pairing").
// All integers little-endian (x86_64 host order); layouts are fixed by static_asserts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace crystal::live {

inline constexpr std::uint32_t kHandleMagic = 0x53595243u;  // "CRYS"
inline constexpr std::uint16_t kWireVersion = 2;
inline constexpr std::size_t kNcclHandleSize = 128;  // NCCL_NET_HANDLE_MAXSIZE

enum class HandleKind : std::uint8_t { RealListen = 1, VirtualPeer = 2 };

// NCCL's graph of a connection: the low byte of the setup tag, graph->id + 1 (ring 0,
// tree/PAT 1, collnet chain 2, NVLS 3, collnet direct 4), 0 for p2p (graph NULL).
inline constexpr std::uint8_t kGraphP2p = 0;
inline constexpr std::uint8_t kGraphRing = 1;
inline constexpr std::uint8_t kGraphTree = 2;
inline constexpr std::uint8_t kGraphUnknown = 0xff;  // a peer that did not say

struct NetHandle {
  std::uint32_t magic = kHandleMagic;
  std::uint16_t version = kWireVersion;
  HandleKind kind = HandleKind::RealListen;
  std::uint8_t dev = 0;          // net device index the listen was made on
  std::uint64_t comm_id = 0;     // v11 commId (NCCL commHash) of the comm that listened
  std::uint64_t emulation = 0;   // emulation id (CRYSTAL_EMULATION_ID), 0 = none
  std::int32_t rank = -1;        // the receiver's rank in the comm (RealListen: -1 = unknown)
  std::int32_t nranks = 0;       // communicator size (RealListen: 0 = unknown)
  std::uint32_t listen_id = 0;   // RealListen: per-process listen sequence number
  std::uint32_t pid = 0;         // RealListen: listening process
  std::uint32_t conn_seq = 0;    // VirtualPeer: k-th connection forged for (comm, rank)
  std::uint16_t port = 0;        // RealListen: TCP port of the data listener (network order)
  std::uint8_t family = 0;       // RealListen: 4 or 6
  std::uint8_t reserved0 = 0;
  std::uint8_t addr[16] = {};    // RealListen: IPv4 (first 4 bytes) or IPv6 address
  // Plugin-private scratch (added by plugin): token of a connect() in progress on these
  // handle bytes (NCCL polls connect() with the same bytes until it yields a comm). Forged
  // handles leave it 0.
  std::uint64_t connect_token = 0;
  // VirtualPeer: identity of the connection (see the top of this file).
  std::int32_t self_rank = -1;   // the real rank that connects (sender)
  std::int32_t distance = 0;     // i of the exchange: rank = self_rank + distance (mod nranks)
  std::uint16_t ordinal = 0;     // k-th send entry of the exchange = k-th connected channel
  std::uint8_t graph = kGraphUnknown;
  // NCCL's channels per tree before it duplicates them (min of the tree and ring graphs'
  // nChannels over the ranks, from the graph all-gather; 0 = unknown): channel c runs tree
  // (c mod 2n) / n (graph/connect.cc ncclTopoPostset, copyChannels).
  std::uint8_t tree_channels = 0;
  std::uint8_t reserved[44] = {};
};
static_assert(sizeof(NetHandle) == kNcclHandleSize, "handle must fill NCCL's 128 bytes");
static_assert(offsetof(NetHandle, comm_id) == 8 && offsetof(NetHandle, rank) == 24 &&
              offsetof(NetHandle, addr) == 48 && offsetof(NetHandle, connect_token) == 64 &&
              offsetof(NetHandle, self_rank) == 72 && offsetof(NetHandle, ordinal) == 80 &&
              offsetof(NetHandle, graph) == 82);

// First bytes on every stream opened to a RealListen data listener.
enum class PeerKind : std::uint8_t { Real = 1, Virtual = 2 };
struct Hello {
  std::uint32_t magic = kHandleMagic;
  std::uint16_t version = kWireVersion;
  PeerKind peer = PeerKind::Real;
  std::uint8_t graph = kGraphUnknown;  // Virtual: graph of the connection (kGraph*)
  std::uint32_t listen_id = 0;   // echoes NetHandle::listen_id (stale/foreign handles rejected)
  std::int32_t sender_rank = -1; // rank of the sender in the comm if known (-1 = unknown)
  std::uint64_t comm_id = 0;     // echoes NetHandle::comm_id
  // Virtual: identity of the connection; sender_rank = receiver_rank - distance (mod nranks).
  // Real: the ranks of both ends as the sender knows them (-1 / 0 = unknown).
  std::int32_t receiver_rank = -1;
  std::int32_t nranks = 0;
  std::int32_t distance = 0;
  std::uint16_t ordinal = 0;     // k-th receive entry of the exchange = k-th connected channel
  std::uint16_t tree_channels = 0;  // as NetHandle::tree_channels
};
static_assert(sizeof(Hello) == 40);

// Decode a handle from NCCL's opaque bytes. Returns false (and leaves `out` unspecified) if
// the bytes are not a crystal handle of this wire version.
inline bool decodeHandle(const void* bytes, NetHandle& out) {
  std::memcpy(&out, bytes, sizeof out);
  return out.magic == kHandleMagic && out.version == kWireVersion &&
         (out.kind == HandleKind::RealListen || out.kind == HandleKind::VirtualPeer);
}

}  // namespace crystal::live
