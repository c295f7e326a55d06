#include "plugin/interpose/rank_map.h"

#include <atomic>
#include <charconv>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>

#include "crystal/base/error.h"
#include "plugin/interpose/host_session.h"

namespace crystal::interpose {
namespace {

int parseInt(std::string_view text, std::string_view what) {
  int v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size())
    throw InputError(std::string(kEnvRankMap) + ": " + std::string(what) + " '" +
                     std::string(text) + "' is not an integer");
  return v;
}

struct Registry {
  std::mutex mu;
  std::map<NcclComm, MappedComm> comms;
  std::atomic<bool> any{false};  // lets unmapped programs skip the lock on every call
};
Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: NCCL calls may come during exit
  return *r;
}

}  // namespace

RankMap parseRankMap(std::string_view text) {
  const std::size_t colon = text.find(':');
  if (colon == std::string_view::npos)
    throw InputError(std::string(kEnvRankMap) + "='" + std::string(text) +
                     "': expected N:r0,r1,... (target ranks, then the real ranks in program "
                     "rank order)");
  RankMap m;
  m.target_nranks = parseInt(text.substr(0, colon), "target size");
  if (m.target_nranks < 1)
    throw InputError(std::string(kEnvRankMap) + ": target size must be at least 1");
  std::string_view list = text.substr(colon + 1);
  std::set<int> seen;
  while (true) {
    const std::size_t comma = list.find(',');
    const int r = parseInt(list.substr(0, comma), "real rank");
    if (r < 0 || r >= m.target_nranks)
      throw InputError(std::string(kEnvRankMap) + ": real rank " + std::to_string(r) +
                       " is outside 0.." + std::to_string(m.target_nranks - 1));
    if (!seen.insert(r).second)
      throw InputError(std::string(kEnvRankMap) + ": real rank " + std::to_string(r) +
                       " is listed twice");
    m.real_ranks.push_back(r);
    if (comma == std::string_view::npos) break;
    list = list.substr(comma + 1);
  }
  return m;
}

int mapInitArgs(int nranks, int rank, InitArgs& out, const char* caller) noexcept {
  out = InitArgs{nranks, rank, std::nullopt};
  const char* env = std::getenv(kEnvRankMap);
  if (env == nullptr || *env == '\0') return kNcclSuccess;
  try {
    // Parsed at each creation (rare): a launcher may set the variable per process.
    const RankMap map = parseRankMap(env);
    const int k = static_cast<int>(map.real_ranks.size());
    if (nranks != k || nranks == map.target_nranks) return kNcclSuccess;
    if (rank < 0 || rank >= k)
      return reportError(caller,
                         "rank " + std::to_string(rank) + " of a " + std::to_string(k) +
                             "-rank communicator has no entry in " + kEnvRankMap,
                         kNcclInvalidUsage);
    const int target_rank = map.real_ranks[static_cast<std::size_t>(rank)];
    out.nranks = map.target_nranks;
    out.rank = target_rank;
    out.mapped = MappedComm{k, rank, map.target_nranks, target_rank,
                            std::make_shared<const std::vector<int>>(map.real_ranks)};
    return kNcclSuccess;
  } catch (const std::exception& e) {
    return reportError(caller, e.what(), kNcclInvalidUsage);
  }
}

void rememberMapped(NcclComm comm, const MappedComm& m) noexcept {
  try {
    Registry& r = registry();
    std::lock_guard lock(r.mu);
    r.comms[comm] = m;
    r.any.store(true, std::memory_order_release);
  } catch (...) {
    // Out of memory: the comm then answers with NCCL's own (target) view.
  }
}

void forgetMapped(NcclComm comm) noexcept {
  Registry& r = registry();
  if (!r.any.load(std::memory_order_acquire)) return;
  std::lock_guard lock(r.mu);
  r.comms.erase(comm);
}

std::optional<MappedComm> findMapped(NcclComm comm) noexcept {
  Registry& r = registry();
  if (!r.any.load(std::memory_order_acquire)) return std::nullopt;
  try {
    std::lock_guard lock(r.mu);
    if (auto it = r.comms.find(comm); it != r.comms.end()) return it->second;
  } catch (...) {
  }
  return std::nullopt;
}

int targetPeer(const MappedComm& m, int peer, bool is_send) noexcept {
  if (peer < 0 || peer >= m.program_nranks) return -1;
  if (peer == m.program_rank && m.target_nranks > 1) {
    const int step = is_send ? 1 : m.target_nranks - 1;
    return (m.target_rank + step) % m.target_nranks;
  }
  return (*m.real_ranks)[static_cast<std::size_t>(peer)];
}

int targetRoot(const MappedComm& m, int root) noexcept {
  if (root < 0 || root >= m.program_nranks) return -1;
  return (*m.real_ranks)[static_cast<std::size_t>(root)];
}

}  // namespace crystal::interpose
