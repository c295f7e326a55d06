// Per-rank stream checks (shared by the naive and the symmetric validator).
#include <cstdint>
#include <unordered_map>
#include <vector>

#include <fmt/core.h>

#include "crystal/base/error.h"
#include "graph/validate.h"

namespace crystal::graph {
namespace {

[[noreturn]] void fail(std::int32_t rank, std::size_t i, const Op& op, std::string_view what) {
  throw InputError(fmt::format("validate: rank {} op {} ({}): {}", rank, i, toString(op.kind), what));
}

}  // namespace

void checkStream(const Graph& g, std::int32_t rank, std::span<const Op> ops) {
  const CommTable& table = g.comms();
  std::unordered_map<std::uint32_t, std::size_t> recorded;  // event -> op index
  std::uint64_t mem = 0;
  int group_stream = -1;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    switch (op.kind) {
      case OpKind::Collective:
      case OpKind::Send:
      case OpKind::Recv: {
        if (op.comm < 0 || op.comm >= table.count())
          fail(rank, i, op, fmt::format("communicator {} does not exist", op.comm));
        if (table.indexOf(op.comm, rank) < 0)
          fail(rank, i, op, fmt::format("rank is not a member of communicator {} ('{}')", op.comm,
                                        table.info(op.comm).family));
        if (op.kind != OpKind::Collective && table.indexOf(op.comm, op.peer) < 0)
          fail(rank, i, op, fmt::format("peer {} is not a member of communicator {} ('{}')",
                                        op.peer, op.comm, table.info(op.comm).family));
        if (group_stream >= 0 && op.stream != group_stream)
          fail(rank, i, op, "op inside a group on another stream than the group");
        break;
      }
      case OpKind::GroupBegin:
        if (group_stream >= 0) fail(rank, i, op, "nested group");
        group_stream = op.stream;
        break;
      case OpKind::GroupEnd:
        if (group_stream < 0) fail(rank, i, op, "group end without a group begin");
        group_stream = -1;
        break;
      case OpKind::Record:
        if (!recorded.emplace(op.tag, i).second)
          fail(rank, i, op, fmt::format("event {} recorded twice", op.tag));
        break;
      case OpKind::Alloc:
        if (op.bytes > UINT64_MAX - mem) fail(rank, i, op, "allocated memory overflows 64 bits");
        mem += op.bytes;
        break;
      case OpKind::Free:
        if (op.bytes > mem) fail(rank, i, op, "frees more memory than is allocated");
        mem -= op.bytes;
        break;
      default:
        break;
    }
    if (group_stream >= 0 && op.kind != OpKind::GroupBegin && op.kind != OpKind::Collective &&
        op.kind != OpKind::Send && op.kind != OpKind::Recv)
      fail(rank, i, op, "only send, recv and collectives may be inside a group");
  }
  if (group_stream >= 0) throw InputError(fmt::format("validate: rank {}: group never ends", rank));

  // Dependency cycle: ops are nodes; edges run along each stream and from Record to each
  // Wait on its event. Kahn's algorithm; whatever is left unvisited lies on or behind a cycle.
  const std::size_t n = ops.size();
  std::vector<std::int32_t> indeg(n, 0), next_on_stream(n, -1);
  std::unordered_multimap<std::size_t, std::size_t> waits_of_record;
  std::unordered_map<std::uint8_t, std::size_t> last_on_stream;
  for (std::size_t i = 0; i < n; ++i) {
    const Op& op = ops[i];
    if (auto it = last_on_stream.find(op.stream); it != last_on_stream.end()) {
      next_on_stream[it->second] = static_cast<std::int32_t>(i);
      ++indeg[i];
    }
    last_on_stream[op.stream] = i;
    if (op.kind == OpKind::Wait) {
      auto r = recorded.find(op.tag);
      if (r == recorded.end())
        fail(rank, i, op, fmt::format("waits for event {}, which is never recorded", op.tag));
      waits_of_record.emplace(r->second, i);
      ++indeg[i];
    }
  }
  std::vector<std::size_t> ready;
  for (std::size_t i = 0; i < n; ++i)
    if (indeg[i] == 0) ready.push_back(i);
  std::size_t visited = 0;
  while (!ready.empty()) {
    const std::size_t i = ready.back();
    ready.pop_back();
    ++visited;
    if (const std::int32_t j = next_on_stream[i]; j >= 0 && --indeg[static_cast<std::size_t>(j)] == 0)
      ready.push_back(static_cast<std::size_t>(j));
    auto [first, last] = waits_of_record.equal_range(i);
    for (auto it = first; it != last; ++it)
      if (--indeg[it->second] == 0) ready.push_back(it->second);
  }
  if (visited != n) {
    std::size_t first = 0;
    while (indeg[first] == 0) ++first;
    fail(rank, first, ops[first], "dependency cycle through stream order and event waits");
  }
}

}  // namespace crystal::graph
