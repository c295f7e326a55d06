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
// Shared memory (CRYSTAL_SHM, default on). Real ranks of one emulation often share a
// machine (several GPUs of one host), where TCP over loopback carried ~2 GB/s a direction
// (2026-12-05, two ranks on one H200 under MPS) against the target's 14+. So the sender makes
// each registered GPU region's pinned twin a POSIX shared-memory segment (plugin/shm_segment.h)
// and offers it on the stream (a ShmOffer frame, before any data); a receiver that can map it
// answers ShmAccepted, else ShmRefused. From then on a send from that region is a ShmData
// frame: the header names (segment, offset), the bytes are already there (the sender's
// device-to-host copy went into the segment), and the receiver copies them straight into its
// buffer (host-to-device from the mapping, registered on first use: registering does not wait
// for running kernels, tests/gpu/hybrid/host_register_probe.cu; a host buffer by memcpy). Host
// send buffers stay on TCP (its two copies cost what a memcpy in and out would). The receiver acks
// each ShmData frame once its copy is done (Reply::Ack, cumulative); the sender's request
// completes only then, as NCCL may reuse the buffer (and so the twin) after that. Until a
// region's offer is answered its sends wait; a refused region's go over TCP as before.
//
// GPU to GPU (CRYSTAL_IPC, default on). Where both real ranks use one GPU (or GPUs of one
// machine), the shared-memory route still makes two copies a step, through host memory. NCCL
// 2.28.9 allocates its buffers with cuMemCreate and POSIX fd handles, so the sender also offers
// each GPU region's allocation itself (IpcOffer). A receiver that can take it answers IpcWant
// with its process's fd inbox (plugin/fd_passing.h); the sender exports the allocation as an
// fd, hands it over through that inbox and says so on the stream (IpcFd); the receiver maps it
// and answers IpcAccepted. From then on a send from that allocation is an IpcData frame naming
// (segment, offset in the allocation): no staging copy on the sender, and the receiver copies
// GPU to GPU (LL128 lines: data words first, flags after, in stream order). Acks and the
// sender's completion work as for ShmData. Until the answer, sends go by shared memory (or
// TCP); a refusal at any point leaves them there. Steps of at most CRYSTAL_GPU_COPY_MAX bytes
// are copied by the GPU writer's kernel (plugin/gpu_writer.h: no driver call a step).
//
// The GPU's acknowledgement (CRYSTAL_GPU_ACK, off by default: no gain measured, 15-18 % off
// large transfers, docs/plugin.md). An acknowledgement on the stream
// needs a turn of the receiving proxy after the copy, and the sender's next turn after that;
// a turn of a proxy serving 16 channels was ~20-30 us on an H100 (2026-12-06). So where the
// writer copies an IpcData step and no earlier frame is still owed another way, it also
// stores the frame's number, after the copy and a system-wide fence, in the stream page's
// gpu_copied word (the receiver registers the page for the GPU at its first such step), and
// the sender's test() reads that word: its send completes without the receiver's turn. The
// stream's acknowledgements still follow (the two may come in either order).
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
#include <vector>

#include "comm.h"
#include "crystal/live/link_timing.h"
#include "device_queue.h"
#include "shm_segment.h"
#include "shm_stream.h"
#include "socket.h"

