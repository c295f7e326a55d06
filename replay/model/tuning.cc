#include "tuning.h"

#include <algorithm>
#include <bit>
#include <limits>

#include "nccl_constants.h"

namespace crystal::model {
namespace {

int log2i(std::uint64_t v) { return v == 0 ? -1 : 63 - std::countl_zero(v); }
int ai(Algo a) { return static_cast<int>(a); }
int pi(Proto p) { return static_cast<int>(p); }

// Index of the bandwidth tables by node count: N1, N2, N4+.
int nodeIndex(int nnodes) { return nnodes <= 2 ? nnodes - 1 : 2; }
int compCapIndex(int cc) { return cc >= 100 ? 3 : cc >= 90 ? 2 : cc >= 80 ? 1 : 0; }

}  // namespace

Tuning::Tuning(const Placement& place, const CommGraphs& graphs, const TuneOptions& opt)
    : place_(place), graphs_(graphs), opt_(opt) {}

int Tuning::maxThreads(Algo a, Proto p) const {
  // tuning.cc:ncclTopoTuneModel, maxThreads.
  if (p == Proto::LL) return nccl::kLlMaxThreads;
  if (p == Proto::LL128) return nccl::kLl128MaxThreads;
  if (a == Algo::Ring) {
    return graphs_.ring.bwIntra * graphs_.ring.nChannels <= nccl::kPciBw ? 256
                                                                         : nccl::kSimpleMaxThreads;
  }
  if (a == Algo::Tree) return nccl::kSimpleMaxThreads;
  // PAT's maxThreads stays 0 in ncclTopoTuneModel (NCCL prints "Max NThreads 0"), so the
  // channel-reduction loop of topoGetAlgoInfo never shrinks PAT's channels.
  if (a == Algo::Pat) return 0;
  return nccl::kMaxThreads;
}

TuneEntry Tuning::entry(Func f, Algo a, Proto p) const {
  const int nranks = place_.nranks;
  const int nnodes = place_.nnodes;
  if (nranks <= 1) return {0, 0, "a 1-rank communicator moves no data"};
  if (f == Func::SendRecv || f == Func::Send || f == Func::Recv || f == Func::AllToAll) {
    return {0, 0, "point-to-point is not tuned by ncclTopoTuneModel (see p2pTime)"};
  }
  // Algorithms NCCL has but we do not model (they need NVLS/SHARP hardware models).
  if (a == Algo::Nvls || a == Algo::NvlsTree) return {0, 0, "NVLS not modelled"};
  if (a == Algo::CollNetDirect || a == Algo::CollNetChain) {
    return {0, 0, "CollNet not modelled (needs a collnet plugin; NCCL disables it by default)"};
  }
  const bool bcast_reduce = f == Func::Broadcast || f == Func::Reduce;
  const bool ag_rs = f == Func::AllGather || f == Func::ReduceScatter;
  if (bcast_reduce && a != Algo::Ring) return {0, 0, "Broadcast/Reduce only use Ring"};
  if (ag_rs && a == Algo::Tree) return {0, 0, "Tree only for AllReduce"};
  if (f == Func::AllReduce && a == Algo::Pat) return {0, 0, "PAT not for AllReduce"};
  if (a == Algo::Pat) {
    if (p != Proto::Simple) return {0, 0, "PAT only with Simple"};
    // tuning.cc:ncclPatEnable: 1 GPU per node, host (not device) networking.
    if (nnodes != nranks) return {0, 0, "PAT only with 1 GPU per node"};
  }
  const NcclGraph& g = (a == Algo::Ring) ? graphs_.ring : graphs_.tree;

  const int cci = compCapIndex(opt_.compcap);
  const int n2 = nodeIndex(nnodes);
  const int n1 = nnodes == 1 ? cci : (opt_.amd_cpu ? 1 : 0);
  const double ll_max_bw = nccl::kLlMaxBw[n1][n2];
  const double ppn = static_cast<double>(nranks) / nnodes;
  const int nsteps = f == Func::AllReduce ? 2 * (nranks - 1) : ag_rs ? nranks - 1 : nranks;

  // Bandwidth (tuning.cc: busBw and its refinements, then bus -> algorithm bandwidth).
  double bw = nnodes <= 2 ? g.bwIntra : g.bwInter;
  double bus = g.nChannels * bw;
  if (a == Algo::Ring && p == Proto::LL) bus = std::min(ll_max_bw, bus * .5);
  if (a == Algo::Ring && p == Proto::LL128) {
    bus = std::min(bus * 0.92, g.nChannels * nccl::kPerChMaxRingLL128Bw[cci][n2]);
  }
  if (a == Algo::Tree && f == Func::AllReduce) {
    bus = std::min(bus * .92, g.nChannels * nccl::kPerChMaxTreeBw[cci][n2]);
  }
  if (a == Algo::Tree && p == Proto::LL) bus = std::min(bus * 1.0 / 3.8, ll_max_bw);
  if (a == Algo::Tree && p == Proto::LL128) {
    bus = std::min(bus * (nnodes == 1 ? 7.0 / 9.0 : 120.0 / 128.0),
                   g.nChannels * nccl::kPerChMaxTreeLL128Bw[cci][n2]);
  }
  if (a == Algo::Tree && g.pattern == kPatternTree) bus *= .85;
  if (a == Algo::Pat) bus *= .75;
  if (!(a != Algo::Ring && ag_rs)) {
    bus *= a == Algo::Ring ? static_cast<double>(nranks) / nsteps : .5;
  }

  // Latency.
  // tuning.cc compares typeIntra with LINK_NVL (== PATH_NVL): a lone GPU (LOC) counts as PCI.
  const int intra_hw = g.typeIntra == kPathNvl ? nccl::kNvlink : nccl::kPci;
  const int hw = nnodes == 1 ? intra_hw : nccl::kNet;
  double lat = nccl::kBaseLat[ai(a)][pi(p)];
  double intra_lat = nccl::kHwLat[intra_hw][ai(a)][pi(p)];
  double inter_lat = (ppn == 1 ? nccl::kHwLat[nccl::kNet][ai(Algo::Tree)][pi(p)]
                               : nccl::kHwLat[nccl::kNet][ai(a)][pi(p)]) +
                     g.latencyInter;
  if (p == Proto::Simple) inter_lat += g.latencyInter;  // flush
  if (a == Algo::Ring) {
    const double l = nccl::kHwLat[hw][ai(a)][pi(p)];
    if (bcast_reduce) {
      lat += l;  // our rings have sameChannels
    } else {
      double net_overhead = 0;
      if (nnodes > 1) {
        net_overhead = opt_.amd_cpu ? 2.0 : nccl::kNetOverheadUs;
        if (p == Proto::Simple) net_overhead *= 3;
      }
      intra_lat = std::max(intra_lat, net_overhead);
      const int inter_steps = nnodes == 1            ? 0
                              : f == Func::AllReduce ? 2 * (nnodes - 1)
                                                     : nnodes - 1;
      lat += (nsteps - inter_steps) * intra_lat + inter_steps * inter_lat;
    }
  } else if (a == Algo::Tree) {
    lat += 2 * ((nranks / nnodes - 1) * intra_lat + log2i(nnodes) * inter_lat);
  } else if (a == Algo::Pat) {
    lat += log2i(nnodes) * (inter_lat / 3.5) + nranks * 2.8;
  }
  // LL128 enable rules (tuning.cc, pEnable == 2 branch), applied after the table is
  // filled: NCCL still prints the latency of a disabled cell.
  std::string_view off;
  if (p == Proto::LL128) {
    const bool inter_ok = opt_.compcap >= 90 ? g.typeInter <= kPathPxn : g.typeInter <= kPathPxb;
    if (!opt_.ll128)
      off = "LL128 disabled by the model config";
    else if (!inter_ok)
      off = "LL128 off: GPU-NIC path beyond PXN";
    else if (g.typeIntra > kPathNvb)
      off = "LL128 off: intra-node path beyond NVB";
    else if (opt_.compcap < 70)
      off = "LL128 needs sm70+";
  }
  if (!off.empty()) return {lat, 0, off};
  if (!(bus > 0)) return {lat, 0, "zero bandwidth on this topology"};
  return {lat, bus, ""};
}

double Tuning::estimate(Func f, Algo a, Proto p, std::uint64_t bytes) const {
  const TuneEntry e = entry(f, a, p);
  if (e.bw_GBps <= 0) return -1.0;
  double bw = e.bw_GBps;
  double lat = e.lat_us;
  const int log_size = log2i(bytes >> 6);
  if (a == Algo::Tree && f == Func::AllReduce && log_size >= 0 && log_size < 23) {
    bw *= nccl::kTreeCorrection[pi(p)][log_size];
  }
  if (a == Algo::Ring && p == Proto::Simple && place_.nnodes > 1 && f == Func::AllReduce &&
      bytes / (static_cast<std::uint64_t>(graphs_.commChannels) * place_.nranks) >= 64) {
    lat *= opt_.compcap < 80 ? 1.9 : 1.4;  // "plateau effect of ring"
  }
  // NCCL computes in float; keep the same rounding so ties break the same way.
  return static_cast<float>(lat) + static_cast<float>(bytes) / (1000.0f * static_cast<float>(bw));
}

Tuning::Pick Tuning::pick(Func f, std::uint64_t bytes) const {
  Pick best;
  double min_time = 3600000000.0;
  for (int a = 0; a < kNumAlgos; ++a) {
    for (int p = 0; p < kNumProtos; ++p) {
      const double t = estimate(f, static_cast<Algo>(a), static_cast<Proto>(p), bytes);
      if (t >= 0 && t < min_time) {
        min_time = t;
        best = {static_cast<Algo>(a), static_cast<Proto>(p), t, true};
      }
    }
  }
  return best;
}

int Tuning::channels(Algo a, Proto p, std::uint64_t bytes) const {
  // enqueue.cc:topoGetAlgoInfo, Ring/Tree channel tuning.
  int nc = graphs_.commChannels;
  const int nt = maxThreads(a, p);
  std::uint64_t threshold = p == Proto::LL      ? nccl::kLlThreadThreshold
                            : p == Proto::LL128 ? nccl::kLl128ThreadThreshold
                                                : nccl::kSimpleThreadThreshold;
  if (a == Algo::Ring && p == Proto::LL) threshold *= place_.nranks;
  while (bytes < static_cast<std::uint64_t>(nc) * nt * threshold && nc >= 2) --nc;
  return nc;
}

}  // namespace crystal::model
