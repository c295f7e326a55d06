#include "steps.h"

#include <algorithm>
#include <cmath>

#include "nccl_constants.h"

namespace crystal::model {
namespace {

int pi(Proto p) { return static_cast<int>(p); }
int ai(Algo a) { return static_cast<int>(a); }

// Bytes on the wire per data byte: LL carries 8 data bytes per 16-byte line (flag+data),
// LL128 120 per 128-byte line (device.h NCCL_LL128_LINEELEMS / DATAELEMS).
double wireFactor(Proto p) {
  return p == Proto::LL ? 2.0 : p == Proto::LL128 ? 128.0 / 120.0 : 1.0;
}

// The default fabric (2 us NIC + one 0.25 us leaf hop) is what NCCL's NET hwLatencies
// were measured on; the rest of each NET step latency is proxy/protocol overhead.
constexpr double kRefNetLatencyUs = 2.25;
// NCCL's NVLink hwLatencies include 0.6 us of link latency (its LL entry).
constexpr double kRefNvlLatencyUs = 0.6;

// Per-channel caps of the GPU side (tuning.cc per-channel maxima), GB/s of data.
double channelCap(const Placement& pl, Algo a, Proto p, int channels, int compcap) {
  const int cci = compcap >= 100 ? 3 : compcap >= 90 ? 2 : compcap >= 80 ? 1 : 0;
  const int n2 = pl.nnodes <= 2 ? pl.nnodes - 1 : 2;
  const int n1 = pl.nnodes == 1 ? cci : 0;
  if (p == Proto::LL) return nccl::kLlMaxBw[n1][n2] / channels;
  if (p == Proto::LL128) {
    return a == Algo::Tree ? nccl::kPerChMaxTreeLL128Bw[cci][n2]
                           : nccl::kPerChMaxRingLL128Bw[cci][n2];
  }
  if (a == Algo::Tree) return nccl::kPerChMaxTreeBw[cci][n2];
  return 1e30;
}

// The link carries wire bytes; the GPU-side caps are in data bytes.
Hop makeHop(double link_GBps, double cap_GBps, double alpha_us, Proto p) {
  const double data_GBps = std::min(link_GBps / wireFactor(p), cap_GBps);
  return Hop{alpha_us, 1.0 / (data_GBps * 1e3)};  // GB/s == 1e3 bytes/us
}

}  // namespace

HopPair hopTiming(const Placement& pl, Algo a, Proto p, int channels, const StepOptions& opt) {
  channels = std::max(1, channels);
  const Algo row = a == Algo::Tree ? Algo::Tree : Algo::Ring;
  const double cap = channelCap(pl, row, p, channels, opt.compcap);
  const double nvl_over =
      std::max(0.0, nccl::kHwLat[nccl::kNvlink][ai(row)][pi(p)] - kRefNvlLatencyUs);
  const double net_over =
      opt.proxy_overhead_us >= 0
          ? opt.proxy_overhead_us
          : std::max(0.0, nccl::kHwLat[nccl::kNet][ai(row)][pi(p)] - kRefNetLatencyUs);
  HopPair h;
  // Every channel's ring/tree crosses each GPU's NVLink (NVSwitch) once per step.
  h.nvl = makeHop(pl.nvlink_GBps / channels, cap, pl.nvlink_lat_us + nvl_over, p);
  // Channels are spread over the NICs the members drive; one channel uses one NIC.
  const double net_GBps = std::min(pl.node_net_GBps / channels, pl.nic_GBps * pl.fabric_factor);
  h.net = makeHop(net_GBps, cap, pl.net_lat_us + net_over, p);
  return h;
}

double ringChunkBytes(Proto p) {
  const double step = static_cast<double>(nccl::kBuffSize[pi(p)]) / nccl::kSteps;
  if (p == Proto::LL) return step / 2;           // half of each line is flags
  if (p == Proto::LL128) return step / 16 * 15;  // 15 of 16 words carry data
  return step * nccl::kRingChunkSteps;           // Simple: 4 steps per chunk
}

// LL and LL128 forward data line by line (flags travel with the data), so a step is
// pipelined through the next rank at the granularity of one pass of the thread block:
// 512 threads x 8 data bytes (LL), 640 threads x 8 bytes x 15/16 (LL128). Simple forwards
// whole slices.
double forwardGrain(Proto p) {
  return p == Proto::LL ? 512.0 * 8 : p == Proto::LL128 ? 640.0 * 8 * 15 / 16 : 0.0;
}

RingRun ringRun(const Placement& pl, Func f, Proto p, int channels, std::uint64_t bytes,
                const StepOptions& opt) {
  channels = std::max(1, channels);
  const HopPair h = hopTiming(pl, Algo::Ring, p, channels, opt);
  RingRun r;
  r.has_net = pl.multiNode();
  r.period = r.has_net ? pl.ppn : 1;
  r.nvl = h.nvl;
  r.net = h.net;
  const int n = pl.nranks;
  r.steps = f == Func::AllReduce ? 2 * (n - 1) : n - 1;
  // calcCollChunking: loopSize = nChannels * nranks * chunkSize; the kernel shrinks the
  // chunk of a short last loop. We spread the bytes evenly over the loops instead.
  const double per_channel = static_cast<double>(bytes) / channels;
  const double loop_bytes = static_cast<double>(n) * ringChunkBytes(p);
  r.loops = std::max<long>(1, static_cast<long>(std::ceil(per_channel / loop_bytes)));
  const double chunk = per_channel / (static_cast<double>(n) * r.loops);
  r.slices = p == Proto::Simple ? nccl::kRingChunkSteps / nccl::kRingSliceSteps
                                : std::max(1, static_cast<int>(std::ceil(chunk / forwardGrain(p))));
  r.slice_bytes = chunk / r.slices;
  if (p == Proto::Simple && opt.ring_slice_us > 0) {
    for (Hop* hop : {&r.nvl, &r.net}) {
      hop->unit_us = opt.ring_slice_us;
      hop->alpha_us = std::max(0.0, hop->alpha_us - opt.ring_slice_us);
    }
  }
  return r;
}

namespace {
long chunksOf(double per_channel, double chunk) {
  return std::max<long>(1, static_cast<long>(std::ceil(per_channel / chunk)));
}
}  // namespace

ChainRun treeRun(const Placement& pl, Proto p, int channels, std::uint64_t bytes,
                 const StepOptions& opt) {
  channels = std::max(1, channels);
  const HopPair h = hopTiming(pl, Algo::Tree, p, channels, opt);
  ChainRun c;
  c.nvl = h.nvl;
  c.net = h.net;
  // Up the tree and down again: the intra-node chain (ppn-1 hops) and log2(nodes) levels.
  const int levels = pl.nnodes > 1 ? static_cast<int>(std::ceil(std::log2(pl.nnodes))) : 0;
  c.nvl_hops = 2 * (pl.ppn - 1);
  c.net_hops = 2 * levels;
  // Tree chunks are one step (chunkSteps = 1 for non-ring algorithms); LL/LL128 forward
  // line by line.
  const double step = static_cast<double>(nccl::kBuffSize[pi(p)]) / nccl::kSteps;
  const double chunk = p == Proto::Simple ? step : forwardGrain(p);
  const double per_channel = static_cast<double>(bytes) / channels;
  c.units = chunksOf(per_channel, chunk);
  c.unit_bytes = per_channel / c.units;
  c.share = 2;  // each link carries a chunk up and another down per chunk of data
  return c;
}

ChainRun chainRun(const Placement& pl, Proto p, int channels, std::uint64_t bytes,
                  const StepOptions& opt) {
  channels = std::max(1, channels);
  const HopPair h = hopTiming(pl, Algo::Ring, p, channels, opt);
  ChainRun c;
  c.nvl = h.nvl;
  c.net = h.net;
  c.net_hops = pl.nnodes - 1;
  c.nvl_hops = pl.nranks - 1 - c.net_hops;
  const double step = static_cast<double>(nccl::kBuffSize[pi(p)]) / nccl::kSteps;
  const double chunk = p == Proto::Simple ? step : forwardGrain(p);
  const double per_channel = static_cast<double>(bytes) / channels;
  c.units = chunksOf(per_channel, chunk);
  c.unit_bytes = per_channel / c.units;
  c.share = 1;
  return c;
}

}  // namespace crystal::model
