// Encoding and decoding of control frames (protocol.h). Header-only so that both ends (the
// interposer inside libnccl-net-crystal.so and the host's server) share one definition
// without a link dependency between plugin/ and replay/.
//
// Decoding never trusts the peer: every length is checked against the type's fixed size and
// kMaxPayload, and any violation throws crystal::ProtocolError naming the field and offset.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "crystal/base/error.h"
#include "crystal/control/protocol.h"

namespace crystal::control {

namespace codec_detail {

class Writer {
 public:
  template <typename T>
  void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const std::uint8_t*>(&v);
    out_.insert(out_.end(), p, p + sizeof v);
  }
  void bytes(std::span<const std::uint8_t> b) { out_.insert(out_.end(), b.begin(), b.end()); }
  void text(const std::string& s, std::size_t max) {
    const auto n = static_cast<std::uint32_t>(s.size() < max ? s.size() : max);
    put(n);
    out_.insert(out_.end(), s.begin(), s.begin() + n);
  }
  [[nodiscard]] std::vector<std::uint8_t>& buffer() { return out_; }

 private:
  std::vector<std::uint8_t> out_;
};

class Reader {
 public:
  Reader(std::span<const std::uint8_t> in, MsgType type) : in_(in), type_(type) {}
  template <typename T>
  [[nodiscard]] T get(const char* field) {
    need(sizeof(T), field);
    T v;
    std::memcpy(&v, in_.data() + off_, sizeof v);
    off_ += sizeof v;
    return v;
  }
  void bytes(std::span<std::uint8_t> dst, const char* field) {
    need(dst.size(), field);
    std::memcpy(dst.data(), in_.data() + off_, dst.size());
    off_ += dst.size();
  }
  [[nodiscard]] std::string text(std::size_t max, const char* field) {
    const auto n = get<std::uint32_t>(field);
    if (n > max) fail(field, "length " + std::to_string(n) + " exceeds " + std::to_string(max));
    need(n, field);
    std::string s(reinterpret_cast<const char*>(in_.data() + off_), n);
    off_ += n;
    return s;
  }
  void end() {
    if (off_ != in_.size()) fail("payload", std::to_string(in_.size() - off_) + " trailing bytes");
  }

 private:
  void need(std::size_t n, const char* field) {
    if (in_.size() - off_ < n)
      fail(field, "truncated (need " + std::to_string(n) + " bytes, have " +
                      std::to_string(in_.size() - off_) + ")");
  }
  [[noreturn]] void fail(const char* field, const std::string& why) {
    throw ProtocolError(std::string("control message ") + typeName(type_) + ": field '" + field +
                        "' at offset " + std::to_string(kHeaderSize + off_) + ": " + why);
  }
  std::span<const std::uint8_t> in_;
  MsgType type_;
  std::size_t off_ = 0;
};

inline void putBody(Writer& w, const Hello& m) {
  w.put(m.pid);
  w.put(m.nccl_version);
  w.text(m.hostid, kMaxHostIdSize);
}
inline void putBody(Writer&, const GetUniqueId&) {}
inline void putBody(Writer& w, const CommInit& m) {
  w.bytes(m.id);
  w.put(m.nranks);
  w.put(m.rank);
  w.put(m.n_ids);
  w.put(m.comm_hash);
}
inline void putBody(Writer& w, const CommSplit& m) {
  w.put(m.parent_hash);
  w.put(m.split_seq);
  w.put(m.color);
  w.put(m.key);
  w.put(m.parent_rank);
  w.put(m.parent_nranks);
  w.put(m.child_hash);
}
inline void putBody(Writer& w, const BlockPool& m) {
  w.put(m.comm_hash);
  w.put(m.rank);
  w.put(m.recv_block_bytes);
  w.put(m.send_block_bytes);
  w.put(static_cast<std::uint32_t>(m.recv.size()));
  w.put(static_cast<std::uint32_t>(m.send.size()));
  for (auto a : m.recv) w.put(a);
  for (auto a : m.send) w.put(a);
}
inline void putBody(Writer& w, const GetWrites& m) {
  w.put(m.comm_hash);
  w.put(m.rank);
}
inline void putBody(Writer& w, const Writes& m) {
  w.put(static_cast<std::uint32_t>(m.writes.size()));
  for (const auto& x : m.writes) {
    w.put(x.address);
    w.put(x.value);
    w.put(x.watch);
    w.put(x.peer);
    w.put(x.nranks);
    w.put(x.ordinal);
    w.put(x.flags);
  }
}
inline void putBody(Writer& w, const Note& m) { w.text(m.text, kMaxErrorText); }
inline void putBody(Writer& w, const HelloOk& m) { w.put(m.emulation_id); }
inline void putBody(Writer& w, const UniqueIdReply& m) { w.bytes(m.id); }
inline void putBody(Writer&, const Ok&) {}
inline void putBody(Writer& w, const PoolPlace& m) {
  w.put(m.members);
  w.put(m.prev);
  w.put(m.next);
  w.put(m.tree_channels);
}
inline void putBody(Writer& w, const Error& m) { w.text(m.text, kMaxErrorText); }

template <typename T>
constexpr MsgType typeOf();
template <>
constexpr MsgType typeOf<Hello>() {
  return MsgType::Hello;
}
template <>
constexpr MsgType typeOf<GetUniqueId>() {
  return MsgType::GetUniqueId;
}
template <>
constexpr MsgType typeOf<CommInit>() {
  return MsgType::CommInit;
}
template <>
constexpr MsgType typeOf<CommSplit>() {
  return MsgType::CommSplit;
}
template <>
constexpr MsgType typeOf<HelloOk>() {
  return MsgType::HelloOk;
}
template <>
constexpr MsgType typeOf<UniqueIdReply>() {
  return MsgType::UniqueIdReply;
}
template <>
constexpr MsgType typeOf<BlockPool>() {
  return MsgType::BlockPool;
}
template <>
constexpr MsgType typeOf<GetWrites>() {
  return MsgType::GetWrites;
}
template <>
constexpr MsgType typeOf<Note>() {
  return MsgType::Note;
}
template <>
constexpr MsgType typeOf<Writes>() {
  return MsgType::Writes;
}
template <>
constexpr MsgType typeOf<Ok>() {
  return MsgType::Ok;
}
template <>
constexpr MsgType typeOf<PoolPlace>() {
  return MsgType::PoolPlace;
}
template <>
constexpr MsgType typeOf<Error>() {
  return MsgType::Error;
}

}  // namespace codec_detail

