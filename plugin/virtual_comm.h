// Comms whose peer is a virtual rank: no bytes move; each request completes at the time the
// live model gives (crystal/live/link_timing.h). test() on a request whose time is known is
// one compare against the clock read by the caller.
#pragma once

#include <memory>

#include "comm.h"
#include "crystal/live/link_timing.h"

namespace crystal::plugin {

class VirtualSendComm final : public DataComm {
 public:
  VirtualSendComm(NetContext* ctx, int dev, int max_requests,
                  std::shared_ptr<live::VirtualLink> link, int peer_rank)
      : DataComm(CommKind::Send, ctx, dev, max_requests), link_(std::move(link)),
        peer_rank_(peer_rank) {}
  void isend(Request& r, void* data, std::size_t size, int tag, live::TimeNs now) override;
  [[nodiscard]] bool test(Request& r, live::TimeNs now, int* sizes) override;
  [[nodiscard]] int peerRank() const { return peer_rank_; }

 private:
  std::shared_ptr<live::VirtualLink> link_;
  int peer_rank_;
};

class VirtualRecvComm final : public DataComm {
 public:
  VirtualRecvComm(NetContext* ctx, int dev, int max_requests,
                  std::shared_ptr<live::VirtualLink> link, int peer_rank)
      : DataComm(CommKind::Recv, ctx, dev, max_requests), link_(std::move(link)),
        peer_rank_(peer_rank) {}
  void irecv(Request& r, int n, void** data, const std::size_t* sizes, const int* tags,
             live::TimeNs now) override;
  [[nodiscard]] bool test(Request& r, live::TimeNs now, int* sizes) override;
  [[nodiscard]] int peerRank() const { return peer_rank_; }

 private:
  std::shared_ptr<live::VirtualLink> link_;
  int peer_rank_;
  std::uint64_t next_step_ = 0;
};

}  // namespace crystal::plugin
