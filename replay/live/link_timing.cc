#include "crystal/live/link_timing.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <tuple>

#include "crystal/live/ring_timing.h"
#include "crystal/live/tree_timing.h"

namespace crystal::live {

TimeNs PortQueue::reserve(TimeNs ready, TimeNs occupancy) noexcept {
  std::lock_guard lock(mu_);
  const TimeNs start = std::max(ready, free_at_);
  free_at_ = start + occupancy;
  return free_at_;
}

TimeNs PortQueue::freeAt() const noexcept {
  std::lock_guard lock(mu_);
  return free_at_;
}

VirtualLink::VirtualLink(std::shared_ptr<RingChannel> ring, LinkParams params,
                         std::shared_ptr<PortQueue> port)
    : params_(params), port_(std::move(port)), ring_(std::move(ring)) {}

VirtualLink::VirtualLink(std::shared_ptr<TreeChannel> tree, TreeRole role)
    : tree_(std::move(tree)), role_(role) {}

VirtualLink::VirtualLink(TreeBinder bind) : bind_(std::move(bind)) {}

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

TimeNs VirtualLink::postSend(TimeNs now, std::uint64_t bytes, bool idle, bool ring_op,
                             int channels) {
  if (ring_) {
    if (ring_op) return ring_->postSend(now, bytes, channels);
  } else if (bindTree()) {
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
  return std::max(send_left_, burst_delivered_);
}

void VirtualLink::postRecv(std::uint64_t step, TimeNs now, bool idle, int units_per_step,
                           bool ring_op, int proto, int channels, int first) {
  if (!ring_) {
    tree_post_step_ = step;
    tree_post_alone_ = idle;
  }
  if (ring_ && ring_op) {
    ring_->postRecv(step, now, idle, units_per_step, proto, channels, first);
  } else if ((ring_ || !treeTimed()) && idle) {
    recv_start_ = now;  // a peer-ready burst starts: its virtual sender streams from here
    recv_left_ = now;
  }
}

void VirtualLink::recvDone(bool idle, bool ring_op) {
  if (ring_ && ring_op) ring_->recvDone(idle);
}

std::optional<TimeNs> VirtualLink::recvArrival(std::uint64_t step, TimeNs posted,
                                               std::uint64_t bytes, TimeNs now,
                                               bool ring_op) {
  if (ring_) {
    if (ring_op) return ring_->recvArrival(step, posted, bytes, now);
  } else if (bindTree()) {
    // The first post of an operation starts it (one alone on the connection).
    tree_->postRecv(step, posted, bytes, step != tree_post_step_ || tree_post_alone_);
    return tree_->recvArrival(role_, step, posted, now);
  }
  // The virtual sender streams the burst: a unit leaves after the one before it, from the
  // burst's start, at most one latency ahead of its receive's post (the credit it needs).
  const TimeNs ready = std::max({recv_start_, recv_left_, posted - params_.latency_ns});
  recv_left_ = port_->reserve(ready, params_.occupancy(bytes));
  return std::max(posted, recv_left_ + params_.latency_ns);
}

}  // namespace crystal::live