// Whole frame (header + payload) for one message.
[[nodiscard]] inline std::vector<std::uint8_t> encode(const Message& msg) {
  codec_detail::Writer w;
  std::visit(
      [&w](const auto& m) {
        using T = std::decay_t<decltype(m)>;
        w.put(kFrameMagic);
        w.put(kProtocolVersion);
        w.put(static_cast<std::uint16_t>(codec_detail::typeOf<T>()));
        w.put(std::uint32_t{0});
        codec_detail::putBody(w, m);
      },
      msg);
  auto& buf = w.buffer();
  const auto len = static_cast<std::uint32_t>(buf.size() - kHeaderSize);
  std::memcpy(buf.data() + 8, &len, sizeof len);
  return std::move(buf);
}

[[nodiscard]] inline MsgType typeOfMessage(const Message& msg) {
  return std::visit([](const auto& m) { return codec_detail::typeOf<std::decay_t<decltype(m)>>(); },
                    msg);
}

[[nodiscard]] constexpr bool isKnownType(std::uint16_t t) {
  return (t >= 1 && t <= 7) || (t >= 64 && t <= 68) || t == 127;
}

// Checks magic, version, type and payload bound. Throws ProtocolError.
[[nodiscard]] inline Header decodeHeader(std::span<const std::uint8_t> bytes) {
  if (bytes.size() < kHeaderSize)
    throw ProtocolError("control frame header truncated: " + std::to_string(bytes.size()) + " of " +
                        std::to_string(kHeaderSize) + " bytes");
  Header h;
  std::uint16_t type = 0;
  std::memcpy(&h.magic, bytes.data(), 4);
  std::memcpy(&h.version, bytes.data() + 4, 2);
  std::memcpy(&type, bytes.data() + 6, 2);
  std::memcpy(&h.length, bytes.data() + 8, 4);
  if (h.magic != kFrameMagic)
    throw ProtocolError("control frame: bad magic at offset 0 (not a crystal control peer?)");
  if (h.version != kProtocolVersion)
    throw ProtocolError("control frame: protocol version " + std::to_string(h.version) +
                        " at offset 4, expected " + std::to_string(kProtocolVersion) +
                        " (interposer and host from different builds?)");
  h.type = static_cast<MsgType>(type);
  if (!isKnownType(type))
    throw ProtocolError("control frame: unknown message type " + std::to_string(type) +
                        " at offset 6");
  if (h.length > kMaxPayload)
    throw ProtocolError("control frame " + std::string(typeName(h.type)) + ": payload length " +
                        std::to_string(h.length) + " at offset 8 exceeds " +
                        std::to_string(kMaxPayload));
  return h;
}

