// Byte counters in shared memory that let the two proxies of a real<->real connection on one
// machine skip their socket when nothing is in it (real_comm.h "Doorbells").
//
// Measured (2026-12-05, two real ranks on one H100 under MPS): NCCL's proxy thread spent 81 %
// of its active time inside the plugin, 833 ns a call, ~570 ns of it outside the CUDA driver:
// the recv() of every test() that found the socket empty. The sender owns one page per
// connection (a ShmSegment, offered as the stream's first frame): `frames` is the count of
// bytes it has written to the socket, `replies` the receiver's, `attached` set once the
// receiver mapped the page. A reader whose count of bytes read equals the writer's knows the
// socket holds nothing for it and skips the call; it still asks the socket once a millisecond
// (kLook), which is how a closed or dead peer is noticed.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "crystal/live/clock.h"
#include "shm_segment.h"

namespace crystal::plugin {

struct DoorbellPage {
  static constexpr std::uint64_t kMagic = 0x4C4C45424B595243ull;  // "CRYKBELL"
  std::uint64_t magic = kMagic;
  std::atomic<std::uint32_t> attached{0};
  alignas(64) std::atomic<std::uint64_t> frames{0};
  alignas(64) std::atomic<std::uint64_t> replies{0};
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

// One side's view: the count it publishes and the count it reads against.
class Doorbell {
 public:
  static constexpr live::TimeNs kLook = 1'000'000;  // ask the socket at least once a ms

  // The sender's page (nullptr with *why where shared memory is unavailable).
  [[nodiscard]] static std::unique_ptr<Doorbell> create(std::string* why);
  // The receiver's view of the sender's page `name` (nullptr with *why: then no doorbells),
  // having read `read` bytes of the stream and written `written` so far.
  [[nodiscard]] static std::unique_ptr<Doorbell> open(const std::string& name, std::uint64_t read,
                                                      std::uint64_t written, std::string* why);

  [[nodiscard]] const std::string& name() const { return shm_->name(); }
  // Bytes this side wrote to the socket so far.
  void wrote(std::size_t n) {
    written_ += n;
    out_->store(written_, std::memory_order_release);
  }
  // Whether a recv() may find bytes: the peer's count is ahead of ours, the peer has not
  // attached (the sender before the receiver mapped the page), or kLook has passed.
  [[nodiscard]] bool worthReading() {
    if (!page_->attached.load(std::memory_order_acquire) ||
        in_->load(std::memory_order_acquire) != read_)
      return true;
    const live::TimeNs now = live::nowNs();
    if (now - last_look_ < kLook) return false;
    last_look_ = now;
    return true;
  }
  void read(std::size_t n) { read_ += n; }

 private:
  Doorbell(std::unique_ptr<ShmSegment> shm, bool sender);
  std::unique_ptr<ShmSegment> shm_;
  DoorbellPage* page_;
  std::atomic<std::uint64_t>* out_;
  std::atomic<std::uint64_t>* in_;
  std::uint64_t written_ = 0, read_ = 0;
  live::TimeNs last_look_ = 0;
};

}  // namespace crystal::plugin
