// NCCL's 64-bit hash (include/bitops.h eatHash/digestHash/getHash in 2.28.9), which names a
// communicator (commHash = v11 plugin commId) and the magic of split children. Re-implemented
// from its description; tests pin it on known values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace crystal::host {

class NcclHash {
 public:
  // One eatHash() call: the hash depends on how input is split into calls.
  void eat(std::span<const std::byte> bytes) noexcept;
  template <typename T>
  void eatValue(const T& v) noexcept {
    eat(std::as_bytes(std::span<const T, 1>(&v, 1)));
  }
  [[nodiscard]] std::uint64_t digest() const noexcept;

 private:
  std::uint64_t acc0_ = 1, acc1_ = 1;
};

[[nodiscard]] std::uint64_t ncclGetHash(std::span<const std::byte> bytes) noexcept;

}  // namespace crystal::host
