// NCCL 2.28's communicator hash (commHash), recomputed so that the interposer and the host
// name a communicator exactly as NCCL does: it is the v11 net plugin's commId and, for split
// children, the magic of the child's bootstrap sockets. Algorithm as documented in
// research/nccl-2.28.9-virtual-peers.md §1.1 (include/bitops.h of 2.28.9); re-check on any
// other NCCL version.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace crystal::control {

class NcclHash {
 public:
  // One "eat" = one field: its size is folded in first, then its bytes by 8-byte chunks
  // (little-endian, last chunk zero-padded).
  void eat(std::span<const std::uint8_t> bytes) {
    acc0_ ^= bytes.size();
    std::size_t off = 0;
    while (off < bytes.size()) {
      acc0_ += acc1_;
      acc1_ ^= acc0_;
      acc0_ ^= acc0_ >> 31;
      acc0_ *= 0x9de62bbc8cef3ce3ull;
      acc1_ ^= acc1_ >> 32;
      acc1_ *= 0x485cd6311b599e79ull;
      const std::size_t n = bytes.size() - off < 8 ? bytes.size() - off : 8;
      std::uint64_t x = 0;
      std::memcpy(&x, bytes.data() + off, n);
      off += n;
      acc0_ += x;
    }
  }
  template <typename T>
  void eatValue(const T& v) {
    eat(std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(&v), sizeof v));
  }
  [[nodiscard]] std::uint64_t digest() const {
    std::uint64_t h = acc0_;
    h ^= h >> 31;
    h *= 0xbac3bd562846de6bull;
    h += acc1_;
    h ^= h >> 32;
    h *= 0x995a187a14e7b445ull;
    return h;
  }

 private:
  std::uint64_t acc0_ = 1;
  std::uint64_t acc1_ = 1;
};

// commHash of a communicator created from a unique id (all 128 bytes, padding included).
[[nodiscard]] inline std::uint64_t commHashOfId(std::span<const std::uint8_t> id128) {
  NcclHash h;
  h.eat(id128);
  return h.digest();
}

// commHash of a split child: parent hash, the parent's splitCount after this split (1 for
// the first split of that parent, counted on every rank, NOCOLOR ranks included) and color.
[[nodiscard]] inline std::uint64_t commHashOfSplit(std::uint64_t parent_hash, int split_count,
                                                   int color) {
  NcclHash h;
  h.eatValue(parent_hash);
  h.eatValue(split_count);
  h.eatValue(color);
  return h.digest();
}

}  // namespace crystal::control
