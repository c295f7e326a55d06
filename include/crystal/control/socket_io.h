// Blocking-with-deadline TCP helpers shared by both ends of the control channel. Every wait
// is a poll() bounded by a Deadline, so a dead or silent peer becomes a ProtocolError, never
// a hang. Header-only: used inside libnccl-net-crystal.so and by the host.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "crystal/base/error.h"

namespace crystal::control {

using Clock = std::chrono::steady_clock;

class Deadline {
 public:
  explicit Deadline(double seconds)
      : at_(Clock::now() +
            std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds))) {}
  [[nodiscard]] int remainingMs() const {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now());
    return left.count() <= 0 ? 0 : static_cast<int>(left.count());
  }
  [[nodiscard]] bool expired() const { return Clock::now() >= at_; }

 private:
  Clock::time_point at_;
};

// Owns one file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  [[nodiscard]] int get() const { return fd_; }
  [[nodiscard]] bool valid() const { return fd_ >= 0; }
  int release() {
    const int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int f = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = f;
  }

 private:
  int fd_ = -1;
};

// "HOST:PORT" (IPv4 literal or name) -> sockaddr_in. Throws InputError naming `what`.
[[nodiscard]] inline sockaddr_in parseHostPort(std::string_view text, std::string_view what) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == text.size())
    throw InputError(std::string(what) + ": '" + std::string(text) + "' is not HOST:PORT");
  const std::string host(text.substr(0, colon));
  const std::string port_s(text.substr(colon + 1));
  char* end = nullptr;
  const long port = std::strtol(port_s.c_str(), &end, 10);
  if (*end != '\0' || port < 0 || port > 65535)
    throw InputError(std::string(what) + ": port '" + port_s + "' is not 0..65535");
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::inet_pton(AF_INET, host.c_str(), &sa.sin_addr) != 1) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    addrinfo* res = nullptr;
    if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || res == nullptr)
      throw InputError(std::string(what) + ": cannot resolve host '" + host + "'");
    sa.sin_addr = reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr;
    ::freeaddrinfo(res);
  }
  return sa;
}

[[nodiscard]] inline std::string formatAddress(const sockaddr_in& sa) {
  char buf[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &sa.sin_addr, buf, sizeof buf);
  return std::string(buf) + ":" + std::to_string(ntohs(sa.sin_port));
}

inline void setNonBlocking(int fd, bool on) {
  const int fl = ::fcntl(fd, F_GETFL);
  ::fcntl(fd, F_SETFL, on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK));
}

// Waits until `fd` is ready for `events`; false on deadline. Throws on poll error.
[[nodiscard]] inline bool waitReady(int fd, short events, const Deadline& dl) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int r = ::poll(&p, 1, dl.remainingMs());
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) throw ProtocolError(std::string("poll: ") + std::strerror(errno));
  }
}

// One connection attempt, bounded by the deadline. Returns an invalid Fd if refused.
[[nodiscard]] inline Fd tryConnect(const sockaddr_in& sa, const Deadline& dl, int& err) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) throw ProtocolError(std::string("socket: ") + std::strerror(errno));
  setNonBlocking(fd.get(), true);
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0) {
    if (errno != EINPROGRESS) {
      err = errno;
      return Fd();
    }
    if (!waitReady(fd.get(), POLLOUT, dl)) {
      err = ETIMEDOUT;
      return Fd();
    }
    socklen_t len = sizeof err;
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return Fd();
  }
  const int one = 1;
  ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  err = 0;
  return fd;
}

// Writes all bytes or throws (peer gone, deadline).
inline void sendAll(int fd, std::span<const std::uint8_t> b, const Deadline& dl) {
  std::size_t off = 0;
  while (off < b.size()) {
    const ssize_t n = ::send(fd, b.data() + off, b.size() - off, MSG_NOSIGNAL);
    if (n > 0) {
      off += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!waitReady(fd, POLLOUT, dl)) throw ProtocolError("timed out sending to peer");
      continue;
    }
    throw ProtocolError(std::string("peer connection lost while sending: ") + std::strerror(errno));
  }
}

// Reads exactly b.size() bytes or throws (EOF, reset, deadline).
inline void recvAll(int fd, std::span<std::uint8_t> b, const Deadline& dl) {
  std::size_t off = 0;
  while (off < b.size()) {
    if (!waitReady(fd, POLLIN, dl)) throw ProtocolError("timed out waiting for the peer's reply");
    const ssize_t n = ::recv(fd, b.data() + off, b.size() - off, 0);
    if (n > 0) {
      off += static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0) throw ProtocolError("peer closed the connection");
    if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) continue;
    throw ProtocolError(std::string("peer connection lost: ") + std::strerror(errno));
  }
}

}  // namespace crystal::control
