// Where a communicator sits on the target cluster: NVLink domain inside a node, rail NICs,
// and the fat tree between nodes. Pure data; no NCCL knowledge here (that is nccl_graph.h).
#pragma once

#include "crystal/config/config.h"
#include "crystal/model/nccl_model.h"

namespace crystal::model {

// Link figures one member of a communicator sees, all per direction.
struct Placement {
  int nranks = 1;
  int nnodes = 1;
  int ppn = 1;             // members per node
  double nvlink_GBps = 0;  // one GPU's NVLink bandwidth (NVSwitch: to any peer)
  double nvlink_lat_us = 0;
  int nics_used = 0;         // NICs per node the members drive (rail-optimised: their own)
  double nic_GBps = 0;       // one NIC port
  double node_net_GBps = 0;  // nics_used * nic_GBps * fabric_factor
  double fabric_factor = 1;  // 1/oversubscription once traffic leaves the leaf switch
  int switch_hops = 0;       // switches crossed between two nodes of the communicator
  double net_lat_us = 0;     // one way: NIC latency + switch hops
  [[nodiscard]] bool multiNode() const { return nnodes > 1; }
};

class Topology {
 public:
  // Throws InputError naming the cluster field on values the model cannot use.
  explicit Topology(const ClusterConfig& cluster);

  // Members are assumed to lie on consecutive nodes (rank order), so a communicator of
  // up to nodesPerLeaf() nodes stays under one leaf switch per rail.
  [[nodiscard]] Placement place(const CommShape& shape) const;
  // The whole cluster as one communicator (world, all GPUs of every node).
  [[nodiscard]] CommShape worldShape() const;
  // Nodes under one leaf switch of a rail (rail-optimised: radix/2 downlinks, one per node).
  [[nodiscard]] int nodesPerLeaf() const;
  // Nodes one pod (a spine group of a 2-level tree) connects.
  [[nodiscard]] long nodesPerPod() const;

 private:
  ClusterConfig cluster_;
};

}  // namespace crystal::model
