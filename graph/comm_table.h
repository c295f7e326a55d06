// The communicators of a target: layout families (members computed from the layout, no
// per-rank storage) followed by the explicit comms of job.comms (stored as rank lists).
//
// Comm ids: families in the order of families(); within a layout family, comm c holds the
// ranks whose coordinates outside the family's dimensions form mixed-radix number c.
// Member i of a layout comm has sub-index i over the family's dimensions (tp,cp,ep,dp,pp
// order), so a dp comm's member index is the rank's DP index and a pp comm's is its stage.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "crystal/graph/graph.h"
#include "graph/layout.h"

namespace crystal::graph {

struct Family {
  std::string name;
  DimMask dims = 0;        // layout family: its dimensions; explicit: 0
  bool world = false;      // member i is rank i
  std::int32_t first = 0;  // id of its first comm
  std::int32_t count = 0;  // number of comms
  std::int32_t size = 0;   // members per comm (explicit: size of the first one)
  std::int32_t first_explicit = -1;  // explicit: index into the explicit list
};

class LayoutCommTable final : public CommTable {
 public:
  LayoutCommTable(const Layout& layout, const std::vector<ExplicitComm>& explicit_comms);

  std::int32_t count() const override { return total_; }
  CommInfo info(std::int32_t comm) const override;
  std::int32_t member(std::int32_t comm, std::int32_t index) const override;
  std::int32_t indexOf(std::int32_t comm, std::int32_t rank) const override;
  std::int32_t commOf(std::string_view family, std::int32_t rank) const override;

  [[nodiscard]] const std::vector<Family>& families() const { return families_; }
  [[nodiscard]] std::int32_t familyIndex(std::string_view name) const;  // -1 if none
  [[nodiscard]] std::int32_t familyOf(std::int32_t comm) const;
  // The comm of family `f` holding `rank`, -1 if none.
  [[nodiscard]] std::int32_t commOfFamily(std::int32_t f, std::int32_t rank) const;
  [[nodiscard]] const Layout& layout() const { return layout_; }

 private:
  struct Explicit {
    std::vector<std::int32_t> ranks;
    std::unordered_map<std::int32_t, std::int32_t> index;  // rank -> member index
  };
  void addLayoutFamily(std::string name, DimMask dims);

  Layout layout_;
  std::vector<Family> families_;
  std::vector<Explicit> explicit_;
  std::int32_t total_ = 0;
};

}  // namespace crystal::graph
