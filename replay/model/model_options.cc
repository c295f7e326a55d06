#include "model_options.h"

#include <string>

#include "crystal/base/error.h"

namespace crystal::model {
namespace {

bool flag(const std::string& name, double v) {
  if (v != 0.0 && v != 1.0) {
    throw InputError("model.overrides." + name + ": must be 0 or 1, got " + std::to_string(v));
  }
  return v != 0.0;
}

// "H100", "h100 SXM5", "NVIDIA H100 80GB HBM3": any name with h100 in it, in any case.
bool namesH100(const std::string& model) {
  for (std::size_t i = 0; i + 4 <= model.size(); ++i)
    if ((model[i] == 'h' || model[i] == 'H') && model.compare(i + 1, 3, "100") == 0) return true;
  return false;
}

}  // namespace

ModelOptions readModelOptions(const ClusterConfig& cluster, const ModelConfig& m) {
  ModelOptions o;
  const int cc = cluster.gpu.compute_capability;
  if (cc < 30 || cc > 200) {
    throw InputError("cluster.gpu.compute_capability: " + std::to_string(cc) +
                     " is not an NVIDIA compute capability (e.g. 90 for H100/H200)");
  }
  o.graph.compcap = o.tune.compcap = o.step.compcap = cc;
  // The chain kernels as measured on the target's GPU (the H200's unless it names an H100).
  if (namesH100(cluster.gpu.model)) {
    o.step.chain_broadcast = h100ChainBroadcast();
    o.step.chain_reduce = h100ChainReduce();
  }
  const ChainKernel broadcast = o.step.chain_broadcast, reduce = o.step.chain_reduce;
  if (m.proxy_overhead_us) {
    if (*m.proxy_overhead_us < 0) throw InputError("model.proxy_overhead_us: must be >= 0");
    o.step.proxy_overhead_us = *m.proxy_overhead_us;
  }
  if (m.kernel_launch_us) {
    if (*m.kernel_launch_us < 0) throw InputError("model.kernel_launch_us: must be >= 0");
    o.kernel_launch_us = *m.kernel_launch_us;
  }
  if (m.max_channels) {
    if (*m.max_channels < 1 || *m.max_channels > 64) {
      throw InputError("model.max_channels: must be in 1..64, got " +
                       std::to_string(*m.max_channels));
    }
    o.graph.max_channels = *m.max_channels;
  }
  for (const auto& [name, value] : m.overrides) {
    if (name == "ll128") o.tune.ll128 = flag(name, value);
    if (name == "nic_path_phb") o.graph.nic_path = flag(name, value) ? kPathPhb : kPathPxb;
    if (name == "amd_cpu") o.tune.amd_cpu = flag(name, value);
    if (name == "p2p_net_channel_gbps") {
      if (!(value >= 0)) throw InputError("model.overrides.p2p_net_channel_gbps: must be >= 0");
      o.step.p2p_net_channel_GBps = value;
    }
    if (name == "a2a_group_host_us" || name == "a2a_peer_host_us") {
      if (!(value >= 0 && value <= 1e6))
        throw InputError("model.overrides." + name + ": must be in 0..1e6");
      (name == "a2a_group_host_us" ? o.a2a_group_host_us : o.a2a_peer_host_us) = value;
    }
    if (name == "net_request_us") {
      if (!(value >= 0 && value <= 1000))
        throw InputError("model.overrides.net_request_us: must be in 0..1000");
      o.net_request_us = value;
    }
    if (name == "chain_kernel_scale") {
      if (!(value >= 0 && value <= 100))
        throw InputError("model.overrides.chain_kernel_scale: must be in 0..100");
      o.step.chain_broadcast = broadcast.scaled(value);
      o.step.chain_reduce = reduce.scaled(value);
    }
    if (name == "ring_slice_us") {
      if (!(value >= 0 && value <= 1000))
        throw InputError("model.overrides.ring_slice_us: must be in 0..1000");
      o.step.ring_slice_us = value;
    }
  }
  return o;
}

}  // namespace crystal::model
