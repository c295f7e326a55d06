// The byte stream of a real<->real connection on one machine, moved from its TCP socket into
// shared memory once both sides hold the page (real_comm.h "Shared-memory stream").
//
// Why: a real<->real hop of a small message cost the two proxies' threads ~13 us of
// syscalls on this project's CPU (bench/plugin/real_pair_bench.cc, BM_RealPairSmallStep: two
// send() and two to three recv() on loopback TCP a step, frame and ack), against a target
// NVLink hop of a few us; a ring all-gather crosses the link 63 times in a row at 64 ranks.
//
// The sender creates the page (a ShmSegment) and names it in the stream's first frame. The
// receiver maps it, moves its own direction (replies) into the page at once, and sets
// `attached`. The sender moves its direction (frames) at its next write after it sees
// `attached`. Each direction's socket part is counted in the page (`socket` bytes, written
// before `moved`), so the reader takes exactly those bytes from the socket first, then reads
// the ring: the stream's bytes stay in order across the move, a frame may straddle it.
//
// Before the move each writer publishes its socket count, and a reader calls recv() only while
// that count is ahead of what it read (the page's first use, as "doorbells"). After the move the
// socket carries nothing; each side still asks it once a millisecond (kLook), when it finds
// nothing to read or no room to write, which is how a closed or dead peer is noticed (its
// socket ends) instead of a wait for ever. A byte on the socket after the move is an error.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "crystal/live/clock.h"
#include "shm_segment.h"

namespace crystal::plugin {

// One direction: a single-producer single-consumer byte ring, and the socket part before it.
struct StreamLane {
  alignas(64) std::atomic<std::uint64_t> socket{0};  // bytes the writer sent on the socket
  std::atomic<std::uint32_t> moved{0};               // 1: the rest is in the ring
  alignas(64) std::atomic<std::uint64_t> head{0};    // ring bytes written (the writer's)
  alignas(64) std::atomic<std::uint64_t> tail{0};    // ring bytes read (the reader's)
};

struct StreamPage {
  static constexpr std::uint64_t kMagic = 0x4D52545359524332ull;  // "2CRYSTRM"
  static constexpr std::size_t kRing = 64 << 10;                  // bytes a direction
  std::uint64_t magic = kMagic;
  std::atomic<std::uint32_t> attached{0};
  StreamLane frames;   // sender to receiver
  StreamLane replies;  // receiver to sender
  // The sender's shared-memory frames (ShmData, IpcData; numbered from 1) copied out, through
  // this one: stored by the receiver's GPU writer kernel after its copy (real_comm.h "The
  // GPU's acknowledgement"), so the sender's send completes without a turn of the receiver's
  // proxy. Acknowledgements on the replies lane say the same, later.
  alignas(64) std::atomic<std::uint64_t> gpu_copied{0};
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);

// One side's end of the stream. Not thread-safe: one comm, one proxy thread.
class ShmStream {
 public:
  static constexpr live::TimeNs kLook = 1'000'000;  // ask the socket at least once a ms

  // The sender's page (nullptr with *why where shared memory is unavailable).
  [[nodiscard]] static std::unique_ptr<ShmStream> create(std::string* why);
  // The receiver's end of the sender's page `name` (nullptr with *why: the stream stays on the
  // socket), having read `socket_read` bytes of the socket and written `socket_written`.
  [[nodiscard]] static std::unique_ptr<ShmStream> open(const std::string& name,
                                                       std::uint64_t socket_read,
                                                       std::uint64_t socket_written,
                                                       std::string* why);

  [[nodiscard]] const std::string& name() const { return shm_->name(); }
  // Up to n bytes to the peer: on `fd` until this side's direction moved, then into the ring.
  // Returns the bytes taken (0: no room now). Throws Remote when the peer's socket ended.
  [[nodiscard]] std::size_t write(int fd, const void* p, std::size_t n);
  // Up to n bytes from the peer (0: none now). Throws Remote when the peer's socket ended or
  // carried bytes after the move.
  [[nodiscard]] std::size_t read(int fd, void* p, std::size_t n);
  // The page's gpu_copied word (StreamPage), and the page itself (the receiver registers it
  // for its GPU writer's stores).
  [[nodiscard]] std::uint64_t gpuCopied() const {
    return page_->gpu_copied.load(std::memory_order_acquire);
  }
  [[nodiscard]] std::atomic<std::uint64_t>& gpuCopiedWord() const { return page_->gpu_copied; }
  [[nodiscard]] std::byte* pageData() const { return shm_->data(); }
  [[nodiscard]] std::size_t pageSize() const { return shm_->size(); }
  // Whether both directions are in shared memory.
  [[nodiscard]] bool moved() const {
    return out_->moved.load(std::memory_order_relaxed) != 0 &&
           in_->moved.load(std::memory_order_acquire) != 0;
  }

 private:
  ShmStream(std::unique_ptr<ShmSegment> shm, bool sender);
  [[nodiscard]] std::byte* ring(const StreamLane* lane) const;
  // After the move: recv() on the socket at most once per kLook; EOF/reset throw (socket.h).
  void look(int fd);
  std::unique_ptr<ShmSegment> shm_;
  StreamPage* page_;
  bool sender_;
  StreamLane* out_;  // written by this side
  StreamLane* in_;   // read by this side
  std::uint64_t socket_written_ = 0, socket_read_ = 0;
  std::uint64_t head_ = 0, out_tail_ = 0;  // out_: our head, the reader's tail as last seen
  std::uint64_t tail_ = 0, in_head_ = 0;   // in_: our tail, the writer's head as last seen
  live::TimeNs last_look_ = 0;
};

}  // namespace crystal::plugin
