// Validation by symmetry. Ranks of one class run one template, and materialize() maps a
// template family to the one comm of that family holding the rank. So the ops a member
// issues on a comm are its class template's ops on that family, and:
//  * collectives agree on every comm  <=>  for every set of classes that meets in some comm
//    of a family, those classes' templates have equal collective sequences on the family;
//  * sends match receives  <=>  for every (sender class, offset residue, receiver class)
//    that occurs in some comm, the sender template's sends at that residue equal the
//    receiver template's receives at the opposite residue (bytes, in order).
// The sets of classes that meet in a comm come from the layout: a comm of a family with
// dimensions D fixes the class dimensions outside D and spans those inside D, so the
// distinct cases number extent(class dims \ D), each examined on one comm.
#include <set>
#include <tuple>
#include <vector>

#include <fmt/core.h>

#include "crystal/base/error.h"
#include "graph/template_graph.h"
#include "graph/validate.h"
#include "graph/validate_match.h"

namespace crystal::graph {
namespace {

struct Indexed {
  Op op;
  std::size_t index;
};

class SymmetricValidator {
 public:
  explicit SymmetricValidator(const TemplateGraph& g) : g_(g), t_(g.templates()), table_(g.table()) {}

  ValidationReport run() {
    ValidationReport rep;
    std::vector<Op> ops;
    for (std::int32_t c = 0; c < g_.numClasses(); ++c) {
      const std::int32_t rep_rank = g_.representative(c);
      g_.materialize(rep_rank, ops);
      checkStream(g_, rep_rank, ops);
      rep.ops_examined += ops.size();
    }
    bool explicit_used = false;
    for (std::int32_t f = 0; f < static_cast<std::int32_t>(t_.families.size()); ++f) {
      checkFamily(f);
      explicit_used |= table_.families()[static_cast<std::size_t>(g_.tableFamily(f))].dims == 0;
    }
    // Explicit comms break the layout's symmetry, so the by-class replay would not be sound.
    if (!explicit_used) {
      std::vector<std::int32_t> reps;
      for (std::int32_t c = 0; c < g_.numClasses(); ++c) reps.push_back(g_.representative(c));
      checkProgress(g_, reps, true);
      rep.progress_checked = true;
    }
    rep.world = g_.worldSize();
    rep.comms = table_.count();
    rep.classes = g_.numClasses();
    rep.total_ops = g_.totalOps();
    rep.method = "symmetric";
    return rep;
  }

 private:
  // Ops of class `c` on template family `f` of `kind`; Send/Recv only at offset ≡ residue.
  std::vector<Indexed> opsOn(std::int32_t c, std::int32_t f, OpKind kind, std::int32_t residue,
                             std::int32_t size) const {
    std::vector<Indexed> out;
    const auto& ops = t_.classes[static_cast<std::size_t>(c)];
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      if (op.kind != kind || op.comm != f) continue;
      if (kind != OpKind::Collective && ((op.peer % size) + size) % size != residue) continue;
      out.push_back({op, i});
    }
    return out;
  }

  // One comm of family f, given by its members; examines what every comm of its case shares.
  void checkComm(std::int32_t f, std::int32_t comm, const std::vector<std::int32_t>& members) {
    const std::string& fam = t_.families[static_cast<std::size_t>(f)];
    const auto size = static_cast<std::int32_t>(members.size());
    // Collectives: every member's class sequence equals the first member's.
    std::set<std::int32_t> classes;
    for (std::int32_t r : members) classes.insert(g_.classOf(r));
    const std::int32_t c0 = g_.classOf(members[0]);
    const auto ref = opsOn(c0, f, OpKind::Collective, 0, size);
    for (std::int32_t c : classes) {
      if (c == c0) continue;
      const auto seq = opsOn(c, f, OpKind::Collective, 0, size);
      std::int32_t rank = members[0];
      for (std::int32_t r : members)
        if (g_.classOf(r) == c) { rank = r; break; }
      for (std::size_t k = 0; k < std::max(seq.size(), ref.size()); ++k) {
        if (k < seq.size() && k < ref.size() && sameCollective(seq[k].op, ref[k].op)) continue;
        throw InputError(fmt::format(
            "validate: rank {} op {}: collective #{} on communicator {} ('{}') is {} but rank {} "
            "op {} has {}",
            rank, k < seq.size() ? seq[k].index : 0, k, comm, fam,
            k < seq.size() ? describeCollective(seq[k].op) : "missing", members[0],
            k < ref.size() ? ref[k].index : 0,
            k < ref.size() ? describeCollective(ref[k].op) : "no such collective"));
      }
    }
    // Point to point: distinct (class, residue, peer class) triples of this comm.
    std::set<std::tuple<std::int32_t, std::int32_t, std::int32_t, bool>> seen;
    for (std::int32_t idx = 0; idx < size; ++idx) {
      const std::int32_t c = g_.classOf(members[static_cast<std::size_t>(idx)]);
      for (const Op& op : t_.classes[static_cast<std::size_t>(c)]) {
        if ((op.kind != OpKind::Send && op.kind != OpKind::Recv) || op.comm != f) continue;
        const std::int32_t d = ((op.peer % size) + size) % size;
        const std::int32_t peer = members[static_cast<std::size_t>((idx + d) % size)];
        if (!seen.emplace(c, d, g_.classOf(peer), op.kind == OpKind::Send).second) continue;
        matchP2P(f, comm, size, members[static_cast<std::size_t>(idx)], c, d, peer,
                 op.kind == OpKind::Send);
      }
    }
  }

