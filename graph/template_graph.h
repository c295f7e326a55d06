// crystal::graph::Graph over per-class templates plus the layout's comm table.
#pragma once

#include <memory>

#include "crystal/graph/graph.h"
#include "graph/comm_table.h"
#include "graph/templates.h"

namespace crystal::graph {

class TemplateGraph final : public Graph {
 public:
  // Checks that the templates fit the config: class count, family names known to the comm
  // table, enum values in range. Throws InputError naming class and op index.
  TemplateGraph(Config config, Templates templates);

  const Config& config() const override { return config_; }
  std::int32_t worldSize() const override { return config_.job.world_size; }
  const CommTable& comms() const override { return table_; }
  std::int32_t numClasses() const override {
    return static_cast<std::int32_t>(templates_.classes.size());
  }
  std::int32_t classOf(std::int32_t rank) const override;
  std::int32_t representative(std::int32_t cls) const override;
  std::int64_t classSize(std::int32_t cls) const override;
  void materialize(std::int32_t rank, std::vector<Op>& out) const override;
  std::size_t opCount(std::int32_t rank) const override;
  std::uint64_t totalOps() const override;
  std::string_view name(std::uint32_t name_index) const override;
  std::span<const Op> classTemplate(std::int32_t cls) const override;
  std::span<const std::string> families() const override { return templates_.families; }

  [[nodiscard]] const Templates& templates() const { return templates_; }
  [[nodiscard]] const LayoutCommTable& table() const { return table_; }
  // Comm-table family index of template family `f`.
  [[nodiscard]] std::int32_t tableFamily(std::int32_t f) const {
    return family_map_[static_cast<std::size_t>(f)];
  }

 private:
  Config config_;
  Templates templates_;
  LayoutCommTable table_;
  std::vector<std::int32_t> family_map_;
};

}  // namespace crystal::graph
