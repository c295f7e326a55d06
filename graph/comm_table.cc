#include "graph/comm_table.h"

#include <algorithm>

#include <fmt/core.h>

#include "crystal/base/error.h"

namespace crystal::graph {

LayoutCommTable::LayoutCommTable(const Layout& layout,
                                 const std::vector<ExplicitComm>& explicit_comms)
    : layout_(layout) {
  Family world{"world", kAllDims, true, 0, 1, layout.world(), -1};
  families_.push_back(world);
  total_ = 1;
  const bool ep = layout.size(kEp) > 1, edp = layout.size(kEdp) > 1;
  if (layout.size(kTp) > 1) addLayoutFamily("tp", bit(kTp));
  if (layout.size(kCp) > 1) addLayoutFamily("cp", bit(kCp));
  if (ep) addLayoutFamily("ep", bit(kEp));
  if (ep || edp) addLayoutFamily("dp", bit(kEp) | bit(kEdp));
  // Expert-data-parallel: replicas of one expert shard (expert gradients sync here).
  if (ep && edp) addLayoutFamily("edp", bit(kEdp));
  if (layout.size(kPp) > 1) addLayoutFamily("pp", bit(kPp));
  if (layout.size(kCp) > 1 && (ep || edp)) addLayoutFamily("dp-cp", bit(kCp) | bit(kEp) | bit(kEdp));

  for (std::size_t i = 0; i < explicit_comms.size(); ++i) {
    const auto& ec = explicit_comms[i];
    Explicit e;
    e.ranks.assign(ec.ranks.begin(), ec.ranks.end());
    for (std::size_t k = 0; k < e.ranks.size(); ++k)
      e.index.emplace(e.ranks[k], static_cast<std::int32_t>(k));
    explicit_.push_back(std::move(e));
    const std::int32_t f = familyIndex(ec.name);
    if (f >= 0 && families_[static_cast<std::size_t>(f)].dims != 0)
      throw InputError(fmt::format("'job.comms[{}].name' = '{}' is a layout family name", i, ec.name));
    if (f >= 0) {
      // Comms of one explicit family are contiguous only if listed together.
      auto& fam = families_[static_cast<std::size_t>(f)];
      if (fam.first + fam.count != total_)
        throw InputError(fmt::format("'job.comms[{}]': comms named '{}' must be listed together",
                                     i, ec.name));
      ++fam.count;
    } else {
      families_.push_back(Family{ec.name, 0, false, total_, 1,
                                 static_cast<std::int32_t>(ec.ranks.size()),
                                 static_cast<std::int32_t>(i)});
    }
    ++total_;
  }
}

void LayoutCommTable::addLayoutFamily(std::string name, DimMask dims) {
  const int size = layout_.extent(dims);
  const int count = layout_.world() / size;
  families_.push_back(Family{std::move(name), dims, false, total_, count, size, -1});
  total_ += count;
}

std::int32_t LayoutCommTable::familyIndex(std::string_view name) const {
  for (std::size_t f = 0; f < families_.size(); ++f)
    if (families_[f].name == name) return static_cast<std::int32_t>(f);
  return -1;
}

std::int32_t LayoutCommTable::familyOf(std::int32_t comm) const {
  if (comm < 0 || comm >= total_) return -1;
  // Few families: a linear scan beats a search structure.
  for (std::size_t f = families_.size(); f-- > 0;)
    if (comm >= families_[f].first) return static_cast<std::int32_t>(f);
  return -1;
}

CommInfo LayoutCommTable::info(std::int32_t comm) const {
  const std::int32_t f = familyOf(comm);
  if (f < 0) return CommInfo{};
  const Family& fam = families_[static_cast<std::size_t>(f)];
  std::int32_t size = fam.size;
  if (fam.dims == 0)
    size = static_cast<std::int32_t>(
        explicit_[static_cast<std::size_t>(fam.first_explicit + comm - fam.first)].ranks.size());
  return CommInfo{comm, fam.name, size};
}

std::int32_t LayoutCommTable::member(std::int32_t comm, std::int32_t index) const {
  const std::int32_t f = familyOf(comm);
  if (f < 0) return -1;
  const Family& fam = families_[static_cast<std::size_t>(f)];
  const std::int32_t local = comm - fam.first;
  if (fam.dims == 0) {
    const auto& ranks = explicit_[static_cast<std::size_t>(fam.first_explicit + local)].ranks;
    return index >= 0 && index < static_cast<std::int32_t>(ranks.size())
               ? ranks[static_cast<std::size_t>(index)]
               : -1;
  }
  if (index < 0 || index >= fam.size) return -1;
  if (fam.world) return index;
  const DimMask rest = kAllDims & ~fam.dims;
  return layout_.offsetOf(local, rest) + layout_.offsetOf(index, fam.dims);
}

std::int32_t LayoutCommTable::indexOf(std::int32_t comm, std::int32_t rank) const {
  if (rank < 0 || rank >= layout_.world()) return -1;
  const std::int32_t f = familyOf(comm);
  if (f < 0) return -1;
  const Family& fam = families_[static_cast<std::size_t>(f)];
  const std::int32_t local = comm - fam.first;
  if (fam.dims == 0) {
    const auto& e = explicit_[static_cast<std::size_t>(fam.first_explicit + local)];
    auto it = e.index.find(rank);
    return it == e.index.end() ? -1 : it->second;
  }
  if (fam.world) return rank;
  if (layout_.subIndex(rank, kAllDims & ~fam.dims) != local) return -1;
  return layout_.subIndex(rank, fam.dims);
}

std::int32_t LayoutCommTable::commOfFamily(std::int32_t f, std::int32_t rank) const {
  if (f < 0 || f >= static_cast<std::int32_t>(families_.size())) return -1;
  if (rank < 0 || rank >= layout_.world()) return -1;
  const Family& fam = families_[static_cast<std::size_t>(f)];
  if (fam.dims == 0) {
    for (std::int32_t c = 0; c < fam.count; ++c)
      if (explicit_[static_cast<std::size_t>(fam.first_explicit + c)].index.contains(rank))
        return fam.first + c;
    return -1;
  }
  if (fam.world) return fam.first;
  return fam.first + layout_.subIndex(rank, kAllDims & ~fam.dims);
}

std::int32_t LayoutCommTable::commOf(std::string_view family, std::int32_t rank) const {
  return commOfFamily(familyIndex(family), rank);
}

}  // namespace crystal::graph
