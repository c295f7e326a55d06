// Reading ModelConfig (YAML `model:` section) into the options of the model's parts.
#pragma once

#include "crystal/config/config.h"
#include "nccl_graph.h"
#include "steps.h"
#include "tuning.h"

namespace crystal::model {

struct ModelOptions {
  GraphOptions graph;
  TuneOptions tune;
  StepOptions step;
  double kernel_launch_us = 0;  // added to every call (NCCL's base latencies include it)
  // NCCL's CPU time to enqueue an all-to-all of N ranks: group + peer x N (allToAllHostUs).
  double a2a_group_host_us = 2.9;
  double a2a_peer_host_us = 1.49;
  // NCCL's proxy thread's time per NET transfer (one isend or irecv of a chunk, posted and
  // tested to completion), us: grouped p2p with many NET peers in small chunks is bound by
  // it (allToAllTime).
  double net_request_us = 0.61;
};

// Free-form overrides this model knows (others are left to other modules):
//   ll128: 0 disables LL128 (NCCL_PROTO=^LL128), 1 applies NCCL's enable rules;
//   nic_path_phb: 1 = NICs hang off the CPU (PHB), which disables LL128 on sm90;
//   amd_cpu: 1 = AMD host CPUs (llMaxBw row, 2 us net overhead);
//   p2p_net_channel_gbps, ring_slice_us: StepOptions' figures of the same names;
//   chain_kernel_scale: multiplies StepOptions' chain_broadcast and chain_reduce (0: none);
//   a2a_group_host_us, a2a_peer_host_us, net_request_us: ModelOptions' figures of the same
//   names.
// Throws InputError naming model.<field> for values out of range.
[[nodiscard]] ModelOptions readModelOptions(const ClusterConfig& cluster, const ModelConfig& m);

}  // namespace crystal::model
