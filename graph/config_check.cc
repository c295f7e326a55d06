// Semantic checks of a parsed config; shared by the YAML loader and the graph-file reader.
#include <fmt/core.h>

#include "crystal/base/error.h"
#include "crystal/config/config.h"
#include "graph/layout.h"

namespace crystal {
namespace {

[[noreturn]] void fail(const Config& c, std::string_view what) {
  throw InputError(fmt::format("{}: {}", c.source, what));
}

void positive(const Config& c, std::string_view field, double v) {
  if (!(v > 0)) fail(c, fmt::format("'{}' must be > 0, got {}", field, v));
}

void nonNegative(const Config& c, std::string_view field, double v) {
  if (!(v >= 0)) fail(c, fmt::format("'{}' must be >= 0, got {}", field, v));
}

void checkCluster(const Config& c) {
  const auto& k = c.cluster;
  positive(c, "cluster.nodes", k.nodes);
  positive(c, "cluster.gpus_per_node", k.gpus_per_node);
  positive(c, "cluster.gpu.dense_tflops", k.gpu.dense_tflops);
  positive(c, "cluster.gpu.hbm_GBps", k.gpu.hbm_GBps);
  positive(c, "cluster.gpu.memory_GiB", k.gpu.memory_GiB);
  positive(c, "cluster.gpu.compute_capability", k.gpu.compute_capability);
  if (!(k.gpu.achieved_flops_fraction > 0 && k.gpu.achieved_flops_fraction <= 1))
    fail(c, fmt::format("'cluster.gpu.achieved_flops_fraction' must be in (0, 1], got {}",
                        k.gpu.achieved_flops_fraction));
  positive(c, "cluster.nvlink.bandwidth_GBps", k.nvlink.bandwidth_GBps);
  nonNegative(c, "cluster.nvlink.latency_us", k.nvlink.latency_us);
  positive(c, "cluster.fabric.nics_per_node", k.fabric.nics_per_node);
  positive(c, "cluster.fabric.nic.bandwidth_GBps", k.fabric.nic.bandwidth_GBps);
  nonNegative(c, "cluster.fabric.nic.latency_us", k.fabric.nic.latency_us);
  if (k.fabric.levels < 1 || k.fabric.levels > 3)
    fail(c, fmt::format("'cluster.fabric.levels' must be 1, 2 or 3, got {}", k.fabric.levels));
  if (k.fabric.switch_radix < 2)
    fail(c, fmt::format("'cluster.fabric.switch_radix' must be >= 2, got {}",
                        k.fabric.switch_radix));
  if (!(k.fabric.oversubscription >= 1))
    fail(c, fmt::format("'cluster.fabric.oversubscription' must be >= 1, got {}",
                        k.fabric.oversubscription));
  nonNegative(c, "cluster.fabric.switch_latency_us", k.fabric.switch_latency_us);
}

void checkJob(const Config& c) {
  const auto& j = c.job;
  if (j.world_size < 2 || j.world_size > 16384)
    fail(c, fmt::format("'job.world_size' must be in 2..16384, got {}", j.world_size));
  if (1LL * c.cluster.nodes * c.cluster.gpus_per_node != j.world_size)
    fail(c, fmt::format("'cluster.nodes' * 'cluster.gpus_per_node' = {}*{} differs from "
                        "'job.world_size' = {}",
                        c.cluster.nodes, c.cluster.gpus_per_node, j.world_size));
  if (j.iterations < 1) fail(c, fmt::format("'job.iterations' must be >= 1, got {}", j.iterations));
  try {
    graph::Layout layout(j.layout, j.world_size);
  } catch (const InputError& e) {
    fail(c, e.what());
  }
  for (std::size_t i = 0; i < j.comms.size(); ++i) {
    const auto& ec = j.comms[i];
    if (ec.ranks.size() < 2)
      fail(c, fmt::format("'job.comms[{}]' ('{}') needs at least 2 ranks", i, ec.name));
    std::vector<bool> seen(static_cast<std::size_t>(j.world_size));
    for (int r : ec.ranks) {
      if (r < 0 || r >= j.world_size)
        fail(c, fmt::format("'job.comms[{}].ranks' ('{}'): rank {} outside 0..{}", i, ec.name, r,
                            j.world_size - 1));
      if (seen[static_cast<std::size_t>(r)])
        fail(c, fmt::format("'job.comms[{}].ranks' ('{}'): rank {} listed twice", i, ec.name, r));
      seen[static_cast<std::size_t>(r)] = true;
    }
  }
}

void checkWorkload(const Config& c) {
  const auto& w = c.workload;
  if (w.kind == "graph") {
    if (w.graph_file.empty()) fail(c, "'workload.graph_file' is required when kind is graph");
    return;
  }
  if (w.kind != "dense" && w.kind != "moe")
    fail(c, fmt::format("'workload.kind' must be dense, moe or graph, got '{}'", w.kind));
  positive(c, "workload.layers", w.layers);
  positive(c, "workload.hidden", w.hidden);
  positive(c, "workload.heads", w.heads);
  positive(c, "workload.vocab", w.vocab);
  positive(c, "workload.seq_len", w.seq_len);
  positive(c, "workload.micro_batch", w.micro_batch);
  positive(c, "workload.micro_batches", w.micro_batches);
  nonNegative(c, "workload.ffn_hidden", w.ffn_hidden);
  // Upper bounds far above any real model keep every size product inside 64 bits.
  auto atMost = [&](std::string_view field, long long v, long long cap) {
    if (v > cap) fail(c, fmt::format("'{}' = {} exceeds the supported maximum {}", field, v, cap));
  };
  atMost("workload.layers", w.layers, 1 << 16);
  atMost("workload.hidden", w.hidden, 1 << 20);
  atMost("workload.ffn_hidden", w.ffn_hidden, 1 << 22);
  atMost("workload.heads", w.heads, 1 << 16);
  atMost("workload.kv_heads", w.kv_heads, 1 << 16);
  atMost("workload.vocab", w.vocab, 1 << 24);
  atMost("workload.seq_len", w.seq_len, 1 << 24);
  atMost("workload.micro_batch", w.micro_batch, 1 << 16);
  atMost("workload.micro_batch * workload.seq_len", 1LL * w.micro_batch * w.seq_len, 1 << 24);
  atMost("workload.micro_batches", w.micro_batches, 1 << 16);
  atMost("workload.experts", w.experts, 1 << 16);
  atMost("workload.moe_ffn_hidden", w.moe_ffn_hidden, 1 << 22);
  nonNegative(c, "workload.kv_heads", w.kv_heads);
  const auto& l = c.job.layout;
  if (w.hidden % w.heads != 0)
    fail(c, fmt::format("'workload.heads' = {} does not divide 'workload.hidden' = {}", w.heads,
                        w.hidden));
  if (w.layers % l.pp != 0)
    fail(c, fmt::format("'job.layout.pp' = {} does not divide 'workload.layers' = {}", l.pp,
                        w.layers));
  if (w.heads % l.tp != 0)
    fail(c, fmt::format("'job.layout.tp' = {} does not divide 'workload.heads' = {}", l.tp,
                        w.heads));
  if (w.seq_len % l.cp != 0)
    fail(c, fmt::format("'job.layout.cp' = {} does not divide 'workload.seq_len' = {}", l.cp,
                        w.seq_len));
  if (w.dtype != "bf16" && w.dtype != "fp16" && w.dtype != "fp32")
    fail(c, fmt::format("'workload.dtype' must be bf16, fp16 or fp32, got '{}'", w.dtype));
  if (w.dp_bucket_bytes == 0) fail(c, "'workload.dp_bucket_bytes' must be > 0");
  if (w.kind == "moe") {
    positive(c, "workload.experts", w.experts);
    positive(c, "workload.top_k", w.top_k);
    positive(c, "workload.moe_ffn_hidden", w.moe_ffn_hidden);
    if (w.top_k > w.experts)
      fail(c, fmt::format("'workload.top_k' = {} exceeds 'workload.experts' = {}", w.top_k,
                          w.experts));
    if (w.experts % l.ep != 0)
      fail(c, fmt::format("'job.layout.ep' = {} does not divide 'workload.experts' = {}", l.ep,
                          w.experts));
  }
  for (const auto& [name, us] : w.op_costs_us)
    nonNegative(c, fmt::format("workload.op_costs_us.{}", name), us);
}

void checkEmulation(const Config& c) {
  for (int r : c.emulation.real_ranks)
    if (r < 0 || r >= c.job.world_size)
      fail(c, fmt::format("'emulation.real_ranks': rank {} outside 0..{}", r,
                          c.job.world_size - 1));
  positive(c, "emulation.timeout_s", c.emulation.timeout_s);
  positive(c, "emulation.gpu_channel_GBps", c.emulation.gpu_channel_GBps);
  positive(c, "emulation.proxy_request_us", c.emulation.proxy_request_us);
  nonNegative(c, "emulation.gpu_slice_us", c.emulation.gpu_slice_us);
  if (c.emulation.real_channels < 0 || c.emulation.real_channels > 64)
    fail(c, fmt::format("'emulation.real_channels': {} outside 0..64 (NCCL 2.28.9's MAXCHANNELS)",
                        c.emulation.real_channels));
  if (c.emulation.p2p_peers && c.cluster.gpus_per_node < 2)
    fail(c, fmt::format("'emulation.p2p_peers' makes a real rank's node members GPUs of its "
                        "host, but 'cluster.gpus_per_node' is {}: no node has other GPUs",
                        c.cluster.gpus_per_node));
  if (c.emulation.map_comms && c.emulation.real_ranks.empty())
    fail(c, "'emulation.map_comms' maps the program's ranks onto 'emulation.real_ranks', "
            "which is empty");
  for (std::size_t i = 0; i < c.emulation.real_ranks.size(); ++i)
    for (std::size_t j = 0; c.emulation.map_comms && j < i; ++j)
      if (c.emulation.real_ranks[i] == c.emulation.real_ranks[j])
        fail(c, fmt::format("'emulation.real_ranks': rank {} listed twice (map_comms gives each "
                            "program rank its own target rank)",
                            c.emulation.real_ranks[i]));
  if (c.model.max_channels && (*c.model.max_channels < 1 || *c.model.max_channels > 64))
    fail(c, fmt::format("'model.max_channels' must be in 1..64, got {}", *c.model.max_channels));
  if (c.model.proxy_overhead_us) nonNegative(c, "model.proxy_overhead_us", *c.model.proxy_overhead_us);
  if (c.model.kernel_launch_us) nonNegative(c, "model.kernel_launch_us", *c.model.kernel_launch_us);
}

}  // namespace

void checkConfig(const Config& c) {
  checkCluster(c);
  checkJob(c);
  checkWorkload(c);
  checkEmulation(c);
}

}  // namespace crystal
