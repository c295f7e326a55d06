#include "graph/import/comm_match.h"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "crystal/base/error.h"

namespace crystal::graph {
namespace {

bool sameMembers(const LayoutCommTable& table, std::int32_t comm,
                 const std::vector<std::int32_t>& ranks) {
  if (table.info(comm).size != static_cast<std::int32_t>(ranks.size())) return false;
  for (std::size_t i = 0; i < ranks.size(); ++i)
    if (table.member(comm, static_cast<std::int32_t>(i)) != ranks[i]) return false;
  return true;
}

std::string describe(const RecordedRank& rec, const RecordedComm& c) {
  return fmt::format("{}: rank {}: communicator '{}'{} (size {}, rank {} in it)", rec.source,
                     rec.rank, c.key, c.name.empty() ? "" : fmt::format(" ('{}')", c.name), c.size,
                     c.rank);
}

}  // namespace

std::vector<std::int32_t> matchFamilies(const LayoutCommTable& table, const RecordedRank& rec) {
  const auto& fams = table.families();
  std::vector<std::int32_t> out(rec.comms.size(), -1);
  std::vector<std::vector<std::int32_t>> fitting(rec.comms.size());
  for (std::size_t k = 0; k < rec.comms.size(); ++k) {
    const RecordedComm& c = rec.comms[k];
    if (!c.ranks.empty() && static_cast<std::int32_t>(c.ranks.size()) != c.size)
      throw InputError(fmt::format("{}: lists {} member ranks", describe(rec, c), c.ranks.size()));
    if (!c.ranks.empty() &&
        (c.rank < 0 || c.rank >= c.size || c.ranks[static_cast<std::size_t>(c.rank)] != rec.rank))
      throw InputError(
          fmt::format("{}: member {} is not the recorded rank", describe(rec, c), c.rank));
    for (std::size_t f = 0; f < fams.size(); ++f) {
      const std::int32_t comm = table.commOfFamily(static_cast<std::int32_t>(f), rec.rank);
      if (comm < 0) continue;
      const bool fits = c.ranks.empty()
                            ? table.info(comm).size == c.size &&
                                  (c.rank < 0 || table.indexOf(comm, rec.rank) == c.rank)
                            : sameMembers(table, comm, c.ranks);
      if (fits) fitting[k].push_back(static_cast<std::int32_t>(f));
    }
    if (fitting[k].empty()) {
      std::vector<std::string> have;
      for (std::size_t f = 0; f < fams.size(); ++f) {
        const std::int32_t comm = table.commOfFamily(static_cast<std::int32_t>(f), rec.rank);
        if (comm >= 0)
          have.push_back(fmt::format("{} (size {}, rank {})", fams[f].name, table.info(comm).size,
                                     table.indexOf(comm, rec.rank)));
      }
      throw InputError(fmt::format("{} fits no communicator of the layout; rank {} is in {}",
                                   describe(rec, c), rec.rank, fmt::join(have, ", ")));
    }
    for (std::int32_t f : fitting[k])
      if (fams[static_cast<std::size_t>(f)].name == c.name) out[k] = f;
    if (out[k] < 0 && fitting[k].size() == 1) out[k] = fitting[k][0];
  }
  // Ties: recorded comms with members take the fitting families in table order, skipping
  // families another recorded comm with the same members already took.
  for (std::size_t k = 0; k < rec.comms.size(); ++k) {
    if (out[k] >= 0) continue;
    const RecordedComm& c = rec.comms[k];
    std::vector<std::string> names;
    for (std::int32_t f : fitting[k]) names.push_back(fams[static_cast<std::size_t>(f)].name);
    if (c.ranks.empty())
      throw InputError(
          fmt::format("{} fits layout families {} alike; the recording does not "
                      "give its member ranks or a family name to tell them apart",
                      describe(rec, c), fmt::join(names, ", ")));
    for (std::int32_t f : fitting[k]) {
      bool taken = false;
      for (std::size_t j = 0; j < rec.comms.size(); ++j)
        if (j != k && out[j] == f && rec.comms[j].key != c.key) taken = true;
      if (!taken) {
        out[k] = f;
        break;
      }
    }
    if (out[k] < 0)
      throw InputError(
          fmt::format("{}: more communicators with these members than layout "
                      "families {}",
                      describe(rec, c), fmt::join(names, ", ")));
  }
  return out;
}

}  // namespace crystal::graph
