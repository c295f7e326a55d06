// Which layout family a recorded communicator is, seen from the recorded rank.
#pragma once

#include <vector>

#include "crystal/graph/import.h"
#include "graph/comm_table.h"

namespace crystal::graph {

// For each of `rec.comms`, the comm-table family index it is. Rules, in order: members
// (when recorded) must equal the family comm holding the rank, else size and the rank's
// index must fit; a recorded name equal to a family name wins among fitting families;
// recorded comms with identical members take fitting families in table order (Megatron
// creates "dp" and "dp-cp" even where they coincide). Throws InputError naming the file and
// communicator when none fits, or when several fit and nothing tells them apart.
std::vector<std::int32_t> matchFamilies(const LayoutCommTable& table, const RecordedRank& rec);

}  // namespace crystal::graph
