// YAML -> crystal::Config. Field names and defaults: config/README.md and config.h.
#include <fstream>
#include <sstream>

#include <fmt/core.h>
#include <yaml-cpp/yaml.h>

#include "crystal/base/error.h"
#include "crystal/config/config.h"
#include "graph/config_presets.h"
#include "graph/yaml_fields.h"

namespace crystal {
namespace {

using graph::YamlFields;

void readLink(YamlFields& parent, std::string_view key, LinkSpec& link) {
  YamlFields f(parent.child(key), parent.field(key), parent.file());
  f.read("bandwidth_GBps", link.bandwidth_GBps);
  f.read("latency_us", link.latency_us);
  f.rejectUnknown();
}

void readCluster(YamlFields& top, ClusterConfig& c, bool& nodes_given) {
  YamlFields f(top.child("cluster"), "cluster", top.file());
  if (f.has("preset")) {
    std::string preset;
    f.read("preset", preset);
    c = graph::clusterPreset(preset, f.field("preset"), top.file());
  }
  f.read("name", c.name);
  nodes_given = f.has("nodes");
  f.read("nodes", c.nodes);
  f.read("gpus_per_node", c.gpus_per_node);
  {
    YamlFields g(f.child("gpu"), "cluster.gpu", top.file());
    g.read("model", c.gpu.model);
    g.read("compute_capability", c.gpu.compute_capability);
    g.read("dense_tflops", c.gpu.dense_tflops);
    g.read("hbm_GBps", c.gpu.hbm_GBps);
    g.read("memory_GiB", c.gpu.memory_GiB);
    g.read("achieved_flops_fraction", c.gpu.achieved_flops_fraction);
    g.rejectUnknown();
  }
  readLink(f, "nvlink", c.nvlink);
  {
    YamlFields fab(f.child("fabric"), "cluster.fabric", top.file());
    fab.read("nics_per_node", c.fabric.nics_per_node);
    readLink(fab, "nic", c.fabric.nic);
    fab.read("levels", c.fabric.levels);
    fab.read("switch_radix", c.fabric.switch_radix);
    fab.read("oversubscription", c.fabric.oversubscription);
    fab.read("switch_latency_us", c.fabric.switch_latency_us);
    fab.read("rail_optimised", c.fabric.rail_optimised);
    fab.rejectUnknown();
  }
  f.rejectUnknown();
}

void readJob(YamlFields& top, JobConfig& j, bool& dp_given) {
  YamlFields f(top.child("job"), "job", top.file());
  f.read("world_size", j.world_size);
  f.read("iterations", j.iterations);
  {
    YamlFields l(f.child("layout"), "job.layout", top.file());
    l.read("tp", j.layout.tp);
    l.read("cp", j.layout.cp);
    l.read("ep", j.layout.ep);
    dp_given = l.has("dp");
    l.read("dp", j.layout.dp);
    l.read("pp", j.layout.pp);
    l.read("order", j.layout.order);
    l.rejectUnknown();
  }
  YAML::Node comms = f.child("comms");
  if (comms && !comms.IsNull()) {
    if (!comms.IsSequence())
      throw InputError(fmt::format("{}: 'job.comms' must be a list of {{name, ranks}}",
                                   f.where(comms)));
    for (std::size_t i = 0; i < comms.size(); ++i) {
      YamlFields c(comms[i], fmt::format("job.comms[{}]", i), top.file());
      ExplicitComm ec;
      c.read("name", ec.name);
      c.read("ranks", ec.ranks);
      c.rejectUnknown();
      if (ec.name.empty())
        throw InputError(fmt::format("{}: 'job.comms[{}].name' is required", f.where(comms[i]), i));
      j.comms.push_back(std::move(ec));
    }
  }
  f.rejectUnknown();
}

PipelineSchedule parseSchedule(const std::string& s, const std::string& where) {
  if (s == "1f1b") return PipelineSchedule::OneFOneB;
  if (s == "gpipe") return PipelineSchedule::GPipe;
  throw InputError(fmt::format("{}: 'workload.schedule' must be 1f1b or gpipe, got '{}'", where, s));
}

void readWorkload(YamlFields& top, WorkloadConfig& w) {
  YAML::Node node = top.child("workload");
  YamlFields f(node, "workload", top.file());
  f.read("kind", w.kind);
  f.read("graph_file", w.graph_file);
  f.read("layers", w.layers);
  f.read("hidden", w.hidden);
  f.read("ffn_hidden", w.ffn_hidden);
  f.read("heads", w.heads);
  f.read("kv_heads", w.kv_heads);
  f.read("vocab", w.vocab);
  f.read("seq_len", w.seq_len);
  f.read("micro_batch", w.micro_batch);
  f.read("micro_batches", w.micro_batches);
  if (f.has("schedule")) {
    std::string s;
    f.read("schedule", s);
    w.schedule = parseSchedule(s, f.where(node["schedule"]));
  }
  f.read("dtype", w.dtype);
  f.read("experts", w.experts);
  f.read("top_k", w.top_k);
  f.read("moe_ffn_hidden", w.moe_ffn_hidden);
  f.readNumberMap("op_costs_us", w.op_costs_us);
  f.read("distributed_optimizer", w.distributed_optimizer);
  f.read("dp_bucket_bytes", w.dp_bucket_bytes);
  f.read("overlap_grad_reduce", w.overlap_grad_reduce);
  f.rejectUnknown();
}

void readEmulation(YamlFields& top, EmulationConfig& e) {
  YAML::Node node = top.child("emulation");
  YamlFields f(node, "emulation", top.file());
  f.read("real_ranks", e.real_ranks);
  f.read("host", e.host);
  if (f.has("data")) {
    std::string d;
    f.read("data", d);
    if (d == "mirror") e.data = DataPolicy::Mirror;
    else if (d == "zero") e.data = DataPolicy::Zero;
    else if (d == "none") e.data = DataPolicy::None;
    else
      throw InputError(fmt::format("{}: 'emulation.data' must be mirror, zero or none, got '{}'",
                                   f.where(node["data"]), d));
  }
  f.read("timeout_s", e.timeout_s);
  f.read("tuner", e.tuner);
  if (f.has("gdr")) {
    bool gdr = false;
    f.read("gdr", gdr);
    e.gdr = gdr;
  }
  f.read("map_comms", e.map_comms);
  f.read("target_channels", e.target_channels);
  f.read("real_channels", e.real_channels);
  f.read("fold_rings", e.fold_rings);
  f.read("p2p_peers", e.p2p_peers);
  f.read("gpu_channel_GBps", e.gpu_channel_GBps);
  f.read("proxy_request_us", e.proxy_request_us);
  f.read("gpu_slice_us", e.gpu_slice_us);
  f.rejectUnknown();
}

void readModel(YamlFields& top, ModelConfig& m) {
  YamlFields f(top.child("model"), "model", top.file());
  auto opt = [&](std::string_view key, auto& out) {
    if (!f.has(key)) return;
    typename std::remove_reference_t<decltype(out)>::value_type v{};
    f.read(key, v);
    out = v;
  };
  opt("proxy_overhead_us", m.proxy_overhead_us);
  opt("kernel_launch_us", m.kernel_launch_us);
  opt("max_channels", m.max_channels);
  f.readNumberMap("overrides", m.overrides);
  f.rejectUnknown();
}

}  // namespace

Config parseConfig(const std::string& yaml_text, const std::string& source_name) {
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    throw InputError(fmt::format("{}:{}:{}: malformed YAML: {}", source_name, e.mark.line + 1,
                                 e.mark.column + 1, e.msg));
  }
  Config c;
  c.source = source_name;
  YamlFields top(root, "", c.source);
  bool nodes_given = false, dp_given = false;
  try {
    readCluster(top, c.cluster, nodes_given);
    readJob(top, c.job, dp_given);
    readWorkload(top, c.workload);
    readEmulation(top, c.emulation);
    readModel(top, c.model);
    top.rejectUnknown();
  } catch (const YAML::Exception& e) {
    // Structural surprises (e.g. a key that is itself a sequence) end up here.
    throw InputError(fmt::format("{}:{}: bad YAML structure: {}", source_name, e.mark.line + 1,
                                 e.msg));
  }
  // Derived defaults, documented in config/README.md: whichever of world size and node
  // count is missing follows from the other; dp fills the rest of the world.
  const long long cluster_world = 1LL * c.cluster.nodes * c.cluster.gpus_per_node;
  if (c.job.world_size == 0 && c.cluster.gpus_per_node > 0 && cluster_world <= 1 << 20)
    c.job.world_size = static_cast<int>(cluster_world);
  if (!nodes_given && c.cluster.gpus_per_node > 0 && c.job.world_size > 0)
    c.cluster.nodes = std::max(1, c.job.world_size / c.cluster.gpus_per_node);
  const auto& l = c.job.layout;
  const long long others = 1LL * l.tp * l.cp * l.pp;
  if (!dp_given && others > 0 && c.job.world_size % others == 0)
    c.job.layout.dp = static_cast<int>(c.job.world_size / others);
  checkConfig(c);
  return c;
}

Config loadConfig(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot open config file", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  return parseConfig(ss.str(), path);
}

}  // namespace crystal
