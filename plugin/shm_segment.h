// POSIX shared memory for real<->real bytes between two processes of one machine
// (real_comm.h "Shared memory"). The sender creates one segment per registered region, its
// pinned twin; the receiver maps it by name and unlinks the name at once, so nothing is left
// in /dev/shm once both sides hold the mapping. Failing to create or open one is normal (peer
// on another machine, another user, a small /dev/shm): the callers fall back to TCP, so
// these return a reason instead of throwing.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace crystal::plugin {

class ShmSegment {
 public:
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;
  ~ShmSegment();  // unmaps; the creator also unlinks the name if it is still there

  // A new segment of `bytes` (whole pages), named "/crystal-<pid>-<64 random bits>". Its
  // pages are reserved up front (posix_fallocate): a /dev/shm too small for it fails here with
  // ENOSPC instead of as SIGBUS on first touch inside the training job.
  [[nodiscard]] static std::unique_ptr<ShmSegment> create(std::size_t bytes, std::string* why);
  // Maps the segment `name` another process created (at least `bytes` long) and unlinks it.
  // Only names of create()'s form are opened (a peer's offer is input).
  [[nodiscard]] static std::unique_ptr<ShmSegment> open(const std::string& name, std::size_t bytes,
                                                        std::string* why);

  // Segments of processes that died before their peer mapped them (SIGKILL, a crash) stay in
  // /dev/shm: the first create() of each process removes every "crystal-<pid>-<16 hex>" whose
  // pid is gone. A pid of another pid namespace sharing this /dev/shm may look gone: its offer
  // is then refused and its bytes go over TCP, nothing worse.
  static void sweepStale();

  [[nodiscard]] std::byte* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  void unlink() noexcept;  // removes the name (idempotent; the mapping stays)

 private:
  ShmSegment(std::string name, std::byte* data, std::size_t size, bool owner)
      : name_(std::move(name)), data_(data), size_(size), linked_(owner) {}
  std::string name_;
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  bool linked_ = false;  // the creator's name is still in /dev/shm
};

}  // namespace crystal::plugin