namespace crystal::plugin {

// Shared-memory stream (CRYSTAL_SHM_STREAM, with CRYSTAL_SHM): a sender that can create shared
// memory opens its stream with a StreamPage frame naming a page with two byte rings
// (plugin/shm_stream.h); a receiver that maps it moves its replies there, the sender its frames
// once it sees that, and from then on frames and replies pass with no system call (the socket
// is still asked once a millisecond, to notice a dead peer).
//
// Sender to receiver. Data: `size` body bytes follow. ShmData: `size` bytes at `offset` of the
// sender's segment `segment`. ShmOffer: a ShmOfferBody follows; `size` is the segment's length.
// Segments are the sender's registered GPU regions, numbered in offer order; a region may get
// a ShmOffer, an IpcOffer or both (shm first), with the same number. IpcOffer: an
// IpcOfferBody follows; `size` is the allocation's length, `offset` the region's offset in it.
// IpcFd: the fd of `segment` went to the receiver's inbox (size 1) or could not (size 0).
// IpcData: `size` bytes at `offset` of segment's allocation.
enum class FrameKind : std::uint32_t {
  Data = 0,
  ShmData = 1,
  ShmOffer = 2,
  IpcOffer = 3,
  IpcFd = 4,
  IpcData = 5,
  StreamPage = 6  // a ShmOfferBody follows, naming the page (shm_stream.h)
};

struct FrameHeader {
  std::uint32_t magic = 0x4652594Bu;  // "KYRF"
  std::int32_t tag = 0;
  std::uint64_t size = 0;
  std::int64_t due_ns = 0;  // sender's modelled delivery time (CLOCK_MONOTONIC)
  FrameKind kind = FrameKind::Data;
  std::uint32_t segment = 0;  // the sender's segments are numbered 0, 1, ... in offer order
  std::uint64_t offset = 0;
};
static_assert(sizeof(FrameHeader) == 40);

struct ShmOfferBody {
  char name[64] = {};  // shm_open name, NUL-terminated
};

struct IpcOfferBody {
  std::uint64_t key = 0;  // the fd's note key in the receiver's inbox (fd_passing.h)
  std::uint64_t region_size = 0;
};

// Receiver to sender, on the same stream. value: the segment (ShmAccepted, ShmRefused,
// IpcWant, IpcAccepted, IpcRefused), or the number of ShmData and IpcData frames whose bytes
// the receiver has copied out (Ack, cumulative). extra: IpcWant's inbox token.
enum class ReplyKind : std::uint32_t {
  ShmAccepted = 1,
  ShmRefused = 2,
  Ack = 3,
  IpcWant = 4,
  IpcAccepted = 5,
  IpcRefused = 6
};

struct Reply {
  std::uint32_t magic = 0x5950524Bu;  // "KRPY"
  ReplyKind kind = ReplyKind::Ack;
  std::uint64_t value = 0;
  std::uint64_t extra = 0;
};
static_assert(sizeof(Reply) == 24);

class RealSendComm final : public DataComm {
 public:
  // `peer` names the connection in warnings; `stall_ns`: wait before the stall warning.
  RealSendComm(NetContext* ctx, int dev, int max_requests, Fd fd, live::LinkParams link,
               std::shared_ptr<live::PortQueue> port, std::string peer, live::TimeNs stall_ns,
               bool offer_shm, bool offer_ipc = false)
      : DataComm(CommKind::Send, ctx, dev, max_requests),
        fd_(std::move(fd)),
        link_(link),
        port_(std::move(port)),
        peer_(std::move(peer)),
        stall_ns_(stall_ns),
        offer_shm_(offer_shm),
        offer_ipc_(offer_ipc) {
    openStream();
  }
  void registered(const MemRegion& region) override;
  void isend(Request& r, void* data, std::size_t size, int tag, live::TimeNs now) override;
  [[nodiscard]] bool test(Request& r, live::TimeNs now, int* sizes) override;

 private:
  // A registered GPU region offered to the receiver: its shared-memory twin (if any) and its
  // allocation (if exportable), and what the receiver said of each.
  struct Segment {
    std::unique_ptr<ShmSegment> shm;
    enum class State { None, Offered, Accepted, Refused };
    State state = State::None;    // of shm
    State ipc = State::None;      // of the allocation (Offered until IpcAccepted/IpcRefused)
    Fd ipc_fd;                    // exported, until it went to the receiver's inbox
    std::uint64_t ipc_token = 0;  // the receiver's inbox, once it asked (IpcWant)
    bool ipc_fd_sent = false;
    const std::byte* alloc_base = nullptr;  // the allocation, in this process
    std::size_t alloc_size = 0;
  };
  void offerAllocation(const MemRegion& region, Segment& seg, std::uint32_t k);
  void sendIpcFds();
  [[nodiscard]] Segment* ipcSegmentOf(const void* data, std::size_t size);
  void progress();
  void takeGpuAcks();  // shm_acked_ from the stream page's gpu_copied word
  void readReplies();
  void takeIpcReply();
  // Some of the stream's bytes to / from the receiver: the shared-memory stream once it has
  // one, else the socket (0: none moved now).
  [[nodiscard]] std::size_t toPeer(const void* p, std::size_t n);
  [[nodiscard]] std::size_t fromPeer(void* p, std::size_t n);
  void openStream();
  [[nodiscard]] bool flushControl();  // offers; false while the socket is full
  [[nodiscard]] Segment* segmentOf(const void* data);
  [[nodiscard]] std::byte* stagingOf(const void* data, std::size_t size);
  void warnIfStalled(const Request& r, live::TimeNs now);
  Fd fd_;
  live::LinkParams link_;
  std::shared_ptr<live::PortQueue> port_;
  std::string peer_;
  live::TimeNs stall_ns_;
  bool offer_shm_;
  bool offer_ipc_;
  std::uint64_t ipc_key_base_ = 0;  // random per comm: notes in a shared inbox stay apart
  int ipc_fds_due_ = 0;             // asked for (IpcWant), not yet handed over
  std::unique_ptr<ShmStream> stream_;  // this connection's page, created at construction
  bool stall_warned_ = false;
  std::uint64_t steps_ = 0;
  std::vector<Segment> segments_;  // before gpu_: its close unregisters them, then they unmap
  std::unique_ptr<DeviceQueue>
      gpu_;                // GPU send buffers: twins of their regions, one event per slot
  std::deque<int> queue_;  // request slots in post order
  FrameHeader hdr_;
  std::size_t hdr_done_ = 0, body_done_ = 0;
  std::string control_;  // offer frames not yet written
  std::size_t control_done_ = 0;
  Reply reply_;
  std::size_t reply_got_ = 0;
  std::uint64_t shm_sent_ = 0, shm_acked_ = 0;  // ShmData + IpcData frames written / acknowledged
  std::uint64_t reply_acked_ = 0;  // of them, acknowledged by replies (shm_acked_: or the GPU)
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
  // The queue goes first: it unregisters the stream page (releaseWord) before stream_
  // unmaps it.
  ~RealRecvComm() override { gpu_.reset(); }
  RealRecvComm(const RealRecvComm&) = delete;
  RealRecvComm& operator=(const RealRecvComm&) = delete;
  void registered(const MemRegion& region) override;
  void irecv(Request& r, int n, void** data, const std::size_t* sizes, const int* tags,
             live::TimeNs now) override;
  [[nodiscard]] bool test(Request& r, live::TimeNs now, int* sizes) override;

