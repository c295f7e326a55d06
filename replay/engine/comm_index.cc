// Per-communicator facts for the engine, computed lazily and cached.
#include "comm_index.h"

#include <fmt/format.h>

#include <algorithm>

#include "crystal/base/error.h"

namespace crystal::replay::detail {

CommIndex::CommIndex(const graph::Graph& g, ReplayMode mode)
    : graph_(g), mode_(mode), gpus_per_node_(std::max(1, g.config().cluster.gpus_per_node)) {}

std::int32_t CommIndex::intern(std::string_view family) {
  for (std::size_t i = 0; i < families_.size(); ++i)
    if (families_[i] == family) return static_cast<std::int32_t>(i);
  families_.push_back(family);
  return static_cast<std::int32_t>(families_.size() - 1);
}

const CommView& CommIndex::view(std::int32_t comm, std::int32_t rank) {
  if (auto it = views_.find(comm); it != views_.end()) return it->second;
  const graph::CommTable& table = graph_.comms();
  if (comm < 0 || comm >= table.count())
    throw InputError(
        fmt::format("graph: rank {} uses communicator {}, which does not exist "
                    "({} communicators)",
                    rank, comm, table.count()));
  const graph::CommInfo info = table.info(comm);
  CommView v;
  v.family = intern(info.family);
  v.sync_key = mode_ == ReplayMode::Naive ? comm : v.family;
  v.size = info.size;
  // Members per node: one pass over the members (once per communicator).
  std::unordered_map<std::int32_t, int> per_node;
  v.member_units.reserve(mode_ == ReplayMode::Naive ? static_cast<std::size_t>(info.size) : 8);
  for (std::int32_t i = 0; i < info.size; ++i) {
    const std::int32_t r = table.member(comm, i);
    ++per_node[nodeOf(r)];
    v.member_units.push_back(unitOf(r));
  }
  std::sort(v.member_units.begin(), v.member_units.end());
  v.member_units.erase(std::unique(v.member_units.begin(), v.member_units.end()),
                       v.member_units.end());
  int most = 0;
  for (const auto& [node, n] : per_node) most = std::max(most, n);
  v.shape = model::CommShape{info.size, static_cast<int>(per_node.size()), most};
  return views_.emplace(comm, std::move(v)).first->second;
}

}  // namespace crystal::replay::detail