// Decodes the payload of a frame whose header was accepted. Throws ProtocolError.
[[nodiscard]] inline Message decodePayload(MsgType type, std::span<const std::uint8_t> p) {
  codec_detail::Reader r(p, type);
  Message out;
  switch (type) {
    case MsgType::Hello: {
      Hello m;
      m.pid = r.get<std::uint32_t>("pid");
      m.nccl_version = r.get<std::int32_t>("nccl_version");
      m.hostid = r.text(kMaxHostIdSize, "hostid");
      out = std::move(m);
      break;
    }
    case MsgType::GetUniqueId:
      out = GetUniqueId{};
      break;
    case MsgType::CommInit: {
      CommInit m;
      r.bytes(m.id, "id");
      m.nranks = r.get<std::int32_t>("nranks");
      m.rank = r.get<std::int32_t>("rank");
      m.n_ids = r.get<std::int32_t>("n_ids");
      m.comm_hash = r.get<std::uint64_t>("comm_hash");
      out = m;
      break;
    }
    case MsgType::CommSplit: {
      CommSplit m;
      m.parent_hash = r.get<std::uint64_t>("parent_hash");
      m.split_seq = r.get<std::uint32_t>("split_seq");
      m.color = r.get<std::int32_t>("color");
      m.key = r.get<std::int32_t>("key");
      m.parent_rank = r.get<std::int32_t>("parent_rank");
      m.parent_nranks = r.get<std::int32_t>("parent_nranks");
      m.child_hash = r.get<std::uint64_t>("child_hash");
      out = m;
      break;
    }
    case MsgType::BlockPool: {
      BlockPool m;
      m.comm_hash = r.get<std::uint64_t>("comm_hash");
      m.rank = r.get<std::int32_t>("rank");
      m.recv_block_bytes = r.get<std::uint64_t>("recv_block_bytes");
      m.send_block_bytes = r.get<std::uint64_t>("send_block_bytes");
      const auto n_recv = r.get<std::uint32_t>("n_recv");
      const auto n_send = r.get<std::uint32_t>("n_send");
      if (std::uint64_t{n_recv} + n_send > kMaxPoolBlocks)
        throw ProtocolError("control frame BLOCK_POOL: " + std::to_string(n_recv) + " + " +
                            std::to_string(n_send) + " blocks exceed " +
                            std::to_string(kMaxPoolBlocks));
      for (std::uint32_t i = 0; i < n_recv; ++i) m.recv.push_back(r.get<std::uint64_t>("recv"));
      for (std::uint32_t i = 0; i < n_send; ++i) m.send.push_back(r.get<std::uint64_t>("send"));
      out = std::move(m);
      break;
    }
    case MsgType::GetWrites: {
      GetWrites m;
      m.comm_hash = r.get<std::uint64_t>("comm_hash");
      m.rank = r.get<std::int32_t>("rank");
      out = m;
      break;
    }
    case MsgType::Writes: {
      Writes m;
      const auto n = r.get<std::uint32_t>("count");
      if (n > kMaxWrites)
        throw ProtocolError("control frame WRITES: " + std::to_string(n) + " writes exceed " +
                            std::to_string(kMaxWrites));
      for (std::uint32_t i = 0; i < n; ++i) {
        DeviceWrite x;
        x.address = r.get<std::uint64_t>("address");
        x.value = r.get<std::uint64_t>("value");
        x.watch = r.get<std::uint64_t>("watch");
        x.peer = r.get<std::int32_t>("peer");
        x.nranks = r.get<std::int32_t>("nranks");
        x.ordinal = r.get<std::int32_t>("ordinal");
        x.flags = r.get<std::uint32_t>("flags");
        m.writes.push_back(x);
      }
      out = std::move(m);
      break;
    }
    case MsgType::HelloOk:
      out = HelloOk{r.get<std::uint64_t>("emulation_id")};
      break;
    case MsgType::UniqueIdReply: {
      UniqueIdReply m;
      r.bytes(m.id, "id");
      out = m;
      break;
    }
    case MsgType::Ok:
      out = Ok{};
      break;
    case MsgType::PoolPlace: {
      PoolPlace m;
      m.members = r.get<std::int32_t>("members");
      m.prev = r.get<std::int32_t>("prev");
      m.next = r.get<std::int32_t>("next");
      m.tree_channels = r.get<std::int32_t>("tree_channels");
      if (m.members < 0)
        throw ProtocolError("control frame POOL_PLACE: a node of " + std::to_string(m.members));
      if (m.prev < -1 || m.next < -1)
        throw ProtocolError("control frame POOL_PLACE: ring neighbours " +
                            std::to_string(m.prev) + " and " + std::to_string(m.next));
      if (m.tree_channels < 0 || m.tree_channels > 64)
        throw ProtocolError("control frame POOL_PLACE: " + std::to_string(m.tree_channels) +
                            " tree channels");
      out = m;
      break;
    }
    case MsgType::Note:
      out = Note{r.text(kMaxErrorText, "text")};
      break;
    case MsgType::Error:
      out = Error{r.text(kMaxErrorText, "text")};
      break;
  }
  r.end();
  return out;
}

}  // namespace crystal::control
