// buildGraph: config -> TemplateGraph (generated workload or a graph file).
#include <fmt/core.h>

#include "crystal/base/error.h"
#include "crystal/graph/graph.h"
#include "graph/template_graph.h"
#include "graph/workload_costs.h"
#include "graph/workload_schedule.h"

namespace crystal::graph {

std::unique_ptr<Graph> buildGraph(const Config& config) {
  checkConfig(config);
  if (config.workload.kind == "graph") {
    auto loaded = loadGraphFile(config.workload.graph_file);
    const Config& fc = loaded->config();
    if (fc.job.world_size != config.job.world_size || !(fc.job.layout == config.job.layout) ||
        !(fc.job.comms == config.job.comms))
      throw InputError(fmt::format(
          "{}: 'workload.graph_file' {} was expanded for a different job (world {}, layout "
          "tp{} cp{} ep{} dp{} pp{} '{}'); the config has world {}",
          config.source, config.workload.graph_file, fc.job.world_size, fc.job.layout.tp,
          fc.job.layout.cp, fc.job.layout.ep, fc.job.layout.dp, fc.job.layout.pp,
          fc.job.layout.order, config.job.world_size));
    const auto& tg = static_cast<const TemplateGraph&>(*loaded);
    return std::make_unique<TemplateGraph>(config, tg.templates());
  }
  const WorkloadCosts costs = computeCosts(config);
  Templates t;
  t.class_dims = bit(kPp);
  for (int s = 0; s < config.job.layout.pp; ++s) buildStageTemplate(config, costs, s, t);
  return std::make_unique<TemplateGraph>(config, std::move(t));
}

}  // namespace crystal::graph
