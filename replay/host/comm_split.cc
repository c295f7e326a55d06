// ncclCommSplit (init.cc commGetSplitInfo, bootstrap.cc bootstrapSplit) seen from the parent:
// an 8-byte {key, color} all-gather over the parent ring, then every child member sends its
// child ring address to its child-prev with TAG_COMMSPLIT over the parent's P2P sockets and
// waits for the one of its child-next. Children's magic is their comm hash.
#include <fmt/core.h>

#include <algorithm>

#include "comm.h"
#include "crystal/base/error.h"
#include "crystal/base/log.h"
#include "net.h"

namespace crystal::host {

void Comm::onSplitAllGather(AllGather& ag) {
  SplitRecord rec;
  rec.index = ++split_count_;  // every parent rank increments, NOCOLOR ones too
  rec.ag_index = ag.index;
  rec.infos.resize(static_cast<std::size_t>(nranks_));
  for (int r = 0; r < nranks_; ++r)
    rec.infos[static_cast<std::size_t>(r)] = wire::decodeExact<wire::SplitInfo>(
        std::span(ag.data).subspan(static_cast<std::size_t>(r) * sizeof(wire::SplitInfo),
                                   sizeof(wire::SplitInfo)),
        "commSplitInfo");
  // Child order: by key, ties in parent rank order (commGetSplitInfo's insertion).
  for (int r = 0; r < nranks_; ++r) {
    const auto& si = rec.infos[static_cast<std::size_t>(r)];
    if (si.color == kSplitNoColor) continue;
    if (si.color < 0) {
      fail(isReal(r) ? r : -1, fmt::format("split color {} of rank {} is negative", si.color, r));
      return;
    }
    rec.members[si.color].push_back(r);
  }
  for (auto& [color, members] : rec.members)
    std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
      return rec.infos[static_cast<std::size_t>(a)].key <
             rec.infos[static_cast<std::size_t>(b)].key;
    });
  rec.computed = true;
  for (auto& [color, members] : rec.members) {
    std::vector<int> real_children;
    for (std::size_t c = 0; c < members.size(); ++c)
      if (isReal(members[c])) real_children.push_back(static_cast<int>(c));
    if (real_children.empty()) continue;  // nobody real will ever talk to this child
    const std::uint64_t child_hash = splitCommHash(hash_, rec.index, color);
    Comm* child = ctx_.create_child(child_hash, static_cast<int>(members.size()), real_children,
                                    fmt::format("{}/split{}.color{}", name_, rec.index, color));
    child->setParent(hash_);
    std::vector<int> nodes;
    for (int m : members) nodes.push_back(nodeOf(m));
    child->setNodes(std::move(nodes));
    for (int c : real_children)
      if (const std::string* f = graphFile(members[static_cast<std::size_t>(c)]))
        child->setGraphFile(c, *f);
    rec.children[color] = child;
    CRYSTAL_INFO("comm {}: split #{} color {} -> {} ranks ({} real), hash {:#x}", name_, rec.index,
                 color, members.size(), real_children.size(), child_hash);
    // Real members whose child-next is virtual wait for that rank's child ring address.
    const int cn = static_cast<int>(members.size());
    for (int c : real_children) {
      const int next_parent = members[static_cast<std::size_t>((c + 1) % cn)];
      if (isReal(next_parent)) continue;
      const auto info = wire::RingConnectInfo::fromAddr(aliasAddress((c + 1) % cn, ctx_.ring_port));
      const auto bytes = wire::bytesOf(info);
      reply(members[static_cast<std::size_t>(c)], next_parent, wire::kTagCommSplit,
            std::vector<std::byte>(bytes.begin(), bytes.end()));
    }
  }
  splits_.push_back(std::move(rec));
  auto pending = std::move(pending_split_msgs_);
  pending_split_msgs_.clear();
  for (auto& [sender, target, payload] : pending) onSplitRingInfo(sender, target, payload);
}

void Comm::onSplitRingInfo(int sender, int target, std::span<const std::byte> payload) {
  const auto info = wire::decodeExact<wire::RingConnectInfo>(payload, "TAG_COMMSPLIT ring info");
  for (auto& rec : splits_) {
    const auto& si = rec.infos[static_cast<std::size_t>(sender)];
    if (si.color == kSplitNoColor || rec.ring_info_seen.count(sender) != 0) continue;
    deliverSplitRingInfo(rec, sender, target, info);
    return;
  }
  // The split all-gather has not completed at the host yet.
  pending_split_msgs_.emplace_back(sender, target,
                                   std::vector<std::byte>(payload.begin(), payload.end()));
}

void Comm::deliverSplitRingInfo(SplitRecord& rec, int sender, int target,
                                const wire::RingConnectInfo& info) {
  const int color = rec.infos[static_cast<std::size_t>(sender)].color;
  const auto& members = rec.members.at(color);
  const int cn = static_cast<int>(members.size());
  const int c =
      static_cast<int>(std::find(members.begin(), members.end(), sender) - members.begin());
  const int prev_parent = members[static_cast<std::size_t>((c - 1 + cn) % cn)];
  if (prev_parent != target)
    throw ProtocolError(
        fmt::format("split #{} ring info sent to rank {}, but its child-prev is rank {}", rec.index,
                    target, prev_parent));
  rec.ring_info_seen.insert(sender);
  rec.children.at(color)->connectAsPrev(c, info.addr());
}

}  // namespace crystal::host
