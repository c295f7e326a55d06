// The ring and tree graphs NCCL 2.28's topology search would build for a communicator on
// the target (graph/search.cc:ncclTopoCompute + ncclTopoDupChannels) and the channel count
// after connect.cc:ncclTopoPostset. A rule-based reproduction of the search's outcome for
// the two node kinds we model (NVSwitch nodes with rail NICs, and 1 GPU per node), not a
// search.
#pragma once

#include "topology.h"

namespace crystal::model {

// NCCL path types (graph/topo.h PATH_*) that decide LL128 enablement.
inline constexpr int kPathNvl = 1;  // NVSwitch counts as a direct NVLink path
inline constexpr int kPathNvb = 2;
inline constexpr int kPathPxb = 5;
inline constexpr int kPathPxn = 7;
inline constexpr int kPathPhb = 8;

// NCCL_TOPO_PATTERN_* (include/graph.h).
inline constexpr int kPatternBalancedTree = 1;
inline constexpr int kPatternTree = 3;
inline constexpr int kPatternRing = 4;

struct NcclGraph {
  int nChannels = 1;
  double bwIntra = 0;  // GB/s per channel
  double bwInter = 0;
  int typeIntra = 0;  // PATH_* inside a node
  int typeInter = 0;  // PATH_* GPU <-> NIC
  int pattern = kPatternRing;
  double latencyInter = 0;  // net plugin's reported latency (IB and Socket report 0)
};

struct CommGraphs {
  NcclGraph ring;
  NcclGraph tree;        // also used by PAT (graphs[NCCL_ALGO_PAT] is the tree graph)
  int commChannels = 1;  // comm->nChannels
};

struct GraphOptions {
  int compcap = 90;
  int nic_path = kPathPxb;  // GPU<->NIC path: PXB on DGX, PHB when the NIC hangs off the CPU
  int max_channels = 0;     // NCCL_MAX_NCHANNELS-like cap (0 = none)
};

[[nodiscard]] CommGraphs searchGraphs(const Placement& place, const GraphOptions& opt);

}  // namespace crystal::model
