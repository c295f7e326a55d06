// Comms whose peer is a virtual rank: no bytes move; each request completes at the time the
// live model gives (crystal/live/link_timing.h). test() on a request whose time is known is
// one compare against the clock read by the caller. Receives also write the bytes the
// virtual sender delivers (LL/LL128 lines with their flags, data per the data policy,
// virtual_data.h) just before test() reports them done.
#pragma once

#include <array>
#include <memory>
#include <vector>

#include "comm.h"
#include "crystal/config/config.h"
#include "crystal/live/link_timing.h"
#include "device_queue.h"
#include "gpu_writer.h"
#include "op_segments.h"
#include "proto_lines.h"
#include "virtual_data.h"

namespace crystal::plugin {

class VirtualSendComm final : public DataComm {
 public:
  // `mirror`: the channel shared with the paired receive (NetContext::mirrorFor); kept only
  // under data policy mirror. `ops`: which operation each request belongs to
  // (NetContext::opSegmentsFor: ring connections, tree connections to the ring neighbour), or
  // nullptr: every request is the connection's own algorithm's.
  VirtualSendComm(NetContext* ctx, int dev, int max_requests,
                  std::shared_ptr<live::VirtualLink> link, int peer_rank,
                  std::shared_ptr<MirrorChannel> mirror, std::shared_ptr<OpSegments> ops = {});
  ~VirtualSendComm() override;
  void isend(Request& r, void* data, std::size_t size, int tag, live::TimeNs now) override;
  [[nodiscard]] bool test(Request& r, live::TimeNs now, int* sizes) override;
  [[nodiscard]] int peerRank() const { return peer_rank_; }
  // A request still not done this long after its post gets one WARN per comm saying what it
  // waits for (a hang then shows in NCCL's log, not as silence). 0: never.
  void setStallWarning(live::TimeNs ns) { stall_ns_ = ns; }

 private:
  void warnIfStalled(const Request& r, live::TimeNs now);
  std::shared_ptr<live::VirtualLink> link_;
  int peer_rank_;
  live::TimeNs stall_ns_ = 0;
  bool stall_warned_ = false;
  std::shared_ptr<MirrorChannel> mirror_;  // data policy mirror only
  std::shared_ptr<OpSegments> ops_;
  std::uint64_t next_send_ = 0;
  std::uint64_t counts_[2] = {0, 0};  // units of ring operations, of others
  int protocol_buffers_ = -1;  // fixed at the first isend
};

class VirtualRecvComm final : public DataComm {
 public:
  VirtualRecvComm(NetContext* ctx, int dev, int max_requests,
                  std::shared_ptr<live::VirtualLink> link, int peer_rank,
                  std::shared_ptr<MirrorChannel> mirror, std::shared_ptr<OpSegments> ops = {});
  ~VirtualRecvComm() override;
  void irecv(Request& r, int n, void** data, const std::size_t* sizes, const int* tags,
             live::TimeNs now) override;
  [[nodiscard]] bool test(Request& r, live::TimeNs now, int* sizes) override;
  // A buffer in GPU memory under the GPU writer: the writer is made now, during NCCL's
  // connection setup, not at the first receive (gpu_writer.h: loading its kernel may wait
  // for the GPU, where NCCL's kernel would be spinning for that receive's flags).
  void registered(const MemRegion& region) override;
  [[nodiscard]] int peerRank() const { return peer_rank_; }
  void setStallWarning(live::TimeNs ns) { stall_ns_ = ns; }  // as VirtualSendComm's
  // A tree connection of communicator `comm` (NCCL's commHash): every operation on it is a
  // tree all-reduce, so its bytes are free whenever the interposer rewrites that
  // communicator's reductions (PluginState::resultsRewritten).
  void setTreeOf(std::uint64_t comm) { tree_of_ = comm; }
  // Receives so far per DataWritten outcome.
  [[nodiscard]] std::uint64_t written(DataWritten w) const {
    return written_[static_cast<unsigned char>(w)];
  }

