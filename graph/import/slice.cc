// sliceRecordings: recordings of one rank per pipeline stage -> TemplateGraph of the target.
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>

#include "crystal/base/error.h"
#include "crystal/graph/import.h"
#include "graph/import/comm_match.h"
#include "graph/template_graph.h"

namespace crystal::graph {
namespace {

bool usesComm(OpKind k) {
  return k == OpKind::Collective || k == OpKind::Send || k == OpKind::Recv;
}

std::string where(const RecordedRank& r, std::size_t i) {
  if (i < r.where.size() && !r.where[i].empty()) return fmt::format("op {} ({})", i, r.where[i]);
  return fmt::format("op {}", i);
}

std::uint32_t intern(std::vector<std::string>& strings, const std::string& s) {
  auto it = std::find(strings.begin(), strings.end(), s);
  if (it != strings.end()) return static_cast<std::uint32_t>(it - strings.begin());
  strings.push_back(s);
  return static_cast<std::uint32_t>(strings.size() - 1);
}

// Recording -> class template (families interned into `t`).
std::vector<Op> symbolize(const LayoutCommTable& table, const RecordedRank& r, Templates& t) {
  const std::vector<std::int32_t> fam = matchFamilies(table, r);
  std::vector<Op> out;
  out.reserve(r.ops.size());
  for (std::size_t i = 0; i < r.ops.size(); ++i) {
    Op op = r.ops[i];
    if (op.name >= r.strings.size())
      throw InputError(fmt::format("{}: rank {} {}: name {} outside the string table", r.source,
                                   r.rank, where(r, i), op.name));
    op.name = intern(t.strings, r.strings[op.name]);
    if (!usesComm(op.kind)) {
      if (op.comm != -1)
        throw InputError(fmt::format("{}: rank {} {}: {} op names a communicator", r.source, r.rank,
                                     where(r, i), toString(op.kind)));
      out.push_back(op);
      continue;
    }
    if (op.comm < 0 || static_cast<std::size_t>(op.comm) >= r.comms.size())
      throw InputError(fmt::format("{}: rank {} {}: communicator {} not recorded", r.source, r.rank,
                                   where(r, i), op.comm));
    const RecordedComm& c = r.comms[static_cast<std::size_t>(op.comm)];
    const std::int32_t f = fam[static_cast<std::size_t>(op.comm)];
    const std::string& family = table.families()[static_cast<std::size_t>(f)].name;
    // The layout, not the recording, says where the rank sits (the recording may not know).
    const std::int32_t comm = table.commOfFamily(f, r.rank);
    const std::int32_t me = table.indexOf(comm, r.rank);
    auto it = std::find(t.families.begin(), t.families.end(), family);
    if (it == t.families.end()) it = t.families.insert(t.families.end(), family);
    op.comm = static_cast<std::int32_t>(it - t.families.begin());
    const bool p2p = op.kind == OpKind::Send || op.kind == OpKind::Recv;
    const bool rooted = op.kind == OpKind::Collective &&
                        (op.coll == CollKind::Broadcast || op.coll == CollKind::Reduce);
    if ((p2p || rooted) && (op.peer < 0 || op.peer >= c.size))
      throw InputError(fmt::format("{}: rank {} {}: {} {} outside communicator '{}' of size {}",
                                   r.source, r.rank, where(r, i), p2p ? "peer" : "root", op.peer,
                                   c.key, c.size));
    if (p2p) {
      if (op.peer == me)
        throw InputError(fmt::format("{}: rank {} {}: {} to itself", r.source, r.rank, where(r, i),
                                     toString(op.kind)));
      op.peer = (op.peer - me + c.size) % c.size;
      op.tag = 0;
    } else if (!rooted) {
      op.peer = -1;
    }
    out.push_back(op);
  }
  return out;
}

std::string describeOp(const Op& op) {
  return fmt::format("{} stream {} coll {} bytes {} comm {} peer {} tag {} {:.3f} us",
                     toString(op.kind), op.stream, toString(op.coll), op.bytes, op.comm, op.peer,
                     op.tag, op.duration_us);
}

}  // namespace

std::unique_ptr<Graph> sliceRecordings(const Config& config, std::span<const RecordedRank> ranks) {
  const LayoutCommTable table(Layout(config.job.layout, config.job.world_size), config.job.comms);
  const Layout& layout = table.layout();
  Templates t;
  t.class_dims = bit(kPp);
  const int nclasses = layout.extent(t.class_dims);
  // Class order, then rank order: families and names are interned as the generator does.
  std::vector<const RecordedRank*> order;
  for (const auto& r : ranks) {
    if (r.rank < 0 || r.rank >= layout.world())
      throw InputError(fmt::format("{}: rank {} is outside the target's world 0..{}", r.source,
                                   r.rank, layout.world() - 1));
    order.push_back(&r);
  }
  std::stable_sort(order.begin(), order.end(), [&](const RecordedRank* a, const RecordedRank* b) {
    return layout.subIndex(a->rank, t.class_dims) < layout.subIndex(b->rank, t.class_dims);
  });
  t.classes.resize(static_cast<std::size_t>(nclasses));
  std::vector<const RecordedRank*> first(static_cast<std::size_t>(nclasses), nullptr);
  for (const RecordedRank* r : order) {
    const auto cls = static_cast<std::size_t>(layout.subIndex(r->rank, t.class_dims));
    std::vector<Op> ops = symbolize(table, *r, t);
    if (first[cls] == nullptr) {
      first[cls] = r;
      t.classes[cls] = std::move(ops);
      continue;
    }
    // A second recording of one class must agree: otherwise the class assumption is wrong.
    const auto& want = t.classes[cls];
    const std::size_t n = std::min(want.size(), ops.size());
    std::size_t i = 0;
    while (i < n && ops[i] == want[i]) ++i;
    if (i < n || want.size() != ops.size())
      throw InputError(fmt::format(
          "{} (rank {}) and {} (rank {}) are both pipeline stage {} but differ at {}: {} vs {}; "
          "ranks of a stage must run the same ops",
          first[cls]->source, first[cls]->rank, r->source, r->rank, cls, where(*r, i),
          i < want.size() ? describeOp(want[i]) : "end",
          i < ops.size() ? describeOp(ops[i]) : "end"));
  }
  std::vector<std::string> missing;
  for (int c = 0; c < nclasses; ++c)
    if (first[static_cast<std::size_t>(c)] == nullptr)
      missing.push_back(
          fmt::format("stage {} (e.g. rank {})", c, layout.offsetOf(c, t.class_dims)));
  if (!missing.empty())
    throw InputError(
        fmt::format("{}: recordings cover {} of {} pipeline stages; missing {}: "
                    "record one rank of each",
                    config.source, nclasses - static_cast<int>(missing.size()), nclasses,
                    fmt::join(missing, ", ")));
  return std::make_unique<TemplateGraph>(config, std::move(t));
}

RecordedRank recordingOf(const Graph& g, std::int32_t rank) {
  RecordedRank r;
  r.source = fmt::format("{} rank {}", g.config().source, rank);
  r.rank = rank;
  std::vector<Op> ops;
  g.materialize(rank, ops);
  std::map<std::int32_t, std::int32_t> comm_index;  // global comm id -> index in r.comms
  std::map<std::uint32_t, std::uint32_t> name_index;
  const CommTable& table = g.comms();
  for (Op op : ops) {
    if (op.name != 0) {
      auto [it, fresh] = name_index.emplace(op.name, static_cast<std::uint32_t>(r.strings.size()));
      if (fresh) r.strings.emplace_back(g.name(op.name));
      op.name = it->second;
    }
    if (op.comm >= 0) {
      const CommInfo info = table.info(op.comm);
      auto [it, fresh] = comm_index.emplace(op.comm, static_cast<std::int32_t>(r.comms.size()));
      if (fresh) {
        RecordedComm c;
        c.key = fmt::format("comm{}", op.comm);
        c.name = std::string(info.family);
        c.size = info.size;
        c.rank = table.indexOf(op.comm, rank);
        for (std::int32_t m = 0; m < info.size; ++m) c.ranks.push_back(table.member(op.comm, m));
        r.comms.push_back(std::move(c));
      }
      if (op.kind == OpKind::Send || op.kind == OpKind::Recv)
        op.peer = table.indexOf(op.comm, op.peer);
      op.comm = it->second;
    }
    r.ops.push_back(op);
  }
  return r;
}

}  // namespace crystal::graph