 private:
  void progress(live::TimeNs now);
  [[nodiscard]] bool readFrame(live::TimeNs now);  // false: nothing more to read now
  void takeOffer();
  void takeStreamPage();
  // As the sender's; they count the socket's bytes until the stream's page is mapped.
  [[nodiscard]] std::size_t toPeer(const void* p, std::size_t n);
  [[nodiscard]] std::size_t fromPeer(void* p, std::size_t n);
  void takeIpcOffer();
  void takeIpcFd();
  void takeBody(Request& r, live::TimeNs now);
  // Returns whether the GPU writer will store `frame` at `release` once the copy is done.
  bool copyPeerGpu(Request& r, int entry, const std::byte* src, std::size_t bytes,
                   cuda::DevicePtr release = 0, std::uint64_t frame = 0);
  [[nodiscard]] cuda::DevicePtr releaseWord();
  void queueReply(ReplyKind kind, std::uint64_t value, std::uint64_t extra = 0);
  void flushAcks();  // acks for copies out of shared memory that are done, then the replies
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
  bool writer_tried_ = false;  // asked for the GPU writer (at the first GPU region)
  std::uint64_t steps_ = 0;
  // The sender's segments by number (nullptr: refused), before gpu_ (see the sender's).
  struct PeerSegment {
    std::unique_ptr<ShmSegment> shm;
    bool register_tried = false, registered = false;  // cuMemHostRegister of the mapping
    bool shm_offered = false, ipc_offered = false, ipc_fd_seen = false;
    std::uint64_t ipc_key = 0;  // IpcOffer's
    std::size_t ipc_size = 0;   // the allocation's length
    std::byte* ipc = nullptr;   // mapped (device address) once the fd came
  };
  [[nodiscard]] PeerSegment& offeredSegment(bool ipc);
  [[nodiscard]] bool registerPeerSegment(PeerSegment& seg);
  std::vector<PeerSegment> segments_;
  // GPU receive buffers: twins of their regions; a request's completion event is that of
  // slot request slot * kMaxGroup.
  std::unique_ptr<DeviceQueue> gpu_;
  std::deque<int> posted_;  // request slots in post order
  FrameHeader hdr_;
  std::size_t hdr_done_ = 0, body_done_ = 0;
  int target_slot_ = -1, target_entry_ = -1;
  ShmOfferBody offer_;
  IpcOfferBody ipc_offer_;
  // ShmData and IpcData frames copied out (or being copied: their request's event), in order.
  struct OwedAck {
    std::uint64_t frame = 0;
    int event = -1;         // -1: copied by the CPU already
    bool released = false;  // the GPU writer stores `frame` in the page's gpu_copied word
  };
  std::deque<OwedAck> owed_;
  std::size_t owed_unreleased_ = 0;   // entries of owed_ not released
  cuda::DevicePtr release_word_ = 0;  // releaseWord()
  bool release_tried_ = false;
  std::uint64_t shm_got_ = 0, acked_ = 0;
  std::string replies_;  // not yet written
  std::size_t replies_done_ = 0;
  std::unique_ptr<ShmStream> stream_;             // the sender's page, once mapped
  std::uint64_t got_bytes_ = 0, sent_bytes_ = 0;  // of the stream, from its start
};

}  // namespace crystal::plugin
