#include "crystal/live/link_timing.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <tuple>

#include "crystal/live/ring_timing.h"
#include "crystal/live/tree_timing.h"

namespace crystal::live {

void PortQueue::forgetOld(TimeNs ready) {
  newest_ready_ = std::max(newest_ready_, ready);
  while (head_ < busy_.size() && busy_[head_].end < newest_ready_ - kHorizonNs) ++head_;
  if (head_ > 64 && head_ * 2 > busy_.size()) {
    busy_.erase(busy_.begin(), busy_.begin() + static_cast<std::ptrdiff_t>(head_));
    head_ = 0;
  }
}

TimeNs PortQueue::reserveSpread(TimeNs ready, TimeNs occupancy) noexcept {
  std::lock_guard lock(mu_);
  forgetOld(ready);
  if (occupancy <= 0) return ready;
  // The gaps from `ready` on, in order; every gap taken joins the intervals on both sides,
  // so all the walk passes becomes one interval [from, to).
  const auto live = busy_.begin() + static_cast<std::ptrdiff_t>(head_);
  auto first = std::upper_bound(live, busy_.end(), ready,
                                [](TimeNs x, const Busy& b) { return x < b.start; });
  auto next = first;  // the first interval starting after `ready`
  TimeNs from = ready;
  TimeNs t = ready;
  if (first != live && std::prev(first)->end >= ready) {
    --first;  // the interval `ready` falls in (or touches) joins too
    from = first->start;
    t = first->end;
  }
  TimeNs left = occupancy;
  while (next != busy_.end() && next->start - t < left) {
    left -= next->start - t;  // this gap is used up
    t = (next++)->end;
  }
  const TimeNs end_at = t + left;
  TimeNs to = end_at;
  if (next != busy_.end() && next->start == end_at) to = (next++)->end;
  if (first == next) {
    busy_.insert(first, {from, to});
  } else {
    *first = {from, to};
    busy_.erase(std::next(first), next);
  }
  return end_at;
}

TimeNs PortQueue::reserve(TimeNs ready, TimeNs occupancy) noexcept {
  std::lock_guard lock(mu_);
  forgetOld(ready);
  if (occupancy <= 0) return ready;
  // Most reservations come after every other one (a burst's next unit): append or extend.
  if (head_ == busy_.size() || ready >= busy_.back().end) {
    if (head_ < busy_.size() && busy_.back().end == ready)
      busy_.back().end = ready + occupancy;
    else
      busy_.push_back({ready, ready + occupancy});
    return ready + occupancy;
  }
  // The first gap of `occupancy` at or after `ready`: from the last interval starting at or
  // before `ready`, walk until one starts after the reservation would end.
  const auto live = busy_.begin() + static_cast<std::ptrdiff_t>(head_);
  auto next = std::upper_bound(live, busy_.end(), ready,
                               [](TimeNs t, const Busy& b) { return t < b.start; });
  TimeNs t = ready;
  if (next != live) t = std::max(t, std::prev(next)->end);
  while (next != busy_.end() && next->start < t + occupancy) t = std::max(t, (next++)->end);
  const TimeNs end_at = t + occupancy;
  // Insert [t, end_at) before `next`, merged with the intervals it touches.
  const bool join_prev = next != live && std::prev(next)->end == t;
  const bool join_next = next != busy_.end() && next->start == end_at;
  if (join_prev && join_next) {
    std::prev(next)->end = next->end;
    busy_.erase(next);
  } else if (join_prev) {
    std::prev(next)->end = end_at;
  } else if (join_next) {
    next->start = t;
  } else {
    busy_.insert(next, {t, end_at});
  }
  return end_at;
}

TimeNs PortQueue::freeAt() const noexcept {
  std::lock_guard lock(mu_);
  return head_ == busy_.size() ? 0 : busy_.back().end;
}

VirtualLink::VirtualLink(std::shared_ptr<RingChannel> ring, LinkParams params,
                         std::shared_ptr<PortQueue> port, std::shared_ptr<PortQueue> proxy)
    : params_(params), port_(std::move(port)), proxy_(std::move(proxy)), ring_(std::move(ring)) {}

VirtualLink::VirtualLink(std::shared_ptr<TreeChannel> tree, TreeRole role)
    : tree_(std::move(tree)), role_(role) {}

VirtualLink::VirtualLink(TreeBinder bind) : bind_(std::move(bind)) {}

void VirtualLink::setPeerReady(LinkParams params, std::shared_ptr<PortQueue> port,
                               std::shared_ptr<PortQueue> proxy) {
  params_ = params;
  port_ = std::move(port);
  proxy_ = std::move(proxy);
}

TimeNs VirtualLink::afterProxy(TimeNs t) {
  if (!proxy_ || params_.request_ns <= 0) return t;
  // The proxy's turn for this transfer ends at its completion if the proxy is free then (a
  // lone transfer pays nothing), else once the proxy found a turn's time in the gaps after
  // it: the thread interleaves its requests, so slivers between turns are not lost.
  return proxy_->reserveSpread(t - params_.request_ns, params_.request_ns);
}

bool VirtualLink::bindTree() {
  if (!tree_ && bind_) {
    std::tie(tree_, role_) = bind_();
    bind_ = nullptr;
  }
  return tree_ != nullptr;
}

VirtualLink::~VirtualLink() {
  if (host_fd_ >= 0) ::close(host_fd_);
}

void VirtualLink::watchHost(int fd) {
  if (host_fd_ >= 0) ::close(host_fd_);
  host_fd_ = fd;
}

bool VirtualLink::hostAlive(TimeNs now) {
  if (host_fd_ < 0 || !host_alive_ || now < next_check_) return host_alive_;
  next_check_ = now + kHostCheckNs;
  char byte = 0;
  const ssize_t n = ::recv(host_fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
    host_alive_ = false;
  return host_alive_;
}

TimeNs VirtualLink::postSend(TimeNs now, std::uint64_t bytes, bool idle, bool own_op,
                             int channels) {
  if (ring_) {
    if (own_op) return ring_->postSend(now, bytes, channels);
  } else if ((own_op || !port_) && bindTree()) {
    const std::uint64_t unit = tree_sends_++;
    return role_ == TreeRole::ToParent ? tree_->postUpSend(unit, now, bytes, idle)
                                       : tree_->postDownSend(unit, now, bytes, tree_free_, idle);
  }
  // A burst pays the latency once: its first send completes at delivery, the rest when they
  // left the link (NCCL's 8 slots then never wait a latency per window; the model has none).
  // A burst starts on an idle connection whose last send was delivered already: a GPU that
  // writes chunks more slowly than the link drains them empties the connection between
  // sends without ending the burst.
  const bool burst = idle && now >= send_left_ + params_.latency_ns;
  send_left_ = port_->reserve(burst ? now : std::max(now, send_left_), params_.occupancy(bytes));
  if (burst) burst_delivered_ = send_left_ + params_.latency_ns;
  return afterProxy(std::max(send_left_, burst_delivered_));
}

void VirtualLink::postRecv(std::uint64_t step, TimeNs now, bool idle, int units_per_step,
                           bool own_op, int proto, int channels, int first,
                           const ChainRecv& chain) {
  const bool peer_ready = !own_op && port_;  // another operation's, where the link is known
  if (!ring_ && !peer_ready) {
    tree_post_step_ = step;
    tree_post_alone_ = idle;
  }
  if (ring_ && own_op) {
    ring_->postRecv(step, now, idle, units_per_step, proto, channels, first);
    if (first == 1) ring_->startChain(step, now, chain, channels);
  } else if ((ring_ || !treeTimed() || peer_ready) && idle) {
    recv_start_ = now;  // a peer-ready burst starts: its virtual sender streams from here
    recv_left_ = now;
    recv_written_ = now;
  }
}

void VirtualLink::recvDone(bool idle, bool own_op) {
  if (ring_ && own_op) ring_->recvDone(idle);
}

std::optional<TimeNs> VirtualLink::recvArrival(std::uint64_t step, TimeNs posted,
                                               std::uint64_t bytes, TimeNs now, bool own_op) {
  if (ring_) {
    if (own_op) return ring_->recvArrival(step, posted, bytes, now);
  } else if ((own_op || !port_) && bindTree()) {
    // The first post of an operation starts it (one alone on the connection).
    tree_->postRecv(step, posted, bytes, step != tree_post_step_ || tree_post_alone_);
    return tree_->recvArrival(role_, step, posted, now);
  }
  // The virtual sender streams the burst: a unit leaves after the one before it, from the
  // burst's start, at most one latency ahead of its receive's post (the credit it needs).
  // A GPU-paced sender (NET p2p) first writes the unit, after the one before it.
  TimeNs ready = std::max({recv_start_, recv_left_, posted - params_.latency_ns});
  if (params_.sender_ns_per_byte > 0) {
    recv_written_ = std::max({recv_start_, recv_written_, posted - params_.latency_ns}) +
                    static_cast<TimeNs>(static_cast<double>(bytes) * params_.sender_ns_per_byte +
                                        0.5);
    ready = std::max(ready, recv_written_);
  }
  recv_left_ = port_->reserve(ready, params_.occupancy(bytes));
  return afterProxy(std::max(posted, recv_left_ + params_.latency_ns));
}

}  // namespace crystal::live
