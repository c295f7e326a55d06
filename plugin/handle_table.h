// Opaque tokens NCCL holds for our comms and requests. A token is not a pointer: it names a
// table slot and that slot's generation, so a comm or request used after close is detected
// (ncclInvalidUsage) instead of touching freed memory. Lookup is two loads and a compare.
//   comm token    = gen << 32 | (index + 1)                 bits 20..31 zero
//   request token = gen << 32 | (slot + 1) << 20 | (index + 1)
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "comm.h"

namespace crystal::plugin {

class HandleTable {
 public:
  static constexpr std::uint32_t kCapacity = 1u << 18;

  static HandleTable& instance();

  [[nodiscard]] void* insert(std::unique_ptr<Comm> comm);
  // The live comm named by `token`, or nullptr.
  [[nodiscard]] Comm* find(const void* token) const noexcept;
  // Removes and returns the comm (the caller destroys it after releasing its lock).
  [[nodiscard]] std::unique_ptr<Comm> remove(const void* token);
  [[nodiscard]] std::size_t live() const;

  [[nodiscard]] static void* requestToken(const void* comm_token, int slot) noexcept {
    auto v = reinterpret_cast<std::uintptr_t>(comm_token);
    return reinterpret_cast<void*>(v | (static_cast<std::uintptr_t>(slot + 1) << 20));
  }
  // Splits a request token into its comm token and slot (-1 if it is not a request token).
  [[nodiscard]] static const void* commOfRequest(const void* req, int* slot) noexcept {
    auto v = reinterpret_cast<std::uintptr_t>(req);
    *slot = static_cast<int>((v >> 20) & 0xfff) - 1;
    return reinterpret_cast<const void*>(v & ~(std::uintptr_t{0xfff} << 20));
  }

 private:
  HandleTable();
  struct Slot {
    std::atomic<Comm*> comm{nullptr};
    std::atomic<std::uint32_t> gen{1};
  };
  std::unique_ptr<Slot[]> slots_;
  mutable std::mutex mu_;
  std::vector<std::uint32_t> free_;
  std::uint32_t next_ = 0;
  std::size_t live_ = 0;
};

}  // namespace crystal::plugin
