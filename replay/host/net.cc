#include "net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <fmt/core.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstring>

#include "crystal/base/error.h"

namespace crystal::host {

void Fd::reset(int fd) noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

namespace {
void setNonBlocking(int fd) {
  const int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
    throw ProtocolError(fmt::format("fcntl(O_NONBLOCK): {}", std::strerror(errno)));
}
}  // namespace

Fd listenTcp(const std::string& bind_address, std::uint16_t port) {
  in_addr ip{};
  if (inet_pton(AF_INET, bind_address.c_str(), &ip) != 1)
    throw InputError(fmt::format("host bind address '{}' is not an IPv4 address", bind_address));
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) throw ProtocolError(fmt::format("socket(): {}", std::strerror(errno)));
  int one = 1;
  (void)setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(port);
  sin.sin_addr = ip;
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&sin), sizeof sin) != 0)
    throw ProtocolError(fmt::format("bind {}:{}: {}", bind_address, port, std::strerror(errno)));
  if (::listen(fd.get(), 16384) != 0)  // capped by somaxconn, like NCCL's own listeners
    throw ProtocolError(fmt::format("listen {}:{}: {}", bind_address, port, std::strerror(errno)));
  setNonBlocking(fd.get());
  return fd;
}

std::uint16_t localPort(int fd) { return localAddress(fd).port(); }

wire::SocketAddress localAddress(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0)
    throw ProtocolError(fmt::format("getsockname: {}", std::strerror(errno)));
  wire::SocketAddress a;
  std::memcpy(a.bytes, &ss, std::min<std::size_t>(sizeof a.bytes, len));
  return a;
}

Fd connectTcp(const wire::SocketAddress& to) {
  sockaddr_storage ss{};
  const socklen_t len = to.toSockaddr(ss);
  Fd fd(::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) throw ProtocolError(fmt::format("socket(): {}", std::strerror(errno)));
  setNonBlocking(fd.get());
  int one = 1;
  (void)setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&ss), len) != 0 && errno != EINPROGRESS)
    throw ProtocolError(fmt::format("connect {}: {}", to.str(), std::strerror(errno)));
  return fd;
}

int connectResult(int fd) noexcept {
  int err = 0;
  socklen_t len = sizeof err;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) return errno;
  return err;
}

void raiseFileLimit() noexcept {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &lim);
  }
}

wire::SocketAddress aliasAddress(int rank, std::uint16_t port) noexcept {
  const auto x = static_cast<std::uint32_t>(rank + 1) & 0xffffffu;
  return wire::SocketAddress::fromIpv4((127u << 24) | x, port);
}

int aliasRank(const wire::SocketAddress& a) noexcept {
  if (a.family() != AF_INET) return -1;
  const std::uint32_t ip = a.ipv4();
  if ((ip >> 24) != 127u || (ip & 0xffffffu) == 0) return -1;
  return static_cast<int>(ip & 0xffffffu) - 1;
}

}  // namespace crystal::host
