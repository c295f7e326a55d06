// Config -> canonical YAML (every field), the inverse of parseConfig. Graph files embed it.
#include <yaml-cpp/yaml.h>

#include "crystal/config/config.h"

namespace crystal {
namespace {

void link(YAML::Emitter& e, const char* key, const LinkSpec& l) {
  e << YAML::Key << key << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "bandwidth_GBps" << YAML::Value << l.bandwidth_GBps;
  e << YAML::Key << "latency_us" << YAML::Value << l.latency_us;
  e << YAML::EndMap;
}

void numberMap(YAML::Emitter& e, const char* key,
               const std::vector<std::pair<std::string, double>>& m) {
  e << YAML::Key << key << YAML::Value << YAML::BeginMap;
  for (const auto& [k, v] : m) e << YAML::Key << k << YAML::Value << v;
  e << YAML::EndMap;
}

template <class T>
void kv(YAML::Emitter& e, const char* key, const T& v) {
  e << YAML::Key << key << YAML::Value << v;
}

void cluster(YAML::Emitter& e, const ClusterConfig& c) {
  e << YAML::Key << "cluster" << YAML::Value << YAML::BeginMap;
  kv(e, "name", c.name);
  kv(e, "nodes", c.nodes);
  kv(e, "gpus_per_node", c.gpus_per_node);
  e << YAML::Key << "gpu" << YAML::Value << YAML::BeginMap;
  kv(e, "model", c.gpu.model);
  kv(e, "compute_capability", c.gpu.compute_capability);
  kv(e, "dense_tflops", c.gpu.dense_tflops);
  kv(e, "hbm_GBps", c.gpu.hbm_GBps);
  kv(e, "memory_GiB", c.gpu.memory_GiB);
  kv(e, "achieved_flops_fraction", c.gpu.achieved_flops_fraction);
  e << YAML::EndMap;
  link(e, "nvlink", c.nvlink);
  e << YAML::Key << "fabric" << YAML::Value << YAML::BeginMap;
  kv(e, "nics_per_node", c.fabric.nics_per_node);
  link(e, "nic", c.fabric.nic);
  kv(e, "levels", c.fabric.levels);
  kv(e, "switch_radix", c.fabric.switch_radix);
  kv(e, "oversubscription", c.fabric.oversubscription);
  kv(e, "switch_latency_us", c.fabric.switch_latency_us);
  kv(e, "rail_optimised", c.fabric.rail_optimised);
  e << YAML::EndMap << YAML::EndMap;
}

void job(YAML::Emitter& e, const JobConfig& j) {
  e << YAML::Key << "job" << YAML::Value << YAML::BeginMap;
  kv(e, "world_size", j.world_size);
  kv(e, "iterations", j.iterations);
  e << YAML::Key << "layout" << YAML::Value << YAML::BeginMap;
  kv(e, "tp", j.layout.tp);
  kv(e, "cp", j.layout.cp);
  kv(e, "ep", j.layout.ep);
  kv(e, "dp", j.layout.dp);
  kv(e, "pp", j.layout.pp);
  kv(e, "order", j.layout.order);
  e << YAML::EndMap;
  e << YAML::Key << "comms" << YAML::Value << YAML::BeginSeq;
  for (const auto& c : j.comms) {
    e << YAML::BeginMap;
    kv(e, "name", c.name);
    e << YAML::Key << "ranks" << YAML::Value << YAML::Flow << c.ranks;
    e << YAML::EndMap;
  }
  e << YAML::EndSeq << YAML::EndMap;
}

void workload(YAML::Emitter& e, const WorkloadConfig& w) {
  e << YAML::Key << "workload" << YAML::Value << YAML::BeginMap;
  kv(e, "kind", w.kind);
  kv(e, "graph_file", w.graph_file);
  kv(e, "layers", w.layers);
  kv(e, "hidden", w.hidden);
  kv(e, "ffn_hidden", w.ffn_hidden);
  kv(e, "heads", w.heads);
  kv(e, "kv_heads", w.kv_heads);
  kv(e, "vocab", w.vocab);
  kv(e, "seq_len", w.seq_len);
  kv(e, "micro_batch", w.micro_batch);
  kv(e, "micro_batches", w.micro_batches);
  kv(e, "schedule", w.schedule == PipelineSchedule::GPipe ? "gpipe" : "1f1b");
  kv(e, "dtype", w.dtype);
  kv(e, "experts", w.experts);
  kv(e, "top_k", w.top_k);
  kv(e, "moe_ffn_hidden", w.moe_ffn_hidden);
  numberMap(e, "op_costs_us", w.op_costs_us);
  kv(e, "distributed_optimizer", w.distributed_optimizer);
  kv(e, "dp_bucket_bytes", w.dp_bucket_bytes);
  kv(e, "overlap_grad_reduce", w.overlap_grad_reduce);
  e << YAML::EndMap;
}

void emulation(YAML::Emitter& e, const EmulationConfig& m) {
  e << YAML::Key << "emulation" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "real_ranks" << YAML::Value << YAML::Flow << m.real_ranks;
  kv(e, "host", m.host);
  kv(e, "data", m.data == DataPolicy::Mirror ? "mirror" : m.data == DataPolicy::Zero ? "zero" : "none");
  kv(e, "timeout_s", m.timeout_s);
  kv(e, "tuner", m.tuner);
  if (m.gdr) kv(e, "gdr", *m.gdr);  // unset: the default rule (config.h gdrEnabled)
  kv(e, "map_comms", m.map_comms);
  kv(e, "target_channels", m.target_channels);
  kv(e, "real_channels", m.real_channels);
  kv(e, "fold_rings", m.fold_rings);
  kv(e, "p2p_peers", m.p2p_peers);
  kv(e, "gpu_channel_GBps", m.gpu_channel_GBps);
  kv(e, "proxy_request_us", m.proxy_request_us);
  kv(e, "gpu_slice_us", m.gpu_slice_us);
  e << YAML::EndMap;
}

void model(YAML::Emitter& e, const ModelConfig& m) {
  e << YAML::Key << "model" << YAML::Value << YAML::BeginMap;
  if (m.proxy_overhead_us) kv(e, "proxy_overhead_us", *m.proxy_overhead_us);
  if (m.kernel_launch_us) kv(e, "kernel_launch_us", *m.kernel_launch_us);
  if (m.max_channels) kv(e, "max_channels", *m.max_channels);
  numberMap(e, "overrides", m.overrides);
  e << YAML::EndMap;
}

}  // namespace

std::string toYaml(const Config& c) {
  YAML::Emitter e;
  // Full precision so that parse(toYaml(c)) == c.
  e.SetDoublePrecision(17);
  e << YAML::BeginMap;
  cluster(e, c.cluster);
  job(e, c.job);
  workload(e, c.workload);
  emulation(e, c.emulation);
  model(e, c.model);
  e << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

}  // namespace crystal
