// Non-blocking TCP helpers for real<->real connections. Every call returns at once; the
// callers keep progress state and retry from NCCL's polling (connect/accept/test).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace crystal::plugin {

// Owning file descriptor.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  ~Fd();
  [[nodiscard]] int get() const { return fd_; }
  [[nodiscard]] int release() noexcept { int f = fd_; fd_ = -1; return f; }
  [[nodiscard]] bool valid() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

struct SockAddr {
  std::uint8_t ip[4] = {};
  std::uint16_t port_be = 0;  // network order
};

// Listening socket on `ipv4` with a kernel-chosen port; fills `bound`.
[[nodiscard]] Fd listenTcp(const std::string& ipv4, SockAddr& bound);
// Starts a non-blocking connect. Throws on immediate failure.
[[nodiscard]] Fd connectTcp(const SockAddr& to);
// True once a non-blocking connect finished; throws if it failed.
[[nodiscard]] bool connectDone(int fd);
// A pending connection, or an invalid Fd if none yet.
[[nodiscard]] Fd acceptTcp(int listen_fd);
// Moves up to `len` bytes; returns bytes moved (0 = would block). Throws Remote on EOF/reset.
[[nodiscard]] std::size_t sendSome(int fd, const void* buf, std::size_t len);
[[nodiscard]] std::size_t recvSome(int fd, void* buf, std::size_t len);

}  // namespace crystal::plugin
