// NCCL's 64-bit hash (include/bitops.h eatHash/digestHash/getHash in 2.28.9), which names a
// communicator (commHash = v11 plugin commId) and the magic of split children. The mixing
// itself lives once, in include/crystal/control/comm_hash.h (header-only, so the interposer
// shares it without linking the host); this is the host's std::byte front end.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "crystal/control/comm_hash.h"

namespace crystal::host {

class NcclHash {
 public:
  // One eatHash() call: the hash depends on how input is split into calls.
  void eat(std::span<const std::byte> bytes) noexcept {
    impl_.eat({reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()});
  }
  template <typename T>
  void eatValue(const T& v) noexcept {
    eat(std::as_bytes(std::span<const T, 1>(&v, 1)));
  }
  [[nodiscard]] std::uint64_t digest() const noexcept { return impl_.digest(); }

 private:
  control::NcclHash impl_;
};

[[nodiscard]] std::uint64_t ncclGetHash(std::span<const std::byte> bytes) noexcept;

}  // namespace crystal::host
