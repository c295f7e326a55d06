// The bytes a virtual sender delivers (docs/plugin.md "Data policy and protocols").
//
// A receive from a virtual peer completes at its modelled time; just before test() reports
// it done, VirtualRecvComm writes its buffer here according to the emulation's data policy:
//   mirror  data of the real rank's own send of the same sequence number on the paired
//           send connection (k-th virtual send comm <-> k-th virtual recv comm, the pairing
//           the timing model uses), copied line by line with this receive's flags; zero
//           data when that send is missing, of another protocol, or already forgotten.
//   zero    LL/LL128 lines with zero data; Simple bytes are left as NCCL allocated them
//           (ncclCudaHostCalloc: zeroed host memory) since nothing else writes them;
//           Simple slots in GPU memory (not zeroed by NCCL) are zeroed when posted.
//   none    LL/LL128 flags only; data words keep whatever they held.
// LL and LL128 lines always get the flags of the connection's absolute step (proto_lines.h),
// so the GPU never waits on a virtual sender, whatever the policy.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "crystal/config/config.h"
#include "cuda_driver.h"
#include "proto_lines.h"

namespace crystal::plugin {

[[nodiscard]] const char* dataPolicyName(DataPolicy p) noexcept;
// "mirror" | "zero" | "none"; throws InputError naming `where` otherwise.
[[nodiscard]] DataPolicy parseDataPolicy(const std::string& value, const std::string& where);

// Protocol of a registered buffer from its registration ordinal on the comm. NCCL registers
// a connection's protocol buffers first, in protocol order: LL, LL128, Simple for ring/tree
// connections (3), LL, Simple for p2p with NCCL_ALLOC_P2P_NET_LL_BUFFERS (2), the shared
// Simple pool otherwise (1). Anything registered later (user buffers) carries raw bytes.
[[nodiscard]] proto::Proto protoOfRegion(int ordinal, int protocol_buffers) noexcept;

// What the plugin wrote into one receive from a virtual peer (per-request trace column
// `data`, the mirror counts a receive connection logs at close). The char is the trace's.
enum class DataWritten : char {
  Nothing = '-',      // no write: Simple under zero/none (NCCL's zeroed buffer), size 0
  PolicyLines = 'f',  // LL/LL128 lines per zero/none: flags, zero or untouched data
  Mirrored = 'm',     // the real rank's paired send
  NotSent = 'n',      // mirror, zeros: no send posted under this receive's key (yet)
  OtherProto = 'p',   // mirror, zeros: the paired send used another protocol's buffer
  NotKept = 'k',      // mirror, zeros: the send completed and its bytes were not kept
  Unpaired = 'u',     // mirror, zeros: no paired send connection, or not a ring operation
  Rewritten = 'r',    // mirror, a reduction whose result the interposer writes: as none
};
// The MirrorChannel::fill outcomes: Mirrored, NotSent, OtherProto, NotKept.

class DeviceQueue;

// What the k-th send of the real rank on one connection carried, kept for the paired receive.
// Thread-safe: the send comm's and the recv comm's calls may come from different threads.
//
// Keys are the mirror keys of virtual_comm.cc: (operation << 24) | index in it, or a
// connection-wide count. Sends are remembered in a ring of kDepth by key; "source" sends (a
// ring all-gather's first step of each loop, which every later step of the loop mirrors)
// are kept apart, in kSources entries, until newer sources replace them.
class MirrorChannel {
 public:
  static constexpr int kDepth = 16;    // sends remembered; NCCL keeps <= 8 steps in flight
  static constexpr int kSources = 8;   // all-gather sources: <= 2 per loop (Simple), 4 loops

  // What one receive buffer (a protocol slot) already holds from an earlier mirrored
  // receive: the key of the send whose bytes it got and how many. The receive comm keeps one
  // per slot and resets it whenever it writes anything else there.
  struct Placed {
    std::uint64_t k = UINT64_MAX;
    std::size_t n = 0;
    const void* at = nullptr;  // where those bytes start
  };

  MirrorChannel() = default;
  ~MirrorChannel();
  MirrorChannel(const MirrorChannel&) = delete;
  MirrorChannel& operator=(const MirrorChannel&) = delete;

