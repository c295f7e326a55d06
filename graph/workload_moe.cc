// MoE MLP: top-k router, token dispatch and combine by EP all-to-all (balanced routing,
// so every rank sends tokens*top_k*hidden bytes), experts sharded over TP like the dense MLP.
#include "graph/workload_layers.h"

namespace crystal::graph {

void moeForward(TemplateBuilder& b, const WorkloadCosts& k) {
  b.compute("fwd.router", k.router_us);
  if (k.ep > 1) b.collective("ep", CollKind::AllToAll, k.ep_a2a_bytes, "fwd.moe.dispatch");
  b.compute("fwd.experts", k.experts_us);
  if (k.ep > 1) b.collective("ep", CollKind::AllToAll, k.ep_a2a_bytes, "fwd.moe.combine");
  if (k.tp > 1) b.collective("tp", CollKind::AllReduce, k.tp_allreduce_bytes, "fwd.moe.tp");
}

void moeBackward(TemplateBuilder& b, const WorkloadCosts& k) {
  if (k.ep > 1) b.collective("ep", CollKind::AllToAll, k.ep_a2a_bytes, "bwd.moe.combine");
  b.compute("bwd.experts", 2 * k.experts_us);
  if (k.ep > 1) b.collective("ep", CollKind::AllToAll, k.ep_a2a_bytes, "bwd.moe.dispatch");
  b.compute("bwd.router", 2 * k.router_us);
  if (k.tp > 1) b.collective("tp", CollKind::AllReduce, k.tp_allreduce_bytes, "bwd.moe.tp");
}

}  // namespace crystal::graph
