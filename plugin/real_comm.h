// Comms between two real ranks: real bytes over a TCP stream, progressed from test(), and
// released no earlier than the modelled target time. Each message is framed by FrameHeader;
// a receive entry takes the oldest message whose tag matches (NCCL tags = sender's rank).
// Buffers in GPU memory (GDR) are staged through pinned host memory with async copies on the
// comm's DeviceQueue: a send's bytes leave once its device-to-host copy is done; a receive
// completes once its host-to-device copy is (event queries in test(), no blocking call).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>

#include "comm.h"
#include "crystal/live/link_timing.h"
#include "device_queue.h"
#include "socket.h"

namespace crystal::plugin {

struct FrameHeader {
  std::uint32_t magic = 0x4652594Bu;  // "KYRF"
  std::int32_t tag = 0;
  std::uint64_t size = 0;
  std::int64_t due_ns = 0;  // sender's modelled delivery time (CLOCK_MONOTONIC)
};
static_assert(sizeof(FrameHeader) == 24);

class RealSendComm final : public DataComm {
 public:
  RealSendComm(NetContext* ctx, int dev, int max_requests, Fd fd, live::LinkParams link,
               std::shared_ptr<live::PortQueue> port)
      : DataComm(CommKind::Send, ctx, dev, max_requests), fd_(std::move(fd)), link_(link),
        port_(std::move(port)) {}
  void isend(Request& r, void* data, std::size_t size, int tag, live::TimeNs now) override;
  [[nodiscard]] bool test(Request& r, live::TimeNs now, int* sizes) override;

 private:
  void progress();
  Fd fd_;
  live::LinkParams link_;
  std::shared_ptr<live::PortQueue> port_;
  std::unique_ptr<DeviceQueue> gpu_;  // GPU send buffers: staging slot = request slot
  std::deque<int> queue_;  // request slots in post order
  FrameHeader hdr_;
  std::size_t hdr_done_ = 0, body_done_ = 0;
};

class RealRecvComm final : public DataComm {
 public:
  RealRecvComm(NetContext* ctx, int dev, int max_requests, Fd fd, live::LinkParams link,
               bool shared_clock)
      : DataComm(CommKind::Recv, ctx, dev, max_requests), fd_(std::move(fd)), link_(link),
        shared_clock_(shared_clock) {}
  void irecv(Request& r, int n, void** data, const std::size_t* sizes, const int* tags,
             live::TimeNs now) override;
  [[nodiscard]] bool test(Request& r, live::TimeNs now, int* sizes) override;

 private:
  void progress(live::TimeNs now);
  DeviceQueue& gpu();
  Fd fd_;
  live::LinkParams link_;
  bool shared_clock_;
  // GPU receive buffers: staging slot = request slot * kMaxGroup + entry; a request's
  // completion event is that of its entry 0 slot.
  std::unique_ptr<DeviceQueue> gpu_;
  std::deque<int> posted_;  // request slots in post order
  FrameHeader hdr_;
  std::size_t hdr_done_ = 0, body_done_ = 0;
  int target_slot_ = -1, target_entry_ = -1;
};

}  // namespace crystal::plugin
