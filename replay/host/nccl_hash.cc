#include "nccl_hash.h"

#include "crystal/host/bootstrap_host.h"

namespace crystal::host {

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
