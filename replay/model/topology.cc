#include "topology.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "crystal/base/error.h"

namespace crystal::model {
namespace {

void requirePositive(double v, const char* field) {
  if (!(v > 0) || !std::isfinite(v)) {
    throw InputError(std::string("cluster.") + field + ": must be a positive number, got " +
                     std::to_string(v));
  }
}

}  // namespace

Topology::Topology(const ClusterConfig& cluster) : cluster_(cluster) {
  requirePositive(cluster.nodes, "nodes");
  requirePositive(cluster.gpus_per_node, "gpus_per_node");
  requirePositive(cluster.nvlink.bandwidth_GBps, "nvlink.bandwidth_GBps");
  requirePositive(cluster.fabric.nics_per_node, "fabric.nics_per_node");
  requirePositive(cluster.fabric.nic.bandwidth_GBps, "fabric.nic.bandwidth_GBps");
  requirePositive(cluster.fabric.levels, "fabric.levels");
  if (cluster.nvlink.latency_us < 0) throw InputError("cluster.nvlink.latency_us: must be >= 0");
  if (cluster.fabric.nic.latency_us < 0) {
    throw InputError("cluster.fabric.nic.latency_us: must be >= 0");
  }
  if (cluster.fabric.switch_latency_us < 0) {
    throw InputError("cluster.fabric.switch_latency_us: must be >= 0");
  }
  if (cluster.fabric.switch_radix < 2) {
    throw InputError("cluster.fabric.switch_radix: must be >= 2, got " +
                     std::to_string(cluster.fabric.switch_radix));
  }
  if (!(cluster.fabric.oversubscription >= 1.0)) {
    throw InputError("cluster.fabric.oversubscription: must be >= 1, got " +
                     std::to_string(cluster.fabric.oversubscription));
  }
  if (cluster.nodes > 1 && cluster.fabric.levels == 1 && cluster.nodes > nodesPerLeaf()) {
    throw InputError("cluster.fabric: " + std::to_string(cluster.nodes) +
                     " nodes do not fit a 1-level fabric of radix " +
                     std::to_string(cluster.fabric.switch_radix));
  }
}

int Topology::nodesPerLeaf() const {
  const int down = std::max(1, cluster_.fabric.switch_radix / 2);
  // Rail-optimised: every node has one port per rail on that rail's leaf. Otherwise all
  // of a node's NICs hang off the same leaf.
  if (cluster_.fabric.rail_optimised) return down;
  return std::max(1, down / cluster_.fabric.nics_per_node);
}

long Topology::nodesPerPod() const {
  return static_cast<long>(nodesPerLeaf()) * std::max(1, cluster_.fabric.switch_radix / 2);
}

CommShape Topology::worldShape() const {
  return CommShape{cluster_.world(), cluster_.nodes, cluster_.gpus_per_node};
}

Placement Topology::place(const CommShape& shape) const {
  // Members may be spread unevenly (the engine passes the largest count per node); the
  // model then treats every node as holding ranks_per_node members.
  if (shape.nranks < 1 || shape.nnodes < 1 || shape.ranks_per_node < 1 ||
      shape.nranks < shape.nnodes ||
      static_cast<long>(shape.nnodes) * shape.ranks_per_node < shape.nranks) {
    throw InputError("communicator shape: nranks " + std::to_string(shape.nranks) +
                     " cannot sit on nnodes " + std::to_string(shape.nnodes) +
                     " with at most ranks_per_node " + std::to_string(shape.ranks_per_node));
  }
  if (shape.ranks_per_node > cluster_.gpus_per_node) {
    throw InputError("communicator shape: ranks_per_node " + std::to_string(shape.ranks_per_node) +
                     " > cluster.gpus_per_node " + std::to_string(cluster_.gpus_per_node));
  }
  const FabricSpec& f = cluster_.fabric;
  Placement p;
  p.nranks = shape.nranks;
  p.nnodes = shape.nnodes;
  p.ppn = shape.ranks_per_node;
  p.nvlink_GBps = cluster_.nvlink.bandwidth_GBps;
  p.nvlink_lat_us = cluster_.nvlink.latency_us;
  p.nic_GBps = f.nic.bandwidth_GBps;
  // Rail-optimised nodes give every GPU its own NIC(s); a communicator with fewer members
  // per node than GPUs only drives its members' rails (no PXN in the model).
  const double nics_per_gpu = static_cast<double>(f.nics_per_node) / cluster_.gpus_per_node;
  p.nics_used =
      std::clamp(static_cast<int>(std::ceil(nics_per_gpu * p.ppn - 1e-9)), 1, f.nics_per_node);
  if (p.multiNode()) {
    if (p.nnodes <= nodesPerLeaf()) {
      p.switch_hops = 1;
    } else if (f.levels <= 2 || p.nnodes <= nodesPerPod()) {
      p.switch_hops = 3;
      p.fabric_factor = 1.0 / f.oversubscription;
    } else {
      p.switch_hops = 5;
      p.fabric_factor = 1.0 / f.oversubscription;
    }
    p.net_lat_us = f.nic.latency_us + p.switch_hops * f.switch_latency_us;
  }
  p.node_net_GBps = p.nics_used * p.nic_GBps * p.fabric_factor;
  return p;
}

}  // namespace crystal::model
