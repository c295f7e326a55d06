#include "nccl_hash.h"

#include <cstring>

#include "crystal/host/bootstrap_host.h"

namespace crystal::host {

void NcclHash::eat(std::span<const std::byte> bytes) noexcept {
  acc0_ ^= bytes.size();
  std::size_t off = 0;
  while (off < bytes.size()) {
    acc0_ += acc1_;
    acc1_ ^= acc0_;
    acc0_ ^= acc0_ >> 31;
    acc0_ *= 0x9de62bbc8cef3ce3ULL;
    acc1_ ^= acc1_ >> 32;
    acc1_ *= 0x485cd6311b599e79ULL;
    const std::size_t chunk = bytes.size() - off < 8 ? bytes.size() - off : 8;
    std::uint64_t x = 0;  // last chunk zero-padded (little-endian load)
    std::memcpy(&x, bytes.data() + off, chunk);
    off += chunk;
    acc0_ += x;
  }
}

std::uint64_t NcclHash::digest() const noexcept {
  std::uint64_t h = acc0_;
  h ^= h >> 31;
  h *= 0xbac3bd562846de6bULL;
  h += acc1_;
  h ^= h >> 32;
  h *= 0x995a187a14e7b445ULL;
  return h;
}

std::uint64_t ncclGetHash(std::span<const std::byte> bytes) noexcept {
  NcclHash h;
  h.eat(bytes);
  return h.digest();
}

std::uint64_t commHashOf(const UniqueId& id) noexcept { return ncclGetHash(id.bytes); }

std::uint64_t splitCommHash(std::uint64_t parent_hash, int split_count, int color) noexcept {
  NcclHash h;  // init.cc: eatHash(parent commHash), eatHash(splitCount), eatHash(color)
  h.eatValue(parent_hash);
  h.eatValue(split_count);
  h.eatValue(color);
  return h.digest();
}

}  // namespace crystal::host
