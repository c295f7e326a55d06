// What the engine needs to know about a communicator, computed once per communicator that
// a simulated unit touches: which units must arrive before a collective can start, how the
// communicator sits on nodes (for the cost model), and the key that lines up corresponding
// calls of different units.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "crystal/graph/graph.h"
#include "crystal/model/nccl_model.h"
#include "crystal/replay/replay.h"

namespace crystal::replay::detail {

struct CommView {
  std::int32_t family = 0;    // interned family name
  std::int32_t sync_key = 0;  // naive: the comm id; symmetric: the family (see replay.h)
  std::int32_t size = 0;
  std::vector<std::int32_t> member_units;  // distinct units of the members, ascending
  model::CommShape shape;
};

class CommIndex {
 public:
  CommIndex(const graph::Graph& g, ReplayMode mode);

  // The view of `comm`; throws InputError naming `rank` if the id is not a communicator.
  [[nodiscard]] const CommView& view(std::int32_t comm, std::int32_t rank);
  [[nodiscard]] std::int32_t unitOf(std::int32_t rank) const {
    return mode_ == ReplayMode::Naive ? rank : graph_.classOf(rank);
  }
  [[nodiscard]] std::int32_t nodeOf(std::int32_t rank) const { return rank / gpus_per_node_; }
  [[nodiscard]] std::string_view familyName(std::int32_t family) const {
    return families_[static_cast<std::size_t>(family)];
  }

 private:
  [[nodiscard]] std::int32_t intern(std::string_view family);

  const graph::Graph& graph_;
  ReplayMode mode_;
  std::int32_t gpus_per_node_;
  std::unordered_map<std::int32_t, CommView> views_;
  std::vector<std::string_view> families_;  // views into the graph (it outlives results)
};

}  // namespace crystal::replay::detail
