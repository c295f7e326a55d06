#include "nccl_graph.h"

#include <algorithm>
#include <cmath>
#include <span>

#include "nccl_constants.h"

namespace crystal::model {
namespace {

// First entry of a descending speed array that is <= cap (search.cc starts its search
// at the first speed the system can carry: `speedArray[i] > maxBw` skipped).
double speedAtMost(std::span<const double> speeds, double cap) {
  for (double s : speeds) {
    if (s <= cap + 1e-9) return s;
  }
  return speeds.back();
}

// Next higher entry of the speed array, if any (search.cc raises bwIntra of trees up to
// twice bwInter by stepping back through the same array).
double treeIntraSpeed(std::span<const double> speeds, double inter, double cap) {
  double best = inter;
  for (double s : speeds) {
    if (s > inter && s <= 2 * inter + 1e-9 && s <= cap + 1e-9) best = std::max(best, s);
  }
  return best;
}

// search.cc:ncclTopoDupChannels.
void dupChannels(NcclGraph& g, int compcap) {
  if (g.bwIntra < 25.0) return;
  if (compcap > 80 && g.bwIntra < 50.0 && g.nChannels > 4) return;
  const int dup = std::min(g.nChannels * 2, nccl::kMaxChannels / 2);
  const int factor = (dup + g.nChannels - 1) / g.nChannels;
  g.bwIntra /= factor;
  g.bwInter /= factor;
  g.nChannels = dup;
}

}  // namespace

CommGraphs searchGraphs(const Placement& place, const GraphOptions& opt) {
  const bool sm90 = opt.compcap >= 90;
  const std::span<const double> intra = sm90 ? std::span<const double>(nccl::kSm90SpeedIntra)
                                             : std::span<const double>(nccl::kSpeedIntra);
  const std::span<const double> inter = sm90 ? std::span<const double>(nccl::kSm90SpeedInter)
                                             : std::span<const double>(nccl::kSpeedInter);
  CommGraphs out;
  NcclGraph ring;
  ring.pattern = kPatternRing;
  ring.typeIntra = place.ppn > 1 ? kPathNvl : 0;  // LOC for 1 GPU per node
  if (!place.multiNode()) {
    // One node: rings over NVLink only; every channel crosses each GPU's NVLink once.
    const double s = speedAtMost(intra, place.nvlink_GBps);
    ring.bwIntra = ring.bwInter = s;
    ring.nChannels =
        std::clamp(static_cast<int>(place.nvlink_GBps / s + 1e-9), 1, nccl::kMaxChannels / 2);
    ring.typeInter = 0;
  } else {
    // Several nodes: each channel enters and leaves the node through one NIC; a NIC
    // carries floor(nic / speed) channels; the NVLink of a GPU carries all of them.
    double cap = place.nic_GBps;
    if (place.ppn > 1) cap = std::min(cap, place.nvlink_GBps);
    const double s = speedAtMost(inter, cap);
    const int per_nic = std::max(1, static_cast<int>(place.nic_GBps / s + 1e-9));
    ring.bwIntra = ring.bwInter = s;
    ring.nChannels = std::clamp(place.nics_used * per_nic, 1, nccl::kMaxChannels / 2);
    ring.typeInter = opt.nic_path;
  }
  NcclGraph tree = ring;
  // 1 GPU per node: search.cc turns every non-ring pattern into PATTERN_TREE.
  tree.pattern = place.ppn == 1 ? kPatternTree : kPatternBalancedTree;
  if (place.multiNode()) {
    const double intra_cap = place.ppn > 1 ? place.nvlink_GBps / ring.nChannels : 2 * ring.bwInter;
    tree.bwIntra = treeIntraSpeed(inter, ring.bwInter, intra_cap);
  }
  dupChannels(ring, opt.compcap);
  dupChannels(tree, opt.compcap);
  // connect.cc:ncclTopoPostset: channels are duplicated (channel c+n copies c) ...
  int nc = std::min(nccl::kMaxChannels, std::min(ring.nChannels, tree.nChannels) * 2);
  // ... and on sm90+ multi-node with fast rings, doubled again below 16 channels.
  if (opt.compcap >= 90 && place.multiNode() && ring.bwIntra > 45.0 && nc < 16) {
    nc = std::min(nccl::kMaxChannels, 2 * nc);
  }
  if (opt.max_channels > 0) nc = std::min(nc, opt.max_channels);
  out.ring = ring;
  out.tree = tree;
  out.commChannels = std::max(1, nc);
  return out;
}

}  // namespace crystal::model
