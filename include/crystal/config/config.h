// The emulation config (YAML, config/): one struct per top-level section.
//
// This header is the contract between modules: graph/ parses YAML into it
// (graph/config_*.cc, crystal::loadConfig), replay/ reads cluster+model, plugin/ reads
// cluster+emulation. Units are fixed here and nowhere else:
//   bandwidth  GB/s  (1e9 bytes per second, one direction)
//   latency    microseconds
//   time       microseconds (double) in models; nanoseconds (int64) on engine clocks
//   sizes      bytes
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace crystal {

struct LinkSpec {
  double bandwidth_GBps = 0;  // per direction
  double latency_us = 0;
  friend bool operator==(const LinkSpec&, const LinkSpec&) = default;
};

// Scale-out fabric between nodes: NICs per node, rail-optimised fat tree.
struct FabricSpec {
  int nics_per_node = 8;
  LinkSpec nic{50.0, 2.0};          // one 400 Gb/s NIC port; latency one way incl. NIC
  int levels = 2;                   // fat-tree levels (leaf/spine = 2, + core = 3)
  int switch_radix = 64;            // ports per switch
  double oversubscription = 1.0;    // at the first level above the leaf (>= 1)
  double switch_latency_us = 0.25;  // per switch hop
  bool rail_optimised = true;       // GPU i of every node on rail i
  friend bool operator==(const FabricSpec&, const FabricSpec&) = default;
};

struct GpuSpec {
  std::string model = "H200";
  int compute_capability = 90;   // NCCL's cudaCompCap (90 = sm_90)
  double dense_tflops = 989.0;   // BF16 dense peak
  double hbm_GBps = 4800.0;      // memory bandwidth
  double memory_GiB = 141.0;
  double achieved_flops_fraction = 0.55;  // model FLOP utilisation for matmuls
  friend bool operator==(const GpuSpec&, const GpuSpec&) = default;
};

struct ClusterConfig {
  std::string name = "h200-dgx";
  int nodes = 1;
  int gpus_per_node = 8;
  GpuSpec gpu;
  LinkSpec nvlink{450.0, 0.7};  // NVLink4 via NVSwitch: 18 links x 25 GB/s per direction
  FabricSpec fabric;
  int world() const { return nodes * gpus_per_node; }
  friend bool operator==(const ClusterConfig&, const ClusterConfig&) = default;
};

// Parallel layout. world = tp*cp*dp*pp; ep divides dp (expert-parallel groups are carved
// out of the data-parallel ranks, as Megatron-Core does). `order` lists the dimensions from
// fastest- to slowest-varying in the global rank, e.g. Megatron's "tp-cp-ep-dp-pp".
struct LayoutConfig {
  int tp = 1, cp = 1, ep = 1, dp = 1, pp = 1;
  std::string order = "tp-cp-ep-dp-pp";
  friend bool operator==(const LayoutConfig&, const LayoutConfig&) = default;
};

// An explicitly listed communicator (in addition to the layout's).
struct ExplicitComm {
  std::string name;
  std::vector<int> ranks;
  friend bool operator==(const ExplicitComm&, const ExplicitComm&) = default;
};

struct JobConfig {
  int world_size = 0;
  LayoutConfig layout;
  std::vector<ExplicitComm> comms;
  int iterations = 1;  // iterations to replay
  friend bool operator==(const JobConfig&, const JobConfig&) = default;
};

enum class PipelineSchedule { OneFOneB, GPipe };

// What the ranks run. Either a model description (kind dense|moe) that graph/ turns into
// templates, or a graph file produced by `crystal graph expand` / import.
struct WorkloadConfig {
  std::string kind = "dense";  // dense | moe | graph
  std::string graph_file;      // kind == graph
  // Model shape.
  int layers = 0;
  int hidden = 0;
  int ffn_hidden = 0;       // 0 => 4*hidden (dense) 
  int heads = 0;
  int kv_heads = 0;         // GQA; 0 => heads
  int vocab = 0;
  int seq_len = 0;
  int micro_batch = 1;      // sequences per micro-batch
  int micro_batches = 1;    // per iteration per pipeline
  PipelineSchedule schedule = PipelineSchedule::OneFOneB;
  std::string dtype = "bf16";
  // MoE.
  int experts = 0;
  int top_k = 0;
  int moe_ffn_hidden = 0;
  // Optional per-op costs in microseconds, overriding the FLOP/byte model (key = op name).
  std::vector<std::pair<std::string, double>> op_costs_us;
  // Data-parallel gradient sync. Distributed optimizer (ZeRO-1, Megatron's default at
  // scale): bucketed reduce-scatter of gradients + all-gather of updated parameters, and
  // optimizer state sharded over dp. Otherwise a bucketed all-reduce, state replicated.
  bool distributed_optimizer = true;
  std::uint64_t dp_bucket_bytes = 80'000'000;  // gradient bytes per DP bucket (40M bf16)
  bool overlap_grad_reduce = true;  // DP buckets start during the last backward pass
  friend bool operator==(const WorkloadConfig&, const WorkloadConfig&) = default;
};

enum class DataPolicy { Mirror, Zero, None };

struct EmulationConfig {
  std::vector<int> real_ranks;  // global ranks that run for real
  std::string host = "127.0.0.1:0";  // host address (port 0 = pick one)
  DataPolicy data = DataPolicy::Mirror;
  double timeout_s = 60.0;      // a virtual peer that cannot answer fails the real rank by then
  bool tuner = true;            // report the target's algorithm/protocol/channel choices
  // NET buffers in GPU memory (plugin reports NCCL_PTR_CUDA). Unset = on only under data
  // `none`: with `mirror` a PyTorch step hung on the H200 with GDR on (2026-12-03), so the
  // default keeps host buffers wherever the plugin writes data (gdrEnabled()).
  std::optional<bool> gdr;
  // The program's own world is real_ranks.size() ranks (NCCL-tests, small scripts): each
  // communicator it creates with that many ranks becomes the target's world_size-rank one,
  // its rank i being real_ranks[i] (plugin/interpose/rank_map.h, docs/nccl-tests.md).
  bool map_comms = false;
  // Real ranks get NCCL_MIN_NCHANNELS = the target's channel count (docs/emulate.md). On the
  // H200 (2026-12-03) it brought 1 GiB all-gather from 4.2x to ~1.3x the model; with rings
  // folded (fold_rings) no size measured runs more than 5 % slower than on NCCL's own 4
  // channels (LL128 rings at 4-64 MiB ran 2.5-4x slower before folding).
  bool target_channels = true;
  // With target_channels: the channels the real rank's NCCL builds when more than the
  // target's (NCCL_MIN_NCHANNELS = max(target's, this); 0 = the target's). One real channel
  // moves ~17-22 GB/s through NET on the H200 where a target channel moves its share of
  // NVLink, so a large broadcast or reduce root cannot keep the model's pace on the target's
  // count; the tuner runs those on up to this many (plugin/ring_fold.h); rings and trees keep
  // at most the target's, p2p the target's count (NCCL_MAX_P2P_NCHANNELS). Off by default:
  // measured on the H200 (2026-12-04, 32) it took the 64-rank 1 GiB broadcast root from +14 %
  // to +2 % of the model, but rings got slower (1 GiB all-gather 5.5 vs 3.9 ms) when they ran
  // above 16, and the 8192-rank init from 1.0-1.5 to 2.2 s.
  int real_channels = 0;
  // Ring collectives run on as few of the real rank's channels as keep its GPU at the model's
  // pace, each standing for target / used of the target's (plugin/ring_fold.h): NCCL's proxy
  // on an emulated host reaches both ring neighbours of every channel through NET, several
  // times a target rank's proxy work. The two figures are the real machine's, measured on the
  // H200 (2026-12-03, docs/emulate.md): one channel's ring pace (bus bytes) and NCCL's proxy
  // time per NET request.
  bool fold_rings = true;
  // The virtual ranks on a real rank's target node look like GPUs of its own host, so its
  // NCCL reaches them over P2P as on the target (NVLink) instead of NET (host/
  // bootstrap_host.h HostOptions::p2p_peers). Their connections need memory from the real
  // rank's process (CRYSTAL_P2P_POOL, plugin/interpose/block_pool.h), else the first
  // collective that connects one fails with a clear error; its ring connections are paced by
  // the model (plugin/p2p_agent.h), the rest run free. A comm whose rings stay on the rank's
  // node at the rank is not folded (fold_rings; p2pRingsStayOnNode); a node's first or last
  // rank and split children are. Off by default.
  bool p2p_peers = false;
  double gpu_channel_GBps = 17.0;
  double proxy_request_us = 0.5;
  // The real rank's ring kernel time per slice beyond its bytes, paced by the agent kernel
  // (plugin/ring_fold.h onNodeRingChannels; on-node rings under p2p_peers only): H100,
  // 2026-12-06, a 64-rank all-gather free-running ~1.06 us a slice on top of ~16 GB/s a
  // channel, and ~0.5 more paced.
  double gpu_slice_us = 1.5;
  friend bool operator==(const EmulationConfig&, const EmulationConfig&) = default;
};

// Whether GDR is on for `data` (the effective data policy: CRYSTAL_DATA may override the
// config's): emulation.gdr when set, else only under `none`.
[[nodiscard]] inline bool gdrEnabled(const EmulationConfig& e, DataPolicy data) {
  return e.gdr.value_or(data == DataPolicy::None);
}

// Calibration constants of the NCCL/network model. Unset = the model's documented default.
struct ModelConfig {
  std::optional<double> proxy_overhead_us;    // per NET step, proxy + plugin round trip
  std::optional<double> kernel_launch_us;     // per collective
  std::optional<int> max_channels;            // cap on NCCL channels
  std::vector<std::pair<std::string, double>> overrides;  // free-form name -> value
  friend bool operator==(const ModelConfig&, const ModelConfig&) = default;
};

struct Config {
  std::string source;  // file it came from ("<builtin>" for defaults), for error messages
  ClusterConfig cluster;
  JobConfig job;
  WorkloadConfig workload;
  EmulationConfig emulation;
  ModelConfig model;
  friend bool operator==(const Config&, const Config&) = default;
};

// Parse a config file. Throws InputError naming file, line and field on any problem
// (malformed YAML, unknown field, wrong type, layout that does not divide the world, ...).
// Implemented in graph/config_load.cc.
Config loadConfig(const std::string& path);
Config parseConfig(const std::string& yaml_text, const std::string& source_name);

// Semantic checks shared by the YAML loader and the graph-file reader (layout divides the
// world, ep divides dp, pp divides layers, ranks in range, ...). Throws InputError naming
// `config.source` and the field.
void checkConfig(const Config& config);

// The config as canonical YAML (every field, defaults included): `parseConfig` of the
// result gives back an equal config. Graph files embed it.
std::string toYaml(const Config& config);

}  // namespace crystal
