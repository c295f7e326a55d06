// Small POSIX socket helpers for the host: owned fds, non-blocking listeners and connects,
// and the loopback alias addresses that stand for virtual ranks.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>
#include <string>
#include <utility>

#include "wire.h"

namespace crystal::host {

// Owns one file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) noexcept : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) reset(std::exchange(o.fd_, -1));
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  [[nodiscard]] int get() const noexcept { return fd_; }
  [[nodiscard]] bool valid() const noexcept { return fd_ >= 0; }
  void reset(int fd = -1) noexcept;

 private:
  int fd_ = -1;
};

// Non-blocking TCP listener on bind_address:port (0 = ephemeral), backlog as large as the
// kernel allows. Throws ProtocolError naming the address on failure.
[[nodiscard]] Fd listenTcp(const std::string& bind_address, std::uint16_t port);
[[nodiscard]] std::uint16_t localPort(int fd);
// Local address of an accepted socket (the alias a real rank dialled).
[[nodiscard]] wire::SocketAddress localAddress(int fd);
// Starts a non-blocking connect; the caller waits for EPOLLOUT and checks connectResult().
[[nodiscard]] Fd connectTcp(const wire::SocketAddress& to);
// 0 when a non-blocking connect succeeded, else the errno.
[[nodiscard]] int connectResult(int fd) noexcept;
// RLIMIT_NOFILE soft limit := hard limit (thousands of virtual-rank connections).
void raiseFileLimit() noexcept;

// Virtual rank v is advertised as 127.x.y.z with x.y.z = v+1 (so never 127.0.0.0).
[[nodiscard]] wire::SocketAddress aliasAddress(int rank, std::uint16_t port) noexcept;
// Rank encoded in an alias, or -1 if `a` is not an IPv4 127/8 alias.
[[nodiscard]] int aliasRank(const wire::SocketAddress& a) noexcept;
inline constexpr int kMaxAliasRank = (1 << 24) - 2;

}  // namespace crystal::host
