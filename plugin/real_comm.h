// Comms between two real ranks: real bytes over a TCP stream, progressed from test(), and
// released no earlier than the modelled target time. Each message is framed by FrameHeader;
// a receive entry takes the oldest message whose tag matches (NCCL tags = sender's rank).
// Buffers in GPU memory (GDR) are staged through pinned host memory with async copies on the
// comm's DeviceQueue: a send's bytes leave once its device-to-host copy is done; a receive
// completes once its host-to-device copy is (event queries in test(), no blocking call).
// A GPU buffer is staged at its offset in a pinned twin of its registered region (allocated
// at regMr, during connection setup; kept to close: no cuMemFreeHost while NCCL's kernels
// run, see DeviceQueue).
//
// A request that waits on the real peer longer than the emulation's timeout is logged once
// per comm (WARN, through NCCL's logger): which connection, which step, what it waits for.
// Waiting is legit while the peer is idle, so it is a warning and the wait goes on.
//
// LL128 lines into GPU memory (only where NCCL enables LL128 on the connection, e.g.
// NCCL_PROTO=LL128): the staged lines carry the sender's flags, and a copy engine need not
// write a 128-byte line in order, so the lines go with flag 0 and the flags after, in stream
// order (as device_lines.h does for virtual senders).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>

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
  // `peer` names the connection in warnings; `stall_ns`: wait before the stall warning.
  RealSendComm(NetContext* ctx, int dev, int max_requests, Fd fd, live::LinkParams link,
               std::shared_ptr<live::PortQueue> port, std::string peer, live::TimeNs stall_ns)
      : DataComm(CommKind::Send, ctx, dev, max_requests),
        fd_(std::move(fd)),
        link_(link),
        port_(std::move(port)),
        peer_(std::move(peer)),
        stall_ns_(stall_ns) {}
  void registered(const MemRegion& region) override;
  void isend(Request& r, void* data, std::size_t size, int tag, live::TimeNs now) override;
  [[nodiscard]] bool test(Request& r, live::TimeNs now, int* sizes) override;

 private:
  void progress();
  [[nodiscard]] std::byte* stagingOf(const void* data, std::size_t size);
  void warnIfStalled(const Request& r, live::TimeNs now);
  Fd fd_;
  live::LinkParams link_;
  std::shared_ptr<live::PortQueue> port_;
  std::string peer_;
  live::TimeNs stall_ns_;
  bool stall_warned_ = false;
  std::uint64_t steps_ = 0;
  std::unique_ptr<DeviceQueue>
      gpu_;                // GPU send buffers: twins of their regions, one event per slot
  std::deque<int> queue_;  // request slots in post order
  FrameHeader hdr_;
  std::size_t hdr_done_ = 0, body_done_ = 0;
};

class RealRecvComm final : public DataComm {
 public:
  RealRecvComm(NetContext* ctx, int dev, int max_requests, Fd fd, live::LinkParams link,
               bool shared_clock, std::string peer, live::TimeNs stall_ns)
      : DataComm(CommKind::Recv, ctx, dev, max_requests),
        fd_(std::move(fd)),
        link_(link),
        shared_clock_(shared_clock),
        peer_(std::move(peer)),
        stall_ns_(stall_ns) {}
  void registered(const MemRegion& region) override;
  void irecv(Request& r, int n, void** data, const std::size_t* sizes, const int* tags,
             live::TimeNs now) override;
  [[nodiscard]] bool test(Request& r, live::TimeNs now, int* sizes) override;

 private:
  void progress(live::TimeNs now);
  DeviceQueue& gpu();
  [[nodiscard]] std::byte* stagingOf(const void* data, std::size_t size);
  void warnIfStalled(const Request& r, live::TimeNs now, const char* what);
  void copyToDevice(const Request& r, int entry, char* staged, std::size_t bytes);
  Fd fd_;
  live::LinkParams link_;
  bool shared_clock_;
  int protocol_buffers_ = -1;  // NCCL's LL, LL128, Simple registrations; fixed at first irecv
  std::string peer_;
  live::TimeNs stall_ns_;
  bool stall_warned_ = false;
  std::uint64_t steps_ = 0;
  // GPU receive buffers: twins of their regions; a request's completion event is that of
  // slot request slot * kMaxGroup.
  std::unique_ptr<DeviceQueue> gpu_;
  std::deque<int> posted_;  // request slots in post order
  FrameHeader hdr_;
  std::size_t hdr_done_ = 0, body_done_ = 0;
  int target_slot_ = -1, target_entry_ = -1;
};

}  // namespace crystal::plugin
