#include "virtual_ranks.h"

#include <fmt/core.h>

#include <algorithm>
#include <charconv>

#include "crystal/base/error.h"

namespace crystal::store {

namespace {

// Key prefixes as a 2.11 client puts them on the wire: the client's "/" + PrefixStore
// "default_pg" + the default group's PrefixStore "0/" + the backend's "cuda/" (each
// PrefixStore joins with "/"). docs/store.md §Keys.
constexpr std::string_view kWorldIdPrefix = "/default_pg/0//cuda//";
constexpr std::string_view kSubgroupPrefix = "/default_pg/0//";
constexpr std::string_view kIdDevice = "//cuda//";
constexpr std::string_view kWorldBarrier = "/default_pg/store_based_barrier_key:0";
constexpr std::string_view kBarrierMark = "store_based_barrier_key:";
constexpr std::string_view kLastWorker = ":last_worker";
constexpr std::string_view kScalable = "UniqueNCCLID:";

std::optional<int> decimal(std::string_view s) {
  int v = 0;
  if (s.empty() || s.size() > 9) return std::nullopt;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < 0) return std::nullopt;
  return v;
}

// The part after the device prefix: "<n>" (n-th communicator of the group, written by group
// rank 0), "UniqueNCCLID:<i>" (root i of scalable init), "<lo>:<hi>" (lazy 2-rank p2p
// communicator, written by lo). Returns the writer as a *group* rank, or nullopt if the
// suffix is none of these.
struct IdSuffix {
  enum Kind { Counter, Scalable, P2p } kind;
  int a = 0, b = 0;
};
std::optional<IdSuffix> parseIdSuffix(std::string_view s) {
  if (s.starts_with(kScalable)) {
    if (auto i = decimal(s.substr(kScalable.size()))) return IdSuffix{IdSuffix::Scalable, *i};
    return std::nullopt;
  }
  if (const auto colon = s.find(':'); colon != std::string_view::npos) {
    const auto lo = decimal(s.substr(0, colon)), hi = decimal(s.substr(colon + 1));
    if (lo && hi && *lo < *hi) return IdSuffix{IdSuffix::P2p, *lo, *hi};
    return std::nullopt;
  }
  if (auto n = decimal(s)) return IdSuffix{IdSuffix::Counter, *n};
  return std::nullopt;
}

}  // namespace

VirtualRanks::VirtualRanks(JobView job) : job_(std::move(job)) {
  if (job_.world_size < 1)
    throw InputError(fmt::format("store: world size {} < 1", job_.world_size));
  if (job_.ranks_per_root < 1)
    throw InputError(fmt::format("store: TORCH_NCCL_RANKS_PER_ROOT {} < 1", job_.ranks_per_root));
  real_.assign(static_cast<std::size_t>(job_.world_size), false);
  for (int r : job_.real_ranks) {
    if (r < 0 || r >= job_.world_size)
      throw InputError(
          fmt::format("store: real rank {} outside the world of {}", r, job_.world_size));
    if (real_[static_cast<std::size_t>(r)])
      throw InputError(fmt::format("store: real rank {} listed twice", r));
    real_[static_cast<std::size_t>(r)] = true;
  }
}

bool VirtualRanks::isReal(int rank) const noexcept {
  return rank >= 0 && rank < job_.world_size && real_[static_cast<std::size_t>(rank)];
}

std::vector<std::pair<std::string, std::string>> VirtualRanks::initialKeys() const {
  return {{"init/", std::to_string(virtualCount())}};
}

std::optional<std::int64_t> VirtualRanks::virtualAdds(std::string_view key) const {
  if (key == kWorldBarrier) return virtualCount();
  return std::nullopt;
}

int VirtualRanks::rootRank(int index, int size, int ranks_per_root) {
  const int roots = (size + ranks_per_root - 1) / ranks_per_root;
  const int per = size / roots, extra = size % roots;  // the first `extra` roots hold per+1
  return index < extra ? index * (per + 1) : extra * (per + 1) + (index - extra) * per;
}

KeyClass VirtualRanks::classify(std::string_view key) const {
  if (key.ends_with(kLastWorker) && key.find(kBarrierMark) != std::string_view::npos)
    return {KeyRole::BarrierRelease, -1, "store-based barrier release"};
  if (key.starts_with(kWorldIdPrefix)) {
    const auto suffix = parseIdSuffix(key.substr(kWorldIdPrefix.size()));
    if (!suffix) return {};
    switch (suffix->kind) {
      case IdSuffix::Counter:
        return {KeyRole::UniqueId, 0, "ncclUniqueId of the default process group"};
      case IdSuffix::Scalable: {
        const int roots = (job_.world_size + job_.ranks_per_root - 1) / job_.ranks_per_root;
        if (suffix->a >= roots) return {};
        return {KeyRole::UniqueId, rootRank(suffix->a, job_.world_size, job_.ranks_per_root),
                fmt::format("ncclUniqueId of root {} of the default process group", suffix->a)};
      }
      case IdSuffix::P2p:
        if (suffix->b >= job_.world_size) return {};
        return {KeyRole::UniqueId, suffix->a,
                fmt::format("ncclUniqueId of the p2p pair {}:{}", suffix->a, suffix->b)};
    }
  }
  // A subgroup's id: "/default_pg/0//<group name>//cuda//<suffix>".
  if (key.starts_with(kSubgroupPrefix)) {
    const auto dev = key.rfind(kIdDevice);
    if (dev != std::string_view::npos && dev > kSubgroupPrefix.size() &&
        parseIdSuffix(key.substr(dev + kIdDevice.size())))
      return {KeyRole::UniqueId, -1,
              fmt::format("ncclUniqueId of process group '{}'",
                          key.substr(kSubgroupPrefix.size(), dev - kSubgroupPrefix.size()))};
  }
  return {};
}

}  // namespace crystal::store
