#include "wire.h"

#include <arpa/inet.h>
#include <fmt/core.h>
#include <sys/socket.h>

#include <cstring>

#include "crystal/base/error.h"

namespace crystal::host::wire {

SocketAddress SocketAddress::fromIpv4(std::uint32_t host_order_ip, std::uint16_t port) {
  SocketAddress a;
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(port);
  sin.sin_addr.s_addr = htonl(host_order_ip);
  std::memcpy(a.bytes, &sin, sizeof sin);
  return a;
}

bool SocketAddress::isZero() const noexcept {
  for (auto b : bytes)
    if (b != 0) return false;
  return true;
}

int SocketAddress::family() const noexcept {
  sa_family_t f = 0;
  std::memcpy(&f, bytes, sizeof f);
  return f;
}

std::uint16_t SocketAddress::port() const noexcept {
  std::uint16_t p = 0;  // same offset in sockaddr_in and sockaddr_in6
  std::memcpy(&p, bytes + offsetof(sockaddr_in, sin_port), sizeof p);
  return ntohs(p);
}

std::uint32_t SocketAddress::ipv4() const noexcept {
  sockaddr_in sin{};
  std::memcpy(&sin, bytes, sizeof sin);
  return ntohl(sin.sin_addr.s_addr);
}

socklen_t SocketAddress::toSockaddr(sockaddr_storage& out) const {
  std::memset(&out, 0, sizeof out);
  if (family() == AF_INET) {
    std::memcpy(&out, bytes, sizeof(sockaddr_in));
    return sizeof(sockaddr_in);
  }
  if (family() == AF_INET6) {
    std::memcpy(&out, bytes, sizeof(sockaddr_in6));
    return sizeof(sockaddr_in6);
  }
  throw ProtocolError(fmt::format("socket address with unsupported family {}", family()));
}

std::string SocketAddress::str() const {
  char buf[INET6_ADDRSTRLEN] = {};
  if (family() == AF_INET) {
    sockaddr_in sin{};
    std::memcpy(&sin, bytes, sizeof sin);
    inet_ntop(AF_INET, &sin.sin_addr, buf, sizeof buf);
    return fmt::format("{}:{}", buf, port());
  }
  if (family() == AF_INET6) {
    sockaddr_in6 sin6{};
    std::memcpy(&sin6, bytes, sizeof sin6);
    inet_ntop(AF_INET6, &sin6.sin6_addr, buf, sizeof buf);
    return fmt::format("[{}]:{}", buf, port());
  }
  return fmt::format("<family {}>", family());
}

SocketAddress RingConnectInfo::addr() const noexcept {
  SocketAddress a;
  std::memcpy(a.bytes, bytes, sizeof a.bytes);
  return a;
}

RingConnectInfo RingConnectInfo::fromAddr(const SocketAddress& a) noexcept {
  RingConnectInfo r;
  std::memcpy(r.bytes, a.bytes, sizeof a.bytes);
  return r;
}

std::int32_t ConnectEntry::useGdr() const noexcept {
  std::int32_t v = 0;
  std::memcpy(&v, bytes + kNetHandleBytes, sizeof v);
  return v;
}

void ConnectEntry::setUseGdr(std::int32_t v) noexcept {
  std::memcpy(bytes + kNetHandleBytes, &v, sizeof v);
}

template <typename T>
T decodeExact(std::span<const std::byte> bytes, const char* what) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (bytes.size() != sizeof(T))
    throw ProtocolError(fmt::format("{}: {} bytes, expected {}", what, bytes.size(), sizeof(T)));
  T out;
  std::memcpy(&out, bytes.data(), sizeof(T));
  return out;
}

template ExtInfo decodeExact<ExtInfo>(std::span<const std::byte>, const char*);
template RingData decodeExact<RingData>(std::span<const std::byte>, const char*);
template PeerInfo decodeExact<PeerInfo>(std::span<const std::byte>, const char*);
template AllGatherInfo decodeExact<AllGatherInfo>(std::span<const std::byte>, const char*);
template RingConnInfo decodeExact<RingConnInfo>(std::span<const std::byte>, const char*);
template SplitInfo decodeExact<SplitInfo>(std::span<const std::byte>, const char*);
template SocketAck decodeExact<SocketAck>(std::span<const std::byte>, const char*);
template RingConnectInfo decodeExact<RingConnectInfo>(std::span<const std::byte>, const char*);

