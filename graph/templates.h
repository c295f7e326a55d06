// The symbolic execution graph: one op template per equivalence class of ranks.
//
// Template ops use symbolic communicators: `comm` indexes `families` (layout family names
// such as "tp", "pp", or explicit comm names) and a Send/Recv `peer` is an offset of member
// index within that comm (modulo its size). Classes are the mixed-radix index of a rank's
// coordinates in `class_dims` (dense and MoE: the pipeline stage).
#pragma once

#include <string>
#include <vector>

#include "crystal/graph/op.h"
#include "graph/layout.h"

namespace crystal::graph {

struct Templates {
  DimMask class_dims = 0;
  std::vector<std::string> families;
  std::vector<std::string> strings{""};  // op names; index 0 = none
  std::vector<std::vector<Op>> classes;  // one template per class

  friend bool operator==(const Templates&, const Templates&) = default;
};

}  // namespace crystal::graph
