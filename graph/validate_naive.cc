// Reference validator: materialises every rank and compares member by member.
#include <map>
#include <tuple>
#include <vector>

#include <fmt/core.h>

#include "crystal/base/error.h"
#include "graph/validate.h"
#include "graph/validate_match.h"

namespace crystal::graph {
namespace {

constexpr std::uint64_t kProgressOpLimit = 4'000'000;

struct Seen {
  Op op;
  std::int32_t rank;
  std::size_t index;
};

}  // namespace

ValidationReport validateNaive(const Graph& g) {
  const CommTable& table = g.comms();
  // comm -> member index -> its collectives in order.
  std::map<std::int32_t, std::map<std::int32_t, std::vector<Seen>>> colls;
  // (comm, sender, receiver) -> sends / recvs in order.
  std::map<std::tuple<std::int32_t, std::int32_t, std::int32_t>, std::vector<Seen>> sends, recvs;
  std::vector<Op> ops;
  ValidationReport rep;
  for (std::int32_t r = 0; r < g.worldSize(); ++r) {
    g.materialize(r, ops);
    checkStream(g, r, ops);
    rep.ops_examined += ops.size();
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      if (op.kind == OpKind::Collective)
        colls[op.comm][table.indexOf(op.comm, r)].push_back({op, r, i});
      else if (op.kind == OpKind::Send)
        sends[{op.comm, r, op.peer}].push_back({op, r, i});
      else if (op.kind == OpKind::Recv)
        recvs[{op.comm, op.peer, r}].push_back({op, r, i});
    }
  }
  for (const auto& [comm, members] : colls) {
    const CommInfo info = table.info(comm);
    const std::vector<Seen> none;
    const auto& ref = members.begin()->second;
    for (std::int32_t m = 0; m < info.size; ++m) {
      auto it = members.find(m);
      const auto& seq = it == members.end() ? none : it->second;
      const std::int32_t rank = table.member(comm, m);
      for (std::size_t k = 0; k < std::max(seq.size(), ref.size()); ++k) {
        if (k < seq.size() && k < ref.size() && sameCollective(seq[k].op, ref[k].op)) continue;
        const Seen& mine = k < seq.size() ? seq[k] : ref[k];
        throw InputError(fmt::format(
            "validate: rank {} op {}: collective #{} on communicator {} ('{}') is {} but rank {} "
            "op {} has {}",
            k < seq.size() ? rank : ref[k].rank, mine.index, k, comm, info.family,
            k < seq.size() ? describeCollective(seq[k].op) : describeCollective(ref[k].op),
            k < seq.size() ? (k < ref.size() ? ref[k].rank : -1) : rank,
            k < seq.size() && k < ref.size() ? ref[k].index : 0,
            k < seq.size() && k < ref.size() ? describeCollective(ref[k].op) : "no such collective"));
      }
    }
  }
  auto matchAll = [&](const auto& from, const auto& to, bool from_is_send) {
    const std::vector<Seen> none;
    for (const auto& [key, list] : from) {
      auto it = to.find(key);
      const auto& other = it == to.end() ? none : it->second;
      for (std::size_t k = 0; k < list.size(); ++k) {
        if (k < other.size() && other[k].op.bytes == list[k].op.bytes) continue;
        const auto [comm, src, dst] = key;
        throw InputError(fmt::format(
            "validate: rank {} op {}: {} #{} {} rank {} on communicator {} ('{}') of {} bytes {}",
            list[k].rank, list[k].index, from_is_send ? "send" : "recv", k,
            from_is_send ? "to" : "from", from_is_send ? dst : src, comm, table.info(comm).family,
            list[k].op.bytes,
            k < other.size() ? fmt::format("meets {} bytes at rank {} op {}", other[k].op.bytes,
                                           other[k].rank, other[k].index)
                             : std::string(from_is_send ? "has no matching recv" : "has no matching send")));
      }
    }
  };
  matchAll(sends, recvs, true);
  matchAll(recvs, sends, false);
  // Blocking replay of every rank (memory O(total ops): small worlds only).
  if (rep.ops_examined <= kProgressOpLimit) {
    std::vector<std::int32_t> all(static_cast<std::size_t>(g.worldSize()));
    for (std::int32_t r = 0; r < g.worldSize(); ++r) all[static_cast<std::size_t>(r)] = r;
    checkProgress(g, all, false);
    rep.progress_checked = true;
  }
  rep.world = g.worldSize();
  rep.comms = table.count();
  rep.classes = g.numClasses();
  rep.total_ops = g.totalOps();
  rep.method = "naive";
  return rep;
}

}  // namespace crystal::graph
