// What must agree between the members of a communicator (collectives) and between a send
// and its receive, and the messages naming both sides of a disagreement.
#pragma once

#include <string>

#include <fmt/core.h>

#include "crystal/graph/op.h"

namespace crystal::graph {

[[nodiscard]] inline bool sameCollective(const Op& a, const Op& b) {
  return a.coll == b.coll && a.bytes == b.bytes && a.dtype == b.dtype && a.red == b.red &&
         ((a.coll != CollKind::Broadcast && a.coll != CollKind::Reduce) || a.peer == b.peer);
}

[[nodiscard]] inline std::string describeCollective(const Op& op) {
  return fmt::format("{} {} bytes {} root {}", toString(op.coll), op.bytes, toString(op.dtype),
                     op.peer);
}

}  // namespace crystal::graph
