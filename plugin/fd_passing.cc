#include "fd_passing.h"

#include <fmt/core.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <map>
#include <mutex>

#include "errors.h"

namespace crystal::plugin {
namespace {

constexpr std::uint32_t kNoteMagic = 0x4E44464Bu;  // "KFDN"

struct Note {
  std::uint32_t magic = kNoteMagic;
  std::uint32_t pad = 0;
  std::uint64_t key = 0;
};

sockaddr_un inboxAddress(std::uint64_t token, socklen_t* len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  // sun_path[0] stays '\0': an abstract name, gone with the socket (nothing to clean up).
  const int n = std::snprintf(a.sun_path + 1, sizeof a.sun_path - 1, "crystal-fd-%016llx",
                              static_cast<unsigned long long>(token));
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + static_cast<std::size_t>(n));
  return a;
}

std::string errnoText(const char* what, int e) {
  return fmt::format("{}: {}", what, std::strerror(e));
}

}  // namespace

struct FdInbox::Impl {
  Fd sock;
  std::mutex mu;  // several proxy threads (one per GPU) may share the process's inbox
  std::map<std::uint64_t, Fd> arrived;
};

FdInbox::FdInbox() : impl_(new Impl) {
  for (int attempt = 0; attempt < 4 && !impl_->sock.valid(); ++attempt) {
    if (::getrandom(&token_, sizeof token_, 0) != static_cast<ssize_t>(sizeof token_))
      throw PluginError(Errc::System, errnoText("fd inbox: getrandom", errno));
    Fd s(::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!s.valid()) throw PluginError(Errc::System, errnoText("fd inbox: socket", errno));
    socklen_t len = 0;
    const sockaddr_un a = inboxAddress(token_, &len);
    if (::bind(s.get(), reinterpret_cast<const sockaddr*>(&a), len) == 0)
      impl_->sock = std::move(s);
    else if (errno != EADDRINUSE)
      throw PluginError(Errc::System, errnoText("fd inbox: bind", errno));
  }
  if (!impl_->sock.valid())
    throw PluginError(Errc::System, "fd inbox: no free name after 4 random tokens");
}

FdInbox& FdInbox::get() {
  static FdInbox* inbox = new FdInbox;  // never destroyed: comms may close during exit
  return *inbox;
}

Fd FdInbox::take(std::uint64_t key) {
  std::lock_guard lock(impl_->mu);
  for (;;) {
    Note note;
    iovec iov{&note, sizeof note};
    alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
    msghdr h{};
    h.msg_iov = &iov;
    h.msg_iovlen = 1;
    h.msg_control = ctl;
    h.msg_controllen = sizeof ctl;
    const ssize_t n = ::recvmsg(impl_->sock.get(), &h, MSG_CMSG_CLOEXEC);
    if (n < 0) break;  // EAGAIN: nothing more queued
    int fd = -1;
    for (cmsghdr* c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(&h, c))
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
          c->cmsg_len == CMSG_LEN(sizeof(int)))
        std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
    Fd owned(fd);
    // Anyone on this machine may write to an abstract name: keep only well-formed notes.
    if (n != static_cast<ssize_t>(sizeof note) || note.magic != kNoteMagic || !owned.valid() ||
        (h.msg_flags & MSG_CTRUNC))
      continue;
    impl_->arrived[note.key] = std::move(owned);
  }
  auto it = impl_->arrived.find(key);
  if (it == impl_->arrived.end()) return Fd{};
  Fd fd = std::move(it->second);
  impl_->arrived.erase(it);
  return fd;
}

FdSend sendFd(std::uint64_t token, std::uint64_t key, int fd, std::string* why) {
  Fd s(::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!s.valid()) {
    *why = errnoText("socket", errno);
    return FdSend::Failed;
  }
  socklen_t len = 0;
  sockaddr_un a = inboxAddress(token, &len);
  Note note;
  note.key = key;
  iovec iov{&note, sizeof note};
  alignas(cmsghdr) char ctl[CMSG_SPACE(sizeof(int))] = {};
  msghdr h{};
  h.msg_name = &a;
  h.msg_namelen = len;
  h.msg_iov = &iov;
  h.msg_iovlen = 1;
  h.msg_control = ctl;
  h.msg_controllen = sizeof ctl;
  cmsghdr* c = CMSG_FIRSTHDR(&h);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  if (::sendmsg(s.get(), &h, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof note))
    return FdSend::Sent;
  if (errno == EAGAIN || errno == EWOULDBLOCK) return FdSend::Again;
  *why = errnoText(fmt::format("sendmsg to crystal-fd-{:016x}", token).c_str(), errno);
  return FdSend::Failed;
}

}  // namespace crystal::plugin
