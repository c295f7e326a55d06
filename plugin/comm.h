// What the plugin hands NCCL as a listen/send/recv comm, and the per-comm bookkeeping every
// data comm shares: memory registrations and a fixed pool of requests (NCCL's maximum
// outstanding, never allocated on the data path).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "crystal/live/clock.h"
#include "crystal/nccl/common.h"

namespace crystal::plugin {

struct NetContext;

enum class CommKind : std::uint8_t { Listen, Send, Recv, PendingConnect };

class Comm {
 public:
  Comm(CommKind kind, NetContext* ctx, int dev) : kind_(kind), ctx_(ctx), dev_(dev) {}
  virtual ~Comm() = default;
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  [[nodiscard]] CommKind kind() const { return kind_; }
  [[nodiscard]] NetContext* ctx() const { return ctx_; }
  [[nodiscard]] int dev() const { return dev_; }
  std::mutex mu;  // NCCL's proxy and main threads may both call into one comm

 private:
  CommKind kind_;
  NetContext* ctx_;
  int dev_;
};

inline constexpr int kMaxGroup = 8;  // largest maxRecvs we report

struct MemRegion {
  void* base = nullptr;
  std::size_t size = 0;
  int type = 0;     // NCCL_PTR_*
  int ordinal = 0;  // registration order on its comm (NCCL registers LL, LL128, Simple first)
};

struct Request {
  bool in_use = false;
  int n = 0;  // entries (grouped receive), 1 for sends
  std::array<void*, kMaxGroup> data{};
  std::array<std::size_t, kMaxGroup> sizes{};  // posted sizes (capacity for receives)
  std::array<int, kMaxGroup> tags{};
  std::array<std::size_t, kMaxGroup> got{};  // bytes actually received
  std::array<bool, kMaxGroup> filled{};
  std::array<bool, kMaxGroup> on_device{};  // entry's buffer is GPU memory (real peers: staged)
  bool staged = false;                      // GPU copies of this request are enqueued (real peers)
  static constexpr live::TimeNs kUnknown = INT64_MAX;
  live::TimeNs due = kUnknown;  // modelled completion; kUnknown while not yet known
  live::TimeNs posted = 0;
  std::uint64_t step = 0;   // per-comm sequence number of this request
  std::uint64_t bytes = 0;  // total posted bytes
  std::uint64_t seq = 0;    // FIFO order among outstanding requests
  // Real peers: the number of the shared-memory frame that carried this send (real_comm.h);
  // it completes once the receiver acknowledged copying it out. 0: sent over TCP.
  std::uint64_t shm_frame = 0;
  // Data policy mirror: the key pairing a ring receive with the real rank's send
  // (MirrorChannel); `mirrored` false for requests of other operations.
  std::uint64_t mirror_k = 0;
  bool mirrored = false;
  bool mirror_source = false;  // a receive keyed to a ring all-gather's first-step send
  // Virtual peers: the request belongs to a ring operation (or nothing says otherwise);
  // whether it belongs to the algorithm its connection was made for (a ring connection's ring
  // operations, a tree connection's others; else timed peer-ready), and its unit number among
  // those of its kind on its connection (crystal/live/link_timing.h).
  bool ring_op = true;
  bool own_op = true;
  std::uint64_t unit = 0;
  live::TimeNs first_test = 0;  // the first test() (per-request trace)
  std::uint32_t tests = 0;
  // Receives from virtual peers into LL/LL128/Simple slots: NCCL's step the slot holds as the
  // plugin reconstructed it (LL/LL128 flags follow it); -1 when not tracked.
  std::int64_t conn_step = -1;
  // Receives from virtual peers: what the plugin wrote (a DataWritten char, virtual_data.h),
  // and whether a mirror hold ran out first; 0 while not delivered.
  char written = 0;
  bool hold_ran_out = false;
};

class DataComm : public Comm {
 public:
  DataComm(CommKind kind, NetContext* ctx, int dev, int max_requests);

  [[nodiscard]] void* regMr(void* data, std::size_t size, int type);
  void deregMr(void* mhandle);
  // Throws BadArgument unless [data, data+size) lies in the region `mhandle` of this comm.
  void checkRange(void* mhandle, const void* data, std::size_t size) const;
  // The registered region holding `p`, or nullptr; and how many were ever registered.
  [[nodiscard]] const MemRegion* regionOf(const void* p) const noexcept;
  [[nodiscard]] int registrations() const noexcept { return registrations_; }

  // A free request slot, or nullptr when NCCL's maximum is outstanding (NCCL retries).
  [[nodiscard]] Request* allocRequest() noexcept;
  void freeRequest(Request& r) noexcept {
    r.in_use = false;
    --outstanding_;
  }
  [[nodiscard]] int slotOf(const Request& r) const noexcept {
    return static_cast<int>(&r - pool_.data());
  }
  [[nodiscard]] Request* slot(int i) noexcept {
    return i >= 0 && i < static_cast<int>(pool_.size()) && pool_[i].in_use ? &pool_[i] : nullptr;
  }
  [[nodiscard]] int outstanding() const noexcept { return outstanding_; }
  [[nodiscard]] std::size_t capacity() const noexcept { return pool_.size(); }
  // This connection's id in the per-request trace (conn_trace.h); kNoTrace when it is off.
  static constexpr std::uint32_t kNoTrace = UINT32_MAX;
  std::uint32_t trace_id = kNoTrace;

  // Called by regMr before the region is added (connection setup, not the data path): real
  // comms allocate the pinned twin of a GPU region here.
  virtual void registered(const MemRegion& /*region*/) {}
  // Data path, implemented by the virtual and real comms. isend/irecv fill a fresh request.
  virtual void isend(Request& r, void* data, std::size_t size, int tag, live::TimeNs now);
  virtual void irecv(Request& r, int n, void** data, const std::size_t* sizes, const int* tags,
                     live::TimeNs now);
  // Progresses and reports completion; fills sizes[0..n) when done and sizes != nullptr.
  [[nodiscard]] virtual bool test(Request& r, live::TimeNs now, int* sizes) = 0;

 private:
  std::vector<Request> pool_;
  int outstanding_ = 0;
  std::uint64_t next_seq_ = 0;
  std::vector<std::unique_ptr<MemRegion>> regions_;
  int registrations_ = 0;
};

}  // namespace crystal::plugin
