#include "loop.h"

#include <errno.h>
#include <fmt/core.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "crystal/base/error.h"

namespace crystal::host {

namespace {
constexpr std::uint64_t kListenerBit = 1ULL << 63;
constexpr std::uint64_t kWakeKey = 0;
}  // namespace

void Stream::consume(std::size_t n) noexcept {
  rx_off_ += n;
  if (rx_off_ == rx_.size()) {
    rx_.clear();
    rx_off_ = 0;
  } else if (rx_off_ > 65536 && rx_off_ * 2 > rx_.size()) {
    rx_.erase(rx_.begin(), rx_.begin() + static_cast<std::ptrdiff_t>(rx_off_));
    rx_off_ = 0;
  }
}

void Stream::send(std::span<const std::byte> bytes) {
  if (dead_ || close_after_flush_) return;
  tx_.insert(tx_.end(), bytes.begin(), bytes.end());
  flush();
}

void Stream::closeAfterFlush() {
  if (dead_) return;
  close_after_flush_ = true;
  flush();
}

void Stream::setWaiting(bool waiting) noexcept {
  if (waiting && !waiting_) since_ = Clock::now();
  waiting_ = waiting;
}

void Stream::flush() {
  if (dead_ || connecting_) return;
  while (tx_off_ < tx_.size()) {
    const ssize_t n = ::send(fd_.get(), tx_.data() + tx_off_, tx_.size() - tx_off_, MSG_NOSIGNAL);
    if (n > 0) {
      tx_off_ += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    loop_.fail(*this, fmt::format("send: {}", std::strerror(errno)));
    return;
  }
  if (tx_off_ == tx_.size()) {
    tx_.clear();
    tx_off_ = 0;
    if (close_after_flush_) {
      loop_.close(id_);
      return;
    }
  }
  const bool want = tx_off_ < tx_.size();
  if (want != want_write_) {
    want_write_ = want;
    loop_.arm(*this);
  }
}

Loop::Loop() {
  epoll_.reset(epoll_create1(EPOLL_CLOEXEC));
  wake_fd_.reset(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!epoll_.valid() || !wake_fd_.valid())
    throw ProtocolError(fmt::format("epoll/eventfd: {}", std::strerror(errno)));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeKey;
  epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, wake_fd_.get(), &ev);
}

Loop::~Loop() = default;

void Loop::addListener(int listen_fd, AcceptFn on_accept) {
  listeners_[listen_fd] = std::move(on_accept);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenerBit | static_cast<std::uint32_t>(listen_fd);
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, listen_fd, &ev) != 0)
    throw ProtocolError(fmt::format("epoll_ctl(listener): {}", std::strerror(errno)));
}

StreamId Loop::adopt(Fd fd, bool connecting, std::string label) {
  const StreamId id = next_id_++;
  const int raw = fd.get();
  int one = 1;  // small frames, latency bound: never let Nagle hold a step's header
  (void)setsockopt(raw, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  auto s =
      std::unique_ptr<Stream>(new Stream(*this, id, std::move(fd), connecting, std::move(label)));
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | (connecting ? static_cast<std::uint32_t>(EPOLLOUT) : 0u);
  ev.data.u64 = id;
  s->want_write_ = connecting;
  if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, raw, &ev) != 0)
    throw ProtocolError(fmt::format("epoll_ctl(stream): {}", std::strerror(errno)));
  streams_.emplace(id, std::move(s));
  return id;
}

Stream* Loop::find(StreamId id) noexcept {
  auto it = streams_.find(id);
  return it == streams_.end() || it->second->dead_ ? nullptr : it->second.get();
}

void Loop::close(StreamId id) noexcept {
  auto it = streams_.find(id);
  if (it == streams_.end()) return;
  it->second->dead_ = true;
  epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, it->second->fd(), nullptr);
  graveyard_.push_back(std::move(it->second));
  streams_.erase(it);
}

void Loop::arm(Stream& s) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | (s.want_write_ ? static_cast<std::uint32_t>(EPOLLOUT) : 0u);
  ev.data.u64 = s.id_;
  epoll_ctl(epoll_.get(), EPOLL_CTL_MOD, s.fd(), &ev);
}

void Loop::fail(Stream& s, const std::string& why) {
  if (s.dead_) return;
  const StreamId id = s.id_;
  auto cb = s.on_closed;
  close(id);  // s stays alive in the graveyard until the round ends
  if (cb) cb(s, why);
}

void Loop::onStreamEvent(Stream& s, std::uint32_t events) {
  if (s.connecting_ && (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
    const int err = connectResult(s.fd());
    if (err != 0) {
      fail(s, fmt::format("connect: {}", std::strerror(err)));
      return;
    }
    s.connecting_ = false;
    s.want_write_ = false;
    arm(s);
    s.flush();
    if (s.dead_) return;
  } else if (events & EPOLLOUT) {
    s.flush();
    if (s.dead_) return;
  }
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
    bool eof = false;
    std::string err;
    std::byte buf[65536];
    for (;;) {
      const ssize_t n = ::recv(s.fd(), buf, sizeof buf, 0);
      if (n > 0) {
        s.rx_.insert(s.rx_.end(), buf, buf + n);
        if (static_cast<std::size_t>(n) < sizeof buf) continue;
        continue;
      }
      if (n == 0) {
        eof = true;
        break;
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) err = std::strerror(errno);
      break;
    }
    if (s.rx_off_ < s.rx_.size() && s.on_data) s.on_data(s);
    if (s.dead_) return;
    if (!err.empty())
      fail(s, "recv: " + err);
    else if (eof)
      fail(s, "peer closed the connection");
  }
}

int Loop::wait(int timeout_ms) {
  epoll_event events[256];
  const int n = epoll_wait(epoll_.get(), events, 256, timeout_ms);
  if (n < 0) {
    if (errno == EINTR) return 0;
    throw ProtocolError(fmt::format("epoll_wait: {}", std::strerror(errno)));
  }
  for (int i = 0; i < n; ++i) {
    const std::uint64_t key = events[i].data.u64;
    const std::uint32_t ev = events[i].events;
    ready_.emplace_back(key, ev);
  }
  return n;
}

void Loop::dispatch() {
  auto ready = std::move(ready_);
  ready_.clear();
  for (const auto& [key, ev] : ready) {
    if (key == kWakeKey) {
      std::uint64_t v;
      while (::read(wake_fd_.get(), &v, sizeof v) > 0) {
      }
    } else if (key & kListenerBit) {
      const int lfd = static_cast<int>(key & 0xffffffffu);
      auto it = listeners_.find(lfd);
      if (it == listeners_.end()) continue;
      for (;;) {
        const int cfd = ::accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (cfd < 0) break;  // EAGAIN, or EMFILE: retried on the next event
        it->second(Fd(cfd));
      }
    } else if (Stream* s = find(key)) {
      onStreamEvent(*s, ev);
    }
  }
  graveyard_.clear();
}

void Loop::wake() noexcept {
  const std::uint64_t one = 1;
  (void)!::write(wake_fd_.get(), &one, sizeof one);
}

}  // namespace crystal::host
