// Ops of one transformer layer (forward or backward) on one rank.
//
// Tensor parallelism without sequence parallelism: an all-reduce of the activation after
// attention and after the MLP (forward), and of the input gradient of each (backward).
// Context parallelism: K/V all-gather before attention (forward), reduce-scatter of their
// gradients (backward). MoE replaces the MLP by router + EP all-to-all dispatch + experts +
// all-to-all combine.
#pragma once

#include "graph/template_builder.h"
#include "graph/workload_costs.h"

namespace crystal::graph {

void attentionForward(TemplateBuilder& b, const WorkloadCosts& k);
void attentionBackward(TemplateBuilder& b, const WorkloadCosts& k);
void mlpForward(TemplateBuilder& b, const WorkloadCosts& k);   // workload_dense.cc
void mlpBackward(TemplateBuilder& b, const WorkloadCosts& k);
void moeForward(TemplateBuilder& b, const WorkloadCosts& k);   // workload_moe.cc
void moeBackward(TemplateBuilder& b, const WorkloadCosts& k);

inline void layerForward(TemplateBuilder& b, const WorkloadCosts& k) {
  attentionForward(b, k);
  k.moe ? moeForward(b, k) : mlpForward(b, k);
}
inline void layerBackward(TemplateBuilder& b, const WorkloadCosts& k) {
  k.moe ? moeBackward(b, k) : mlpBackward(b, k);
  attentionBackward(b, k);
}

}  // namespace crystal::graph
