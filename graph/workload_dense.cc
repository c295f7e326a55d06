// Attention and dense MLP of a transformer layer (used by both dense and MoE workloads).
#include "graph/workload_layers.h"

namespace crystal::graph {

void attentionForward(TemplateBuilder& b, const WorkloadCosts& k) {
  if (k.cp > 1) b.collective("cp", CollKind::AllGather, k.cp_kv_bytes, "fwd.cp_kv");
  b.compute("fwd.attn", k.attn_us);
  if (k.tp > 1) b.collective("tp", CollKind::AllReduce, k.tp_allreduce_bytes, "fwd.attn.tp");
}

void attentionBackward(TemplateBuilder& b, const WorkloadCosts& k) {
  b.compute("bwd.attn", 2 * k.attn_us);
  if (k.cp > 1) b.collective("cp", CollKind::ReduceScatter, k.cp_kv_bytes, "bwd.cp_kv");
  if (k.tp > 1) b.collective("tp", CollKind::AllReduce, k.tp_allreduce_bytes, "bwd.attn.tp");
}

void mlpForward(TemplateBuilder& b, const WorkloadCosts& k) {
  b.compute("fwd.mlp", k.mlp_us);
  if (k.tp > 1) b.collective("tp", CollKind::AllReduce, k.tp_allreduce_bytes, "fwd.mlp.tp");
}

void mlpBackward(TemplateBuilder& b, const WorkloadCosts& k) {
  b.compute("bwd.mlp", 2 * k.mlp_us);
  if (k.tp > 1) b.collective("tp", CollKind::AllReduce, k.tp_allreduce_bytes, "bwd.mlp.tp");
}

}  // namespace crystal::graph
