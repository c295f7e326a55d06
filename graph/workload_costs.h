// Sizes, FLOPs and bytes of one transformer layer on one rank, from the workload shape and
// the GPU rates (docs/graph.md derives every formula). Per micro-batch, per TP/CP shard.
#pragma once

#include <cstdint>

#include "crystal/config/config.h"

namespace crystal::graph {

struct WorkloadCosts {
  // Shape.
  std::int64_t tokens = 0;        // per micro-batch on this rank: micro_batch * seq_len / cp
  int dtype_bytes = 2;
  int tp = 1, cp = 1, ep = 1, pp = 1, dp = 1;
  int layers_per_stage = 0;
  bool moe = false;

  // Parameters on one rank.
  std::uint64_t layer_params = 0;         // dense part of one layer (attention [+ MLP/router])
  std::uint64_t layer_expert_params = 0;  // MoE: this rank's experts of one layer
  std::uint64_t embed_params = 0;         // input embedding (stage 0)
  std::uint64_t head_params = 0;          // output projection (last stage)

  // Bytes moved by communication, per micro-batch.
  std::uint64_t tp_allreduce_bytes = 0;   // one activation: tokens * hidden
  std::uint64_t cp_kv_bytes = 0;          // K and V of the full sequence (CP all-gather)
  std::uint64_t pp_bytes = 0;             // activation / gradient between stages
  std::uint64_t ep_a2a_bytes = 0;         // MoE dispatch or combine, this rank's send bytes
  std::uint64_t loss_allreduce_bytes = 0; // vocab-parallel cross-entropy (fp32 per token)

  // Activation memory kept from forward to backward, per micro-batch.
  std::uint64_t layer_activation_bytes = 0;
  std::uint64_t embed_activation_bytes = 0;
  std::uint64_t head_activation_bytes = 0;

  // Modelled compute times (us) of the forward pass; backward = 2x.
  double attn_us = 0, mlp_us = 0, router_us = 0, experts_us = 0, embed_us = 0, head_us = 0;
  double hbm_bytes_per_us = 0;  // for memory-bound ops (optimizer)
};

[[nodiscard]] WorkloadCosts computeCosts(const Config& c);

}  // namespace crystal::graph
