// Single-threaded epoll loop over non-blocking TCP streams: no thread per connection, so one
// host serves the thousands of bootstrap connections of an 8192-rank communicator.
//
// Streams are named by StreamId, never by pointer, in the protocol code: a stream closed by
// one handler is only destroyed after the current dispatch round, and a stale id simply
// finds nothing.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "net.h"

namespace crystal::host {

using StreamId = std::uint64_t;
using Clock = std::chrono::steady_clock;

class Stream {
 public:
  // New bytes arrived in rx(); the handler consumes what it can parse.
  std::function<void(Stream&)> on_data;
  // Peer closed (EOF) or the socket failed; `why` is one line. Not called for close().
  std::function<void(Stream&, const std::string& why)> on_closed;

  [[nodiscard]] StreamId id() const noexcept { return id_; }
  [[nodiscard]] int fd() const noexcept { return fd_.get(); }
  [[nodiscard]] const std::string& label() const noexcept { return label_; }
  [[nodiscard]] std::span<const std::byte> rx() const noexcept {
    return {rx_.data() + rx_off_, rx_.size() - rx_off_};
  }
  void consume(std::size_t n) noexcept;
  void send(std::span<const std::byte> bytes);
  // Close once every queued byte is written (bootstrap senders always close after a message).
  void closeAfterFlush();
  // A stream is "waiting" while the peer owes it bytes of a started exchange; the host's
  // stall check fails the communicator of a stream that waits longer than the timeout.
  void setWaiting(bool waiting) noexcept;
  [[nodiscard]] bool waiting() const noexcept { return waiting_; }
  [[nodiscard]] Clock::time_point since() const noexcept { return since_; }
  [[nodiscard]] bool closing() const noexcept { return close_after_flush_; }

 private:
  friend class Loop;
  Stream(class Loop& loop, StreamId id, Fd fd, bool connecting, std::string label)
      : loop_(loop),
        id_(id),
        fd_(std::move(fd)),
        connecting_(connecting),
        label_(std::move(label)) {}
  void flush();
  class Loop& loop_;
  StreamId id_;
  Fd fd_;
  bool connecting_;
  std::string label_;
  std::vector<std::byte> rx_;
  std::size_t rx_off_ = 0;
  std::vector<std::byte> tx_;
  std::size_t tx_off_ = 0;
  bool close_after_flush_ = false;
  bool want_write_ = false;
  bool waiting_ = false;
  bool dead_ = false;
  Clock::time_point since_ = Clock::now();
};

class Loop {
 public:
  Loop();
  ~Loop();
  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;

  using AcceptFn = std::function<void(Fd)>;
  // `listen_fd` stays owned by the caller and must outlive the loop's use of it.
  void addListener(int listen_fd, AcceptFn on_accept);
  // Takes a connected (or connecting) socket; returns its id.
  StreamId adopt(Fd fd, bool connecting, std::string label);
  [[nodiscard]] Stream* find(StreamId id) noexcept;
  // Closes now, without calling on_closed.
  void close(StreamId id) noexcept;
  // wait(): one epoll_wait of at most timeout_ms, without touching any stream (so a host can
  // run it outside its lock); dispatch(): handle what wait() returned. poll() = both.
  int wait(int timeout_ms);
  void dispatch();
  int poll(int timeout_ms) {
    const int n = wait(timeout_ms);
    dispatch();
    return n;
  }
  void wake() noexcept;  // makes a poll() in another thread return
  [[nodiscard]] std::size_t streamCount() const noexcept { return streams_.size(); }
  template <typename F>
  void forEachStream(F&& f) {
    for (auto& [id, s] : streams_)
      if (!s->dead_) f(*s);
  }

 private:
  friend class Stream;
  void arm(Stream& s);
  void fail(Stream& s, const std::string& why);
  void onStreamEvent(Stream& s, std::uint32_t events);
  Fd epoll_;
  Fd wake_fd_;
  StreamId next_id_ = 1;
  std::unordered_map<StreamId, std::unique_ptr<Stream>> streams_;
  std::unordered_map<int, AcceptFn> listeners_;
  std::vector<std::unique_ptr<Stream>> graveyard_;
  std::vector<std::pair<std::uint64_t, std::uint32_t>> ready_;  // (key, events) from wait()
};

}  // namespace crystal::host