Handshake decodeHandshake(std::span<const std::byte> bytes) {
  if (bytes.size() < kHandshakeBytes)
    throw ProtocolError(
        fmt::format("socket handshake: {} bytes, expected {}", bytes.size(), kHandshakeBytes));
  Handshake h;
  std::memcpy(&h.magic, bytes.data(), 8);
  std::memcpy(&h.type, bytes.data() + 8, 4);
  return h;
}

void appendHandshake(std::vector<std::byte>& out, std::uint64_t magic, std::int32_t type) {
  const auto* m = reinterpret_cast<const std::byte*>(&magic);
  const auto* t = reinterpret_cast<const std::byte*>(&type);
  out.insert(out.end(), m, m + 8);
  out.insert(out.end(), t, t + 4);
}

void appendFrame(std::vector<std::byte>& out, std::span<const std::byte> payload) {
  const auto size = static_cast<std::int32_t>(payload.size());
  const auto* s = reinterpret_cast<const std::byte*>(&size);
  out.insert(out.end(), s, s + 4);
  out.insert(out.end(), payload.begin(), payload.end());
}

std::int32_t decodeFrameSize(std::span<const std::byte> bytes, std::int32_t max, const char* what) {
  if (bytes.size() < 4) throw ProtocolError(fmt::format("{}: truncated frame size", what));
  std::int32_t size = 0;
  std::memcpy(&size, bytes.data(), 4);
  if (size < 0 || size > max)
    throw ProtocolError(fmt::format("{}: frame size {} outside [0, {}]", what, size, max));
  return size;
}

std::optional<std::span<const std::byte>> tryParseFrame(std::span<const std::byte> bytes,
                                                        std::int32_t max, const char* what) {
  if (bytes.size() < 4) return std::nullopt;
  const auto size = static_cast<std::size_t>(decodeFrameSize(bytes, max, what));
  if (bytes.size() - 4 < size) return std::nullopt;
  return bytes.subspan(4, size);
}

std::optional<BootstrapMessage> tryParseBootstrapMessage(std::span<const std::byte> bytes) {
  const auto ack = tryParseFrame(bytes, kMaxMessageBytes, "socketAckInfo");
  if (!ack) return std::nullopt;
  BootstrapMessage m;
  m.ack = decodeExact<SocketAck>(*ack, "socketAckInfo");
  const auto rest = bytes.subspan(4 + ack->size());
  const auto payload = tryParseFrame(rest, kMaxMessageBytes, "bootstrap message");
  if (!payload) return std::nullopt;
  m.payload = *payload;
  m.consumed = 4 + ack->size() + 4 + payload->size();
  return m;
}

std::vector<ConnectEntry> decodeConnectEntries(std::span<const std::byte> payload) {
  if (payload.empty() || payload.size() % kConnectEntryBytes != 0 ||
      payload.size() > static_cast<std::size_t>(kMaxMessageBytes))
    throw ProtocolError(fmt::format(
        "connection-setup message of {} bytes is not 1..{} ncclConnect entries of {} bytes",
        payload.size(), 2 * kMaxChannels, kConnectEntryBytes));
  std::vector<ConnectEntry> out(payload.size() / kConnectEntryBytes);
  std::memcpy(out.data(), payload.data(), payload.size());
  return out;
}

bool decodeSetupTag(std::int32_t tag, int nranks, SetupTag& out) noexcept {
  if (tag <= 0) return false;
  const int low = tag & 0x7f;
  const int distance = tag >> 8;
  if (low > 5 || distance < 1 || distance >= nranks) return false;
  out.distance = distance;
  out.sync = (tag & kTagSyncBit) != 0;
  out.graph = low;
  return true;
}

}  // namespace crystal::host::wire
