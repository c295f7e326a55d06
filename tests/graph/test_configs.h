// Small configs shared by the graph tests.
#pragma once

#include <string>

#include "crystal/config/config.h"

namespace crystal::graph::testing {

// world 16 = tp2 x dp4 x pp2, 4 layers, 4 micro-batches; GPU rates chosen for round numbers.
inline Config smallDense(std::string extra_workload = "", std::string layout = "{tp: 2, dp: 4, pp: 2}") {
  return parseConfig(
      "cluster: {gpu: {dense_tflops: 100, achieved_flops_fraction: 0.5, hbm_GBps: 1000}}\n"
      "job: {world_size: 16, layout: " + layout + "}\n"
      "workload: {kind: dense, layers: 4, hidden: 256, heads: 4, vocab: 1000, seq_len: 128, "
      "micro_batches: 4, dp_bucket_bytes: 300000" + extra_workload + "}\n",
      "small.yaml");
}

// world 32 = tp2 x cp2 x dp4 (ep2) x pp2, MoE with 4 experts top-2, one explicit comm.
inline Config smallMoe() {
  return parseConfig(
      "job: {world_size: 32, layout: {tp: 2, cp: 2, dp: 4, ep: 2, pp: 2},\n"
      "      comms: [{name: extra, ranks: [0, 5, 9]}]}\n"
      "workload: {kind: moe, layers: 4, hidden: 256, heads: 4, vocab: 1000, seq_len: 128, "
      "micro_batches: 3, experts: 4, top_k: 2, moe_ffn_hidden: 512}\n",
      "moe.yaml");
}

}  // namespace crystal::graph::testing
