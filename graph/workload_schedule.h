// The op template of one pipeline stage: static memory, then per iteration the pipeline
// schedule (1F1B as Megatron's non-interleaved schedule, or GPipe) of forward/backward
// micro-batches with their pipeline send/recv, then data-parallel gradient sync (bucketed,
// overlapped with the last backward pass) and the optimizer step.
#pragma once

#include <vector>

#include "crystal/config/config.h"
#include "graph/templates.h"
#include "graph/workload_costs.h"

namespace crystal::graph {

// Appends the template of pipeline stage `stage` to t.classes (interning names/families in t).
void buildStageTemplate(const Config& c, const WorkloadCosts& k, int stage, Templates& t);

}  // namespace crystal::graph
