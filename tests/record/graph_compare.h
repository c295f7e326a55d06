// Test helper: op-for-op comparison of two graphs of one target, every rank.
#pragma once

#include <fmt/core.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "crystal/graph/graph.h"

namespace crystal::graph::testing {

// What an importer cannot carry over: op names other than compute kernels' (a trace names a
// kernel, not the model step that launched it) and the dtype of ops that move no data.
enum class Compare { Exact, TraceVisible };

inline Op visible(const Op& in, const Graph& g, Compare mode) {
  Op op = in;
  op.name = 0;  // compared as strings: the string tables may number them differently
  if (mode == Compare::Exact) return op;
  const bool moves =
      op.kind == OpKind::Collective || op.kind == OpKind::Send || op.kind == OpKind::Recv;
  if (!moves) op.dtype = DType::BFloat16;
  (void)g;
  return op;
}

// Returns "" when every rank's stream is equal, else the first difference.
inline std::string firstDifference(const Graph& want, const Graph& got, Compare mode) {
  if (want.worldSize() != got.worldSize()) return "world sizes differ";
  std::vector<Op> a, b;
  for (std::int32_t r = 0; r < want.worldSize(); ++r) {
    want.materialize(r, a);
    got.materialize(r, b);
    if (a.size() != b.size()) return fmt::format("rank {}: {} ops vs {}", r, a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      const Op x = visible(a[i], want, mode), y = visible(b[i], got, mode);
      const bool names_ok = (mode != Compare::Exact && a[i].kind != OpKind::Compute) ||
                            want.name(a[i].name) == got.name(b[i].name);
      if (!(x == y) || !names_ok)
        return fmt::format(
            "rank {} op {}: {} comm {} peer {} tag {} bytes {} stream {} '{}' vs {} "
            "comm {} peer {} tag {} bytes {} stream {} '{}'",
            r, i, toString(x.kind), x.comm, x.peer, x.tag, x.bytes, x.stream, want.name(a[i].name),
            toString(y.kind), y.comm, y.peer, y.tag, y.bytes, y.stream, got.name(b[i].name));
    }
  }
  return "";
}

}  // namespace crystal::graph::testing
