#include "crystal/control/split_rules.h"

#include <cstdlib>

#include "crystal/base/error.h"

namespace crystal::control {

std::vector<SplitRule> parseSplitRules(std::string_view text) {
  std::vector<SplitRule> out;
  std::size_t pos = 0;
  while (pos <= text.size() && !text.empty()) {
    const std::size_t comma = text.find(',', pos);
    const std::string item(
        text.substr(pos, comma == std::string_view::npos ? text.npos : comma - pos));
    SplitRule r;
    const auto colon = item.find(':');
    const std::string kind = item.substr(0, colon);
    if (kind == "same" || kind == "none") {
      if (colon != std::string::npos)
        throw InputError("split rule '" + item + "': '" + kind + "' takes no size");
      r.kind = kind == "same" ? SplitRule::Kind::Same : SplitRule::Kind::None;
    } else if (kind == "block" || kind == "stride") {
      r.kind = kind == "block" ? SplitRule::Kind::Block : SplitRule::Kind::Stride;
      const std::string n = colon == std::string::npos ? "" : item.substr(colon + 1);
      char* end = nullptr;
      const long v = std::strtol(n.c_str(), &end, 10);
      if (n.empty() || *end != '\0' || v < 1 || v > (1 << 24))
        throw InputError("split rule '" + item + "': size must be an integer >= 1 (e.g. " + kind +
                         ":8)");
      r.n = static_cast<int>(v);
    } else {
      throw InputError("split rule '" + item +
                       "': expected block:N, stride:N, same or none (--split)");
    }
    out.push_back(r);
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return out;
}

void SplitPlanner::recordReal(std::uint64_t parent_hash, int split_index, RealSplitChoice c) {
  auto& v = real_[{parent_hash, split_index}];
  for (auto& old : v)
    if (old.parent_rank == c.parent_rank) {
      old = c;
      return;
    }
  v.push_back(c);
}

SplitRule SplitPlanner::ruleFor(std::uint64_t parent_hash, int split_index) const {
  const bool root = root_comms_.count(parent_hash) != 0;
  if (root && split_index >= 1 && static_cast<std::size_t>(split_index) <= rules_.size())
    return rules_[static_cast<std::size_t>(split_index - 1)];
  return SplitRule{};
}

long SplitPlanner::groupOf(const SplitRule& r, int rank) {
  switch (r.kind) {
    case SplitRule::Kind::Block:
      return rank / r.n;
    case SplitRule::Kind::Stride:
      return rank % r.n;
    case SplitRule::Kind::Same:
      return 0;
    case SplitRule::Kind::None:
      return -1;
  }
  return -1;
}

SplitPlanner::Choice SplitPlanner::choose(std::uint64_t parent_hash, int split_index,
                                          int parent_rank) const {
  const SplitRule rule = ruleFor(parent_hash, split_index);
  if (rule.kind == SplitRule::Kind::None) return {-1, 0};
  const long group = groupOf(rule, parent_rank);
  static const std::vector<RealSplitChoice> kNone;
  auto it = real_.find({parent_hash, split_index});
  const auto& reals = it == real_.end() ? kNone : it->second;
  // A real rank in the same group fixes color and key convention.
  for (const auto& r : reals) {
    if (groupOf(rule, r.parent_rank) != group) continue;
    if (r.color < 0) return {-1, 0};
    return {r.color, r.key == r.parent_rank ? parent_rank : r.key};
  }
  // No real member: any color that no real rank's group uses, distinct per group.
  long color = group;
  for (bool clash = true; clash;) {
    clash = false;
    for (const auto& r : reals)
      if (r.color == color) {
        clash = true;
        color += 1L << 20;
      }
  }
  return {static_cast<int>(color), parent_rank};
}

}  // namespace crystal::control