  void matchP2P(std::int32_t f, std::int32_t comm, std::int32_t size, std::int32_t rank,
                std::int32_t c, std::int32_t d, std::int32_t peer, bool is_send) const {
    const OpKind mine = is_send ? OpKind::Send : OpKind::Recv;
    const OpKind theirs = is_send ? OpKind::Recv : OpKind::Send;
    const auto list = opsOn(c, f, mine, d, size);
    const auto other = opsOn(g_.classOf(peer), f, theirs, (size - d) % size, size);
    for (std::size_t k = 0; k < list.size(); ++k) {
      if (k < other.size() && other[k].op.bytes == list[k].op.bytes) continue;
      throw InputError(fmt::format(
          "validate: rank {} op {}: {} #{} {} rank {} on communicator {} ('{}') of {} bytes {}",
          rank, list[k].index, is_send ? "send" : "recv", k, is_send ? "to" : "from", peer, comm,
          t_.families[static_cast<std::size_t>(f)], list[k].op.bytes,
          k < other.size() ? fmt::format("meets {} bytes at rank {} op {}", other[k].op.bytes,
                                         peer, other[k].index)
                           : std::string(is_send ? "has no matching recv" : "has no matching send")));
    }
  }

  void checkFamily(std::int32_t f) {
    const std::int32_t tf = g_.tableFamily(f);
    const Family& fam = table_.families()[static_cast<std::size_t>(tf)];
    std::vector<std::int32_t> members;
    auto membersOf = [&](std::int32_t comm) {
      const CommInfo info = table_.info(comm);
      members.resize(static_cast<std::size_t>(info.size));
      for (std::int32_t i = 0; i < info.size; ++i)
        members[static_cast<std::size_t>(i)] = table_.member(comm, i);
    };
    if (fam.dims == 0) {
      // Explicit comms: any rank of a class that uses the family must belong to one.
      for (std::int32_t c = 0; c < g_.numClasses(); ++c) {
        if (opsOn(c, f, OpKind::Collective, 0, 1).empty() && !usesP2P(c, f)) continue;
        for (std::int32_t r = 0; r < g_.worldSize(); ++r)
          if (g_.classOf(r) == c && table_.commOfFamily(tf, r) < 0)
            throw InputError(fmt::format("validate: rank {}: uses communicator family '{}' but "
                                         "is in none of its comms", r, fam.name));
      }
      for (std::int32_t k = 0; k < fam.count; ++k) {
        membersOf(fam.first + k);
        checkComm(f, fam.first + k, members);
      }
      return;
    }
    const Layout& layout = table_.layout();
    const DimMask fixed = t_.class_dims & ~fam.dims;
    for (std::int32_t q = 0; q < layout.extent(fixed); ++q) {
      const std::int32_t comm = table_.commOfFamily(tf, layout.offsetOf(q, fixed));
      membersOf(comm);
      checkComm(f, comm, members);
    }
  }

  bool usesP2P(std::int32_t c, std::int32_t f) const {
    for (const Op& op : t_.classes[static_cast<std::size_t>(c)])
      if ((op.kind == OpKind::Send || op.kind == OpKind::Recv) && op.comm == f) return true;
    return false;
  }

  const TemplateGraph& g_;
  const Templates& t_;
  const LayoutCommTable& table_;
};

}  // namespace

ValidationReport validateGraph(const Graph& g) {
  if (const auto* tg = dynamic_cast<const TemplateGraph*>(&g)) return SymmetricValidator(*tg).run();
  return validateNaive(g);
}

}  // namespace crystal::graph
