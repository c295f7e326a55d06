#include "graph/workload_costs.h"

#include <algorithm>

namespace crystal::graph {

WorkloadCosts computeCosts(const Config& c) {
  const WorkloadConfig& w = c.workload;
  const LayoutConfig& l = c.job.layout;
  const GpuSpec& gpu = c.cluster.gpu;
  WorkloadCosts k;
  k.tp = l.tp, k.cp = l.cp, k.ep = l.ep, k.pp = l.pp, k.dp = l.dp;
  k.moe = w.kind == "moe";
  k.dtype_bytes = w.dtype == "fp32" ? 4 : 2;
  k.layers_per_stage = w.layers / l.pp;
  k.tokens = static_cast<std::int64_t>(w.micro_batch) * w.seq_len / l.cp;

  const double h = w.hidden, a = w.heads, hd = h / a;
  const double kv = w.kv_heads > 0 ? w.kv_heads : w.heads;
  const double f = w.ffn_hidden > 0 ? w.ffn_hidden : 4.0 * h;
  const double t = l.tp, T = static_cast<double>(k.tokens), e = k.dtype_bytes;
  const double s = w.seq_len, V = w.vocab;

  // Parameters: Q and output projection h*h each, K and V h*kv*hd each; gated (SwiGLU) MLP
  // with three h*f matrices; all split over TP.
  const double attn_p = 2 * h * a * hd + 2 * h * kv * hd;
  const double mlp_p = 3 * h * f;
  const double router_p = k.moe ? h * w.experts : 0;
  const double expert_p = k.moe ? 3 * h * w.moe_ffn_hidden : 0;
  k.layer_params = static_cast<std::uint64_t>((attn_p + (k.moe ? 0 : mlp_p)) / t + router_p);
  k.layer_expert_params =
      k.moe ? static_cast<std::uint64_t>(expert_p * (w.experts / l.ep) / t) : 0;
  k.embed_params = static_cast<std::uint64_t>(V * h / t);
  k.head_params = k.embed_params;

  k.tp_allreduce_bytes = static_cast<std::uint64_t>(T * h * e);
  const double kv_shard = std::max(1.0, kv / t);  // KV heads on this TP rank
  k.cp_kv_bytes = static_cast<std::uint64_t>(2 * w.micro_batch * s * kv_shard * hd * e);
  k.pp_bytes = k.tp_allreduce_bytes;
  k.ep_a2a_bytes = k.moe ? static_cast<std::uint64_t>(T * w.top_k * h * e) : 0;
  k.loss_allreduce_bytes = static_cast<std::uint64_t>(T * 4);

  // Stored activations (flash attention: no s*s score matrix): layer-norm inputs and
  // outputs, Q/K/V, attention output and softmax statistics, MLP up/gate outputs and the
  // activation output. MoE: the MLP part per routed token copy.
  const double attn_act = 2 * T * h * e + T * (a + 2 * kv) * hd * e / t + T * a * hd * e / t +
                          T * a * 4 / t;
  const double mlp_act = k.moe ? 2 * T * h * e + T * w.top_k * 3 * w.moe_ffn_hidden * e / t
                               : 2 * T * h * e + 3 * T * f * e / t;
  k.layer_activation_bytes = static_cast<std::uint64_t>(attn_act + mlp_act);
  k.embed_activation_bytes = static_cast<std::uint64_t>(T * h * e);
  k.head_activation_bytes = static_cast<std::uint64_t>(T * V * 4 / t);  // fp32 logits

  // Times: matmul FLOPs at the achieved fraction of peak; memory-bound elementwise work
  // (norms, residuals, activation function, rotary) at HBM bandwidth.
  const double flops_per_us = gpu.dense_tflops * 1e6 * gpu.achieved_flops_fraction;
  k.hbm_bytes_per_us = gpu.hbm_GBps * 1e3;
  const double causal_core = 0.5 * 4 * T * s * h / t;  // QK^T and AV, half masked
  const double elementwise_attn = 6 * T * h * e;
  const double elementwise_mlp = 4 * T * h * e + 3 * T * f * e / t;
  k.attn_us = (2 * T * attn_p / t + causal_core) / flops_per_us + elementwise_attn / k.hbm_bytes_per_us;
  k.mlp_us = 2 * T * mlp_p / t / flops_per_us + elementwise_mlp / k.hbm_bytes_per_us;
  if (k.moe) {
    k.router_us = 2 * T * router_p / flops_per_us + 4 * T * h * e / k.hbm_bytes_per_us;
    k.experts_us = 2 * T * w.top_k * expert_p / t / flops_per_us +
                   3 * T * w.top_k * w.moe_ffn_hidden * e / t / k.hbm_bytes_per_us;
  }
  k.embed_us = 2 * T * h * e / k.hbm_bytes_per_us;  // gather rows, write activations
  k.head_us = 2 * T * h * V / t / flops_per_us + 3 * T * V * 4 / t / k.hbm_bytes_per_us;
  return k;
}

}  // namespace crystal::graph
