// Control protocol between the interposer (inside each real rank, plugin/interpose/) and the
// emulation host (replay/control/).
//
// Why it exists: NCCL's bootstrap root and the virtual ranks live in the host, so the host must
// mint every unique id and learn every communicator (id, size, rank, splits) *before* the real
// rank's NCCL starts talking to it. The interposer tells it over this channel.
//
// Transport: one TCP stream per real process to CRYSTAL_HOST, strictly request -> reply, the
// interposer always asks first. Every frame = Header + payload; integers little-endian (both
// ends are x86_64 processes of one build). Sizes are fixed per type, except Error's text.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace crystal::control {

inline constexpr std::uint32_t kFrameMagic = 0x4C544343u;  // "CCTL"
inline constexpr std::uint16_t kProtocolVersion = 3;       // 3: NOTE
inline constexpr std::size_t kUniqueIdSize = 128;          // NCCL_UNIQUE_ID_BYTES
inline constexpr std::size_t kMaxHostIdSize = 64;
inline constexpr std::size_t kMaxErrorText = 2048;
inline constexpr std::size_t kMaxPayload = 4096;  // larger frames are malformed

// NCCL versions the host's bootstrap stand-in has been verified against (NCCL_VERSION_CODE).
inline constexpr int kSupportedNcclVersion = 22809;  // 2.28.9

enum class MsgType : std::uint16_t {
  // interposer -> host
  Hello = 1,        // first message on every connection
  GetUniqueId = 2,  // the host is the bootstrap root: it mints the id
  CommInit = 3,     // before the real ncclCommInitRank*
  CommSplit = 4,    // before the real ncclCommSplit
  BlockPool = 5,    // after a real ncclCommInitRank*: memory for P2P peers (emulation.p2p_peers)
  GetWrites = 6,    // polled: 8-byte stores the host wants made in the real rank's GPU memory
  Note = 7,         // something that makes the rank's times not the target's (for the report)
  // host -> interposer
  HelloOk = 64,
  UniqueIdReply = 65,
  Ok = 66,
  Writes = 67,
  PoolPlace = 68,  // the answer to BLOCK_POOL
  Error = 127,
};

struct Header {
  std::uint32_t magic = kFrameMagic;
  std::uint16_t version = kProtocolVersion;
  MsgType type = MsgType::Ok;
  std::uint32_t length = 0;  // payload bytes after the header
};
inline constexpr std::size_t kHeaderSize = 12;

using UniqueId = std::array<std::uint8_t, kUniqueIdSize>;

struct Hello {
  std::uint32_t pid = 0;
  std::int32_t nccl_version = 0;  // ncclGetVersion() of the NCCL the process loaded
  std::string hostid;             // NCCL_HOSTID the process runs with ("" = none)
};
struct GetUniqueId {};
struct CommInit {
  UniqueId id{};
  std::int32_t nranks = 0;
  std::int32_t rank = -1;
  std::int32_t n_ids = 1;       // ncclCommInitRankScalable's nId (id = the first one)
  std::uint64_t comm_hash = 0;  // NCCL's commHash of the id (control/comm_hash.h)
};
struct CommSplit {
  std::uint64_t parent_hash = 0;  // commHash of the parent
  std::uint32_t split_seq = 0;    // parent's splitCount after this call (1 for the first)
  std::int32_t color = 0;         // NCCL_SPLIT_NOCOLOR = -1
  std::int32_t key = 0;
  std::int32_t parent_rank = -1;
  std::int32_t parent_nranks = 0;
  std::uint64_t child_hash = 0;  // commHash NCCL will give the child
};
// CRYSTAL_P2P_POOL (emulation.p2p_peers): device memory the real rank's process allocated, zeroed,
// for the P2P connections NCCL makes to the virtual GPUs of its node. The host answers those
// connections' exchange with entries that name the real rank itself as the owner of these
// blocks, so NCCL uses the addresses as they are (docs/research/
// nccl-2.28.9-p2p-virtual-peers.md §11.7): a recv block per send connector of the real rank,
// a send block per recv connector.
struct BlockPool {
  std::uint64_t comm_hash = 0;
  std::int32_t rank = -1;
  std::uint64_t recv_block_bytes = 0, send_block_bytes = 0;
  std::vector<std::uint64_t> recv, send;  // device addresses in the real rank's process
};
// recv + send addresses of one BLOCK_POOL frame (fits kMaxPayload).
inline constexpr std::size_t kMaxPoolBlocks = 500;