 private:
  void warnIfStalled(const Request& r, live::TimeNs now, const char* what);
  live::TimeNs stall_ns_ = 0;
  bool stall_warned_ = false;
  // What test() writes into the buffer of each outstanding request (indexed by pool slot).
  struct Delivery {
    bool write = false;
    proto::Proto proto = proto::Proto::Simple;
    std::uint64_t conn_step = 0;  // NCCL's absolute step: LL/LL128 flags
    bool device = false;       // the buffer is GPU memory (GDR): writes go through gpu()
    bool gpu_pending = false;  // GPU work of this receive is enqueued; done before test() is
    int placed = -1;           // its slot's entry in placed_ (host protocol slots), or -1
    int buffer_slot = -1;      // region ordinal x NCCL step slot (protocol buffers), or -1
    // Its bytes are never read (OpSegments::Place::bytes_free): written as under none.
    bool bytes_free = false;
  };
  void planDelivery(Request& r);
  // r belongs to a reduction whose result the interposer rewrites (bytes_free): no mirror,
  // Simple bytes not written, LL/LL128 flags only.
  void freeBytes(Request& r);
  // Writes what the virtual sender delivered into r's buffer (once; r is due). False while
  // a mirror hold keeps it back.
  [[nodiscard]] bool deliver(Request& r, live::TimeNs now);
  DeviceQueue& gpu();
  // Mirror: hold a due receive (return true) while the real rank has not yet posted the send
  // it mirrors and its sends on the paired connection still come: at most mirrorWait(r)
  // after the latest of this receive's post, modelled time, first test and the last send. A
  // hold that runs out means the real send depends on this receive (broadcast forwards what
  // it gets): no more holds on this connection in this operation, until a paired send again
  // comes before its receive.
  // The wait: kMirrorWaitNs plus the time the real rank's GPU may take to produce a send of
  // the receive's size at kMirrorWaitNsPerByte (1 GB/s: on the H200 a channel writing 1 MiB
  // slices into host memory posted one every 100-480 us). An all-gather's receive waits for
  // its loop's first send, which never depends on a receive of that loop: kMirrorSourceWaitNs,
  // a bound only against a send that never comes.
  static constexpr live::TimeNs kMirrorWaitNs = 200'000;
  static constexpr live::TimeNs kMirrorWaitNsPerByte = 1;
  static constexpr live::TimeNs kMirrorSourceWaitNs = 100'000'000;
  [[nodiscard]] static live::TimeNs mirrorWait(const Request& r) {
    return r.mirror_source ? kMirrorSourceWaitNs
                           : kMirrorWaitNs + kMirrorWaitNsPerByte * static_cast<live::TimeNs>(r.bytes);
  }
  [[nodiscard]] bool holdForMirror(Request& r, live::TimeNs now);
  // Receives per DataWritten outcome (indexed by its char) and mirror holds that ran out,
  // logged at close under mirror (a run whose receives were not mirrored says why).
  void logMirrorCounts() const;
  std::array<std::uint64_t, 128> written_{};
  std::uint64_t holds_ran_out_ = 0;
  std::uint64_t tree_of_ = 0;  // setTreeOf

  std::shared_ptr<live::VirtualLink> link_;
  int peer_rank_;
  std::uint64_t next_step_ = 0;
  DataPolicy policy_;
  std::shared_ptr<MirrorChannel> mirror_;
  std::shared_ptr<OpSegments> ops_;
  std::uint64_t counts_[2] = {0, 0};  // units of ring operations, of others
  std::vector<Delivery> deliveries_;
  std::unique_ptr<DeviceQueue> gpu_;  // created at the first GPU write
  proto::StepTracker steps_;
  int protocol_buffers_ = -1;  // fixed at the first irecv
  bool mirror_no_wait_ = false;
  std::uint64_t no_wait_op_ = 0;  // the operation (mirror key >> 24) that set mirror_no_wait_
  // Host protocol slots (region ordinal x NCCL step slot): which mirrored send's bytes each
  // holds, so a receive of the same bytes copies nothing (MirrorChannel::Placed).
  std::array<MirrorChannel::Placed, 3 * proto::kSteps> placed_{};
  // Forgets what the slots overlapping [p, p + bytes) hold, except slot `keep`.
  void forgetPlaced(const void* p, std::size_t bytes, int keep);
  // Whether a receive waits for its GPU writes before test() says done. Simple: always (the
  // GPU reads the slot once NCCL's proxy saw the completion); mirror: always (its staging and
  // the paired send's buffer are reused after completion); LL/LL128 under zero/none: only
  // with CRYSTAL_LINES_WAIT=1, since the GPU polls the flags itself and a slot is reposted
  // only after the GPU consumed it, so later writes to it follow in stream order.
  [[nodiscard]] bool waitsForGpu(const Delivery& d) const {
    return d.proto == proto::Proto::Simple || policy_ == DataPolicy::Mirror || wait_lines_;
  }
  bool wait_lines_ = false;  // CRYSTAL_LINES_WAIT
  // LL/LL128 flags in GPU memory through the GPU writer (gpu_writer.h): data policy
  // none (flags are the only writes), no CRYSTAL_LINES_WAIT, CRYSTAL_GPU_WRITER=1.
  bool use_writer_ = false;
  std::shared_ptr<GpuWriter> writer_;  // set at the first GPU region's registration
  // LL128 slots in GPU memory whose flags' high halves hold 0 already (written by an earlier
  // receive there): the next flags need only their low halves, one memset instead of two.
  // Indexed by Delivery::buffer_slot; the address and bytes that write covered.
  struct HighZero {
    const void* at = nullptr;
    std::size_t bytes = 0;
  };
  std::array<HighZero, 3 * proto::kSteps> ll128_high_zero_{};
};

}  // namespace crystal::plugin
