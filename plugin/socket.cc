#include "socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/core.h>

#include "crystal/base/error.h"
#include "errors.h"

namespace crystal::plugin {
namespace {

[[noreturn]] void fail(Errc code, const char* what) {
  throw PluginError(code, fmt::format("{}: {}", what, std::strerror(errno)));
}

void tune(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

sockaddr_in toSockaddr(const SockAddr& a) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = a.port_be;
  std::memcpy(&sa.sin_addr, a.ip, 4);
  return sa;
}

}  // namespace

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.release();
  }
  return *this;
}

Fd::~Fd() {
  if (fd_ >= 0) ::close(fd_);
}

Fd listenTcp(const std::string& ipv4, SockAddr& bound) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  if (inet_pton(AF_INET, ipv4.c_str(), &sa.sin_addr) != 1)
    throw InputError(fmt::format("environment CRYSTAL_SOCKET_ADDR='{}': not an IPv4 address", ipv4));
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) fail(Errc::System, "socket");
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) fail(Errc::System, "bind");
  if (::listen(fd.get(), 64) != 0) fail(Errc::System, "listen");
  socklen_t len = sizeof sa;
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&sa), &len) != 0)
    fail(Errc::System, "getsockname");
  std::memcpy(bound.ip, &sa.sin_addr, 4);
  bound.port_be = sa.sin_port;
  return fd;
}

Fd connectTcp(const SockAddr& to) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) fail(Errc::System, "socket");
  tune(fd.get());
  sockaddr_in sa = toSockaddr(to);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 && errno != EINPROGRESS)
    fail(Errc::Remote, "connect");
  return fd;
}

bool connectDone(int fd) {
  sockaddr_in peer{};
  socklen_t len = sizeof peer;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) == 0) return true;
  int err = 0;
  socklen_t el = sizeof err;
  ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
  if (err == 0 || err == EINPROGRESS || err == EALREADY) return false;
  errno = err;
  fail(Errc::Remote, "connect");
}

Fd acceptTcp(int listen_fd) {
  Fd fd(::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
  if (!fd.valid()) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return Fd();
    fail(Errc::System, "accept");
  }
  tune(fd.get());
  return fd;
}

std::size_t sendSome(int fd, const void* buf, std::size_t len) {
  if (len == 0) return 0;
  const ssize_t n = ::send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
  if (n >= 0) return static_cast<std::size_t>(n);
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
  fail(Errc::Remote, "send to real peer");
}

std::size_t recvSome(int fd, void* buf, std::size_t len) {
  if (len == 0) return 0;
  const ssize_t n = ::recv(fd, buf, len, MSG_DONTWAIT);
  if (n > 0) return static_cast<std::size_t>(n);
  if (n == 0) throw PluginError(Errc::Remote, "real peer closed the connection");
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return 0;
  fail(Errc::Remote, "recv from real peer");
}

}  // namespace crystal::plugin
