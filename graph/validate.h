// Validation of a whole target graph: collectives agree (kind, size, dtype, op, root, order)
// on all members of every communicator; every send has its receive (peer, bytes, order);
// each rank's streams are well formed (events recorded once and before being waited for in
// dependency order, no dependency cycle, balanced
// groups, memory never freed below zero). The first problem throws InputError naming rank,
// op index and communicator.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "crystal/graph/graph.h"

namespace crystal::graph {

struct ValidationReport {
  std::int32_t world = 0;
  std::int32_t comms = 0;
  std::int32_t classes = 0;
  std::uint64_t total_ops = 0;
  std::uint64_t ops_examined = 0;  // ops materialised and checked (naive: total_ops)
  std::string method;              // "symmetric" or "naive"
  bool progress_checked = false;   // cross-rank deadlock check ran (see checkProgress)
};

// Checks of one rank's stream that need no other rank. Throws InputError.
void checkStream(const Graph& g, std::int32_t rank, std::span<const Op> ops);

// Cross-rank deadlock check (validate_progress.cc): replays `ranks` with blocking
// collectives and rendezvous send/recv. by_class: `ranks` are the class representatives and
// the rest of the world is inferred by symmetry. Throws InputError naming rank, op, comm.
void checkProgress(const Graph& g, std::span<const std::int32_t> ranks, bool by_class);

// Per-rank: materialises every rank; memory O(total collectives + p2p). For small worlds
// and as the reference the symmetric check is tested against.
ValidationReport validateNaive(const Graph& g);

// Per class and communicator family (TemplateGraph): proves the per-rank checks by symmetry.
// Falls back to validateNaive for graphs without templates.
ValidationReport validateGraph(const Graph& g);

}  // namespace crystal::graph