  // The send buffer stays untouched by NCCL until sendDone(k) (head credit): no copy yet.
  // `data` nullptr: not in a registered buffer (unreadable). `on_device`: the buffer is GPU
  // memory (GDR send); only a GPU copy can read it. `source`: kept until newer sources
  // replace it, however many receives use it.
  void sendPosted(std::uint64_t k, proto::Proto p, const void* data, std::size_t size,
                  bool on_device = false, bool source = false);
  // Before NCCL may reuse the send buffer: keep a copy unless receive k already used it
  // (sources: always; host buffers only: a GPU send buffer is not copied, its receive then
  // gets zeros).
  // False (nothing done) while a GPU copy that reads send k's buffer may still run: the send
  // must not complete yet (NCCL would overwrite the buffer under the copy). One lock for the
  // check and the release, so no receive can start reading in between.
  bool sendDone(std::uint64_t k);  // callers with host buffers only may ignore the result
  // Receive k of protocol p: writes `bytes` at dst (host memory) from send k: Mirrored (an
  // empty send writes no data: the GPU reads none); else nothing written (the caller writes
  // zeros) and why: send k unknown (NotSent), of another protocol, or its bytes gone or only
  // in GPU memory (NotKept). `placed`: what dst already holds; when it is send k's bytes,
  // Simple copies nothing and LL/LL128 rewrite only their flags; updated on Mirrored.
  [[nodiscard]] DataWritten fill(std::uint64_t k, proto::Proto p, void* dst, std::size_t bytes,
                                 std::uint64_t step, Placed* placed = nullptr);
  // The same for dst in GPU memory: copies enqueued on q (slot's staging for host sources).
  [[nodiscard]] DataWritten fillDevice(std::uint64_t k, proto::Proto p, void* dst,
                                       std::size_t bytes, std::uint64_t step, DeviceQueue& q,
                                       int slot);
  void attachReceiver() {
    std::lock_guard l(mu_);
    has_receiver_ = true;
  }
  void attachSender() {
    std::lock_guard l(mu_);
    has_sender_ = true;
  }
  [[nodiscard]] bool hasSender() const {
    std::lock_guard l(mu_);
    return has_sender_;
  }
  // Whether send k was posted (and not yet replaced in the ring or among the sources).
  [[nodiscard]] bool sent(std::uint64_t k) const {
    std::lock_guard l(mu_);
    return find(k) != nullptr;
  }
  // When the real rank last posted a send on this connection (any operation's): while its
  // sends keep coming, a receive waiting for its mirrored send is worth holding.
  void noteSendPost(std::int64_t now) { last_send_post_.store(now, std::memory_order_relaxed); }
  [[nodiscard]] std::int64_t lastSendPost() const {
    return last_send_post_.load(std::memory_order_relaxed);
  }
  [[nodiscard]] std::uint64_t copiesKept() const {
    std::lock_guard l(mu_);
    return kept_;
  }
  // Receives whose buffer already held their send's bytes (nothing copied).
  [[nodiscard]] std::uint64_t copiesSkipped() const {
    std::lock_guard l(mu_);
    return skipped_;
  }

 private:
  struct Entry {
    std::uint64_t k = UINT64_MAX;
    proto::Proto p = proto::Proto::Simple;
    const void* live = nullptr;  // the send buffer while the send is outstanding
    std::size_t size = 0;
    bool consumed = false;
    bool source = false;
    std::vector<std::byte> copy;  // kept bytes once the send completed (reused capacity)
    bool kept = false;
    bool on_device = false;
    cuda::Event read = nullptr;  // recorded after a GPU copy that reads `live`
    bool read_pending = false;
  };
  [[nodiscard]] Entry* find(std::uint64_t k);
  [[nodiscard]] const Entry* find(std::uint64_t k) const;
  mutable std::mutex mu_;
  std::atomic<std::int64_t> last_send_post_{INT64_MIN / 2};
  std::array<Entry, kDepth> entries_;
  std::array<Entry, kSources> sources_;
  std::size_t next_source_ = 0;
  bool has_receiver_ = false;
  bool has_sender_ = false;
  std::uint64_t kept_ = 0;
  std::uint64_t skipped_ = 0;
};

// Writes one completed receive of `bytes` at dst (a buffer of protocol p, connection step
// `step`) for the policy; `mirror` may be null (no paired send connection). Returns what it
// wrote.
DataWritten deliverVirtualData(DataPolicy policy, MirrorChannel* mirror, std::uint64_t k,
                               proto::Proto p, void* dst, std::size_t bytes, std::uint64_t step,
                               MirrorChannel::Placed* placed = nullptr);
// The same for dst in GPU memory (GDR), enqueued on q; `slot` is the receive's request slot
// (its staging and completion event). Simple under zero is not written here: the receive
// zeroes its slot when it is posted (VirtualRecvComm), so its completion waits for nothing.
// `ll128_high_zero`: as writeLinesOnDevice's (device_lines.h).
DataWritten deliverVirtualDataOnDevice(DataPolicy policy, MirrorChannel* mirror, std::uint64_t k,
                                proto::Proto p, void* dst, std::size_t bytes, std::uint64_t step,
                                DeviceQueue& q, int slot, bool ll128_high_zero = false);

}  // namespace crystal::plugin
