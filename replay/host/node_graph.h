// NCCL_GRAPH_FILE for a real rank R whose node's other GPUs are virtual (HostOptions::p2p_peers,
// docs/host.md "Rings and trees of the real rank's node").
//
// NCCL's graph search on the fused node puts every ring channel's NET entry on the node's
// first GPU and its exit on the last (the plugin's NICs hang off the CPU), so a real rank at
// either end of its node receives or sends over the NET on every channel. NCCL's proxy thread
// then sets its pace (rank 0 of 64, 1 MiB all-gather: 2016 NET receives an operation at
// ~1.13 us each where the model's step leaves 156 ns; tests/gpu/hybrid/README.md, fourteenth
// session), and its tree chain on odd channels is not the target's (7, 1, ..., 6, 0). NCCL
// 2.28.9 loads a graph from NCCL_GRAPH_FILE instead of searching (graph/search.cc
// ncclTopoCompute, ncclTopoGetGraphFromXml: ids 0 ring and 1 tree, each channel a list of
// `net` and `gpu` devs, GPUs named by NVML index). The host writes one per real process
// before NCCL reads it (at the peerInfo all-gather, ahead of the graph search):
// - the ring (id 0): the node's members in rank order, rotated when R is at an end so that R
//   sits between two virtual GPUs (nodeRingOrder). A ring collective's time is the same at
//   every position of the ring; R's ring neighbours change (R = local 0: 7 before it, 1 after)
//   and the P2P pacing times R's receives and sends by the model of R's own place in the
//   target's ring (plugin/p2p_pacer.h), whatever peer NCCL connected;
// - the tree (id 1): the members in rank order on every channel, the chain the model and the
//   P2P tree pacing take (live/tree_timing.h TreePosition).
// Every other comm of the process (one node, no virtual GPU on R's node) gets an empty
// <graphs>: NCCL then searches as without the file.
#pragma once

#include <string>
#include <vector>

namespace crystal::host {

// The node's local indices in ring-chain order: 0..members-1, except that a real rank at
// index 0 or members-1 of a node of 3 or more in a comm over several nodes is moved between
// two members: [2, ..., m-1, 0, 1] for index 0, [1, ..., m-1, 0] for index m-1 (its next is
// the chain's tail, so every other member lies between the head and R's previous).
[[nodiscard]] std::vector<int> nodeRingOrder(int members, int real_local, bool multi_node);

struct NodeGraph {
  std::vector<int> devs;  // NVML index (XML `dev`) of each member, in local (rank) order
  int real_local = 0;     // R's local index
  bool multi_node = true;
  int channels = 2;       // graph channels (NCCL_MIN_NCHANNELS duplicates them)
  int net_dev = 0;        // the plugin NIC every channel enters and leaves by
};

// The <graphs> document for NCCL_GRAPH_FILE; throws InputError for devs outside [0, 32) or
// repeated, fewer than two members or a bad local index.
[[nodiscard]] std::string nodeGraphXml(const NodeGraph& g);
// A document with no graph: NCCL searches every graph as without the file.
[[nodiscard]] std::string emptyGraphXml();

}  // namespace crystal::host