// The real rank's own P2P counters that the virtual side of a pool connection would advance:
// the head of each of its send connectors, the tail of each of its recv connectors (their
// addresses come in NCCL's connect entries). The interposer stores `value` (8 bytes) at each
// `address` of its GPU. Polled after BLOCK_POOL; an empty WRITES means nothing new.
struct GetWrites {
  std::uint64_t comm_hash = 0;
  std::int32_t rank = -1;
};
struct DeviceWrite {
  std::uint64_t address = 0, value = 0;
  // The connection (host/bootstrap_host.h DeviceWrite): the pool block's counter the real rank
  // advances, the virtual peer, the comm size, the channel ordinal, flags (bit 0: a send
  // connector; bits 8-15: the setup tag's graph byte).
  std::uint64_t watch = 0;
  std::int32_t peer = -1, nranks = 0, ordinal = 0;
  std::uint32_t flags = 0;
  [[nodiscard]] bool send() const { return (flags & 1u) != 0; }
  [[nodiscard]] int graph() const { return static_cast<int>((flags >> 8) & 0xffu); }
};
struct Writes {
  std::vector<DeviceWrite> writes;
};
inline constexpr std::size_t kMaxWrites = 100;  // per WRITES frame (fits kMaxPayload)

// Told once when the real rank's emulation stops being faithful (e.g. the P2P pacing of a comm
// stopped and its virtual GPUs run free): the host keeps it for `crystal emulate`'s report.
struct Note {
  std::string text;
};

struct HelloOk {
  std::uint64_t emulation_id = 0;
};
struct UniqueIdReply {
  UniqueId id{};
};
struct Ok {};
// Where the rank that offered a BLOCK_POOL stands: `members` ranks of its target node played as
// GPUs of its host, itself among them; members 0: none are (another real rank on that node,
// or a split child not made of whole nodes), the blocks are not used and can be freed.
// `prev`/`next`: its neighbours on the node's ring chain (global ranks; -1 where the ring
// crosses the NET), which NCCL's graph may have rotated (host/node_graph.h).
struct PoolPlace {
  std::int32_t members = 0;
  std::int32_t prev = -1;
  std::int32_t next = -1;
  std::int32_t tree_channels = 0;  // NCCL's tree channels before doubling (0: unknown)
};
struct Error {
  std::string text;
};

using Message = std::variant<Hello, GetUniqueId, CommInit, CommSplit, BlockPool, GetWrites, Note,
                             HelloOk, UniqueIdReply, Ok, Writes, PoolPlace, Error>;

[[nodiscard]] constexpr const char* typeName(MsgType t) {
  switch (t) {
    case MsgType::Hello:
      return "HELLO";
    case MsgType::GetUniqueId:
      return "GET_UNIQUE_ID";
    case MsgType::CommInit:
      return "COMM_INIT";
    case MsgType::CommSplit:
      return "COMM_SPLIT";
    case MsgType::BlockPool:
      return "BLOCK_POOL";
    case MsgType::GetWrites:
      return "GET_WRITES";
    case MsgType::Note:
      return "NOTE";
    case MsgType::Writes:
      return "WRITES";
    case MsgType::PoolPlace:
      return "POOL_PLACE";
    case MsgType::HelloOk:
      return "HELLO_OK";
    case MsgType::UniqueIdReply:
      return "UNIQUE_ID";
    case MsgType::Ok:
      return "OK";
    case MsgType::Error:
      return "ERROR";
  }
  return "UNKNOWN";
}

// "2.28.9" from 22809 (NCCL_VERSION_CODE = major*10000 + minor*100 + patch).
[[nodiscard]] inline std::string ncclVersionString(int code) {
  return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." +
         std::to_string(code % 100);
}

}  // namespace crystal::control
