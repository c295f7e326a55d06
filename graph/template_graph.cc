#include "graph/template_graph.h"

#include <algorithm>

#include <fmt/core.h>

#include "crystal/base/error.h"
#include "graph/file_format.h"

namespace crystal::graph {
namespace {

bool usesComm(OpKind k) {
  return k == OpKind::Collective || k == OpKind::Send || k == OpKind::Recv;
}

}  // namespace

TemplateGraph::TemplateGraph(Config config, Templates templates)
    : config_(std::move(config)),
      templates_(std::move(templates)),
      table_(Layout(config_.job.layout, config_.job.world_size), config_.job.comms) {
  const Layout& layout = table_.layout();
  if (templates_.classes.size() != static_cast<std::size_t>(layout.extent(templates_.class_dims)))
    throw InputError(fmt::format("{}: graph has {} class templates, layout needs {}",
                                 config_.source, templates_.classes.size(),
                                 layout.extent(templates_.class_dims)));
  for (const auto& fam : templates_.families) {
    const std::int32_t f = table_.familyIndex(fam);
    if (f < 0)
      throw InputError(fmt::format("{}: graph uses communicator family '{}', which the layout "
                                   "does not have", config_.source, fam));
    family_map_.push_back(f);
  }
  const auto nfam = static_cast<std::int32_t>(templates_.families.size());
  for (std::size_t c = 0; c < templates_.classes.size(); ++c) {
    const auto& ops = templates_.classes[c];
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      const bool comm_ok = usesComm(op.kind) ? op.comm >= 0 && op.comm < nfam : op.comm == -1;
      if (!opEnumsValid(op) || !comm_ok || op.name >= templates_.strings.size())
        throw InputError(fmt::format("{}: class {} op {}: bad {} op (comm {}, name {})",
                                     config_.source, c, i, toString(op.kind), op.comm, op.name));
    }
  }
}

bool opEnumsValid(const Op& op) {
  if (op.kind > OpKind::IterationMark) return false;
  const auto c = static_cast<int>(op.coll);
  if (!(c <= 4 || c == 8 || c == 9)) return false;
  return static_cast<int>(op.dtype) <= 11 && static_cast<int>(op.red) <= 4;
}

std::int32_t TemplateGraph::classOf(std::int32_t rank) const {
  if (rank < 0 || rank >= worldSize()) return -1;
  return table_.layout().subIndex(rank, templates_.class_dims);
}

std::int32_t TemplateGraph::representative(std::int32_t cls) const {
  return table_.layout().offsetOf(cls, templates_.class_dims);
}

std::int64_t TemplateGraph::classSize(std::int32_t /*cls*/) const {
  return worldSize() / table_.layout().extent(templates_.class_dims);
}

std::span<const Op> TemplateGraph::classTemplate(std::int32_t cls) const {
  if (cls < 0 || cls >= numClasses()) return {};
  return templates_.classes[static_cast<std::size_t>(cls)];
}

void TemplateGraph::materialize(std::int32_t rank, std::vector<Op>& out) const {
  out.clear();
  const std::int32_t cls = classOf(rank);
  if (cls < 0) throw InputError(fmt::format("rank {} outside 0..{}", rank, worldSize() - 1));
  // Per family: this rank's comm, its member index and the comm size.
  struct Resolved {
    std::int32_t comm, index, size;
  };
  std::vector<Resolved> fam;
  fam.reserve(family_map_.size());
  for (std::int32_t f : family_map_) {
    const std::int32_t comm = table_.commOfFamily(f, rank);
    fam.push_back({comm, comm < 0 ? -1 : table_.indexOf(comm, rank),
                   comm < 0 ? 0 : table_.info(comm).size});
  }
  // Send/Recv order numbers per (comm, peer): few distinct peers, so a flat list.
  struct Counter {
    std::int32_t comm, peer;
    std::uint32_t sends, recvs;
  };
  std::vector<Counter> counters;
  const auto& ops = templates_.classes[static_cast<std::size_t>(cls)];
  out.reserve(ops.size());
  for (std::size_t i = 0; i < ops.size(); ++i) {
    Op op = ops[i];
    if (op.comm >= 0) {
      const Resolved& r = fam[static_cast<std::size_t>(op.comm)];
      if (r.comm < 0)
        throw InputError(fmt::format("rank {} op {}: rank is in no '{}' communicator", rank, i,
                                     templates_.families[static_cast<std::size_t>(op.comm)]));
      op.comm = r.comm;
      if (op.kind == OpKind::Send || op.kind == OpKind::Recv) {
        // 64-bit: a file may hold any offset.
        const std::int64_t size = r.size;
        const auto idx = static_cast<std::int32_t>(((r.index + std::int64_t{ops[i].peer}) % size + size) % size);
        op.peer = table_.member(r.comm, idx);
        auto it = std::find_if(counters.begin(), counters.end(), [&](const Counter& c) {
          return c.comm == op.comm && c.peer == op.peer;
        });
        if (it == counters.end()) it = counters.insert(counters.end(), {op.comm, op.peer, 0, 0});
        op.tag = op.kind == OpKind::Send ? it->sends++ : it->recvs++;
      }
    }
    out.push_back(op);
  }
}

std::size_t TemplateGraph::opCount(std::int32_t rank) const {
  const std::int32_t cls = classOf(rank);
  return cls < 0 ? 0 : templates_.classes[static_cast<std::size_t>(cls)].size();
}

std::uint64_t TemplateGraph::totalOps() const {
  std::uint64_t n = 0;
  for (std::size_t c = 0; c < templates_.classes.size(); ++c)
    n += templates_.classes[c].size() * static_cast<std::uint64_t>(classSize(static_cast<std::int32_t>(c)));
  return n;
}

std::string_view TemplateGraph::name(std::uint32_t name_index) const {
  return name_index < templates_.strings.size() ? templates_.strings[name_index] : std::string_view{};
}

}  // namespace crystal::graph
