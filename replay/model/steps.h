// How NCCL moves one collective as steps over links: per-channel hop timing (latency and
// bandwidth of one step over NVLink or the NET) and the step/chunk/slice counts of
// enqueue.cc:calcCollChunking. Shared by the step-level recurrences (pipeline.h), their
// closed forms (closed_form.h) and the plugin's netStep, so all three agree.
#pragma once

#include <cstdint>

#include "crystal/model/chain_kernel.h"
#include "topology.h"

namespace crystal::model {

// One step over one link on one channel: fixed latency + bytes * us_per_byte. `unit_us` is
// GPU time per unit that keeps the channel busy besides the bytes (the kernel's own work for
// a slice): it lengthens tx, the channel's occupancy, and ringRun takes it out of alpha_us,
// so a unit's crossing (alpha + tx) stays the step latency it was.
struct Hop {
  double alpha_us = 0;
  double us_per_byte = 0;  // per data byte (protocol wire overhead included)
  double unit_us = 0;
  [[nodiscard]] double tx(double bytes) const { return unit_us + bytes * us_per_byte; }
};

// Calibration of the step model (ModelConfig and its free-form overrides).
struct StepOptions {
  int compcap = 90;
  double proxy_overhead_us = -1;  // NET per-step overhead; < 0: derived from NCCL's hwLat
  // What one NCCL channel moves per direction in a NET p2p transfer (send and receive of
  // the same channel under way, Simple, GDR), GB/s; 0 = no cap. Measured with NCCL 2.28.9 on
  // an H200 (2026-12-03: sendrecv_perf 14.3 GB/s at N >= 64 with 1 channel per peer, 28.3
  // at N = 8 with 2; hybrid_nccl 1 GiB send/recv 14.35 GB/s): the GPU's pace, not the NIC's.
  double p2p_net_channel_GBps = 14.3;
  // GPU time per slice of a Simple ring collective that occupies the channel: NCCL's kernel
  // waits, syncs its warps and posts each slice besides moving its bytes, and no other slice
  // of that channel moves meanwhile. NCCL's latency tables count it once per step; a channel
  // streaming slices pays it for each. Measured with NCCL 2.28.9 on an H200 (2026-12-04, the
  // real rank's ring kernel with free-running peers on the target's 16 channels, 64 ranks,
  // docs/model.md "GPU time per ring slice"): a ring step of 2 slices took 3.5-4.2 us plus
  // its bytes at 23-31 GB/s. 0 = none (the model before 2026-12-04).
  double ring_slice_us = 1.9;
  // The real kernel of a ring broadcast or reduce (a chain, one slice a step) at one member,
  // the fastest it runs with its peers never making it wait, against its bytes a channel
  // (ChainKernel: measured points). No link model can make an operation faster
  // (NcclModel::loopTimeAtRank); it binds up to ~16 MiB on 16 channels. Measured with NCCL
  // 2.28.9, the real rank of 64 under emulation.p2p_peers with free-running peers
  // (CRYSTAL_P2P_PACE=0), 16 channels, 300 back to back (docs/model.md "Broadcast and reduce
  // back to back"; tests/gpu/hybrid/README.md, twenty-third and twenty-fourth sessions), on
  // the H200 (the built-in target's GPU). Broadcast (the root's send; a member's recvCopySend
  // took the same within 3 % on the H100): 1 / 4 / 16 / 64 MiB 14.3 / 22.1 / 53.2 / 135.7 us.
  // Reduce (a member's recvReduceSend): the H100's member at 1 / 4 MiB, 12.7 / 19.4 (up to 1
  // MiB the program's host time, ~12 us an operation, bounds it); at 16 / 64 MiB the H200's
  // root (recvReduceCopy, 41.0 / 101.5) times the H100's member/root ratio there (1.027):
  // 42.1 / 104.2. `chain_kernel_scale` multiplies both (0: no floor).
  ChainKernel chain_broadcast{
      {0, 12.0}, {64 << 10, 14.3}, {256 << 10, 22.1}, {1 << 20, 53.2}, {4 << 20, 135.7}};
  ChainKernel chain_reduce{
      {0, 11.4}, {64 << 10, 12.7}, {256 << 10, 19.4}, {1 << 20, 42.1}, {4 << 20, 104.2}};
};

// The same kernels on the H100 (readModelOptions picks them for a cluster.gpu.model naming
// one): rank 5 of 64, free-running peers, 300 back to back, 16 channels (tests/gpu/hybrid/
// README.md, twenty-fifth session), broadcast (recvCopySend) 1 / 4 / 16 / 64 MiB 15.1 / 23.9 /
// 55.3 / 152.2 us, reduce (recvReduceSend) 13.2 / 19.5 / 45.4 / 118.6; the fixed work (0
// bytes) the H200's times the 1 MiB point's ratio. The roots read within 6 % of them.
inline ChainKernel h100ChainBroadcast() {
  return {{0, 12.7}, {64 << 10, 15.1}, {256 << 10, 23.9}, {1 << 20, 55.3}, {4 << 20, 152.2}};
}
inline ChainKernel h100ChainReduce() {
  return {{0, 11.8}, {64 << 10, 13.2}, {256 << 10, 19.5}, {1 << 20, 45.4}, {4 << 20, 118.6}};
}

// Hop timing of NVLink (intra-node) and NET (inter-node) steps for one channel of a call
// using `channels` channels.
struct HopPair {
  Hop nvl;
  Hop net;
};
[[nodiscard]] HopPair hopTiming(const Placement& place, Algo a, Proto p, int channels,
                                const StepOptions& opt);

// A ring collective as NCCL runs it on one channel (all channels run in parallel).
//   period: ring positions per node (ppn; 1 on a single node, where every hop is NVLink);
//   the last position of each node sends over the NET when the ring spans nodes.
struct RingRun {
  int period = 1;
  bool has_net = false;
  Hop nvl, net;
  int steps = 1;   // ring steps per loop: 2(n-1) all-reduce, n-1 all-gather/r-scatter
  long loops = 1;  // loops over the buffer (calcCollChunking nLoops)
  int slices = 1;  // slices per chunk (Simple: chunkSteps/sliceSteps = 2)
  double slice_bytes = 0;
  [[nodiscard]] const Hop& hopOf(int cls) const { return has_net && cls == period - 1 ? net : nvl; }
  [[nodiscard]] long units() const { return loops * steps * static_cast<long>(slices); }
};
[[nodiscard]] RingRun ringRun(const Placement& place, Func f, Proto p, int channels,
                              std::uint64_t bytes, const StepOptions& opt);

// A chain of hops every chunk goes through in order (tree up+down, broadcast pipeline).
struct ChainRun {
  int nvl_hops = 0;
  int net_hops = 0;
  Hop nvl, net;
  long units = 1;  // chunks per channel
  double unit_bytes = 0;
  // A link is busy share x tx per chunk (tree: it also carries the other direction's
  // chunk, share 2) while one chunk crosses it in tx.
  double share = 1;
};
// Tree all-reduce (double binary tree across nodes, chain inside a node).
[[nodiscard]] ChainRun treeRun(const Placement& place, Proto p, int channels, std::uint64_t bytes,
                               const StepOptions& opt);
// Ring broadcast/reduce: a pipeline through n-1 hops.
[[nodiscard]] ChainRun chainRun(const Placement& place, Proto p, int channels, std::uint64_t bytes,
                                const StepOptions& opt);

// Chunk (data bytes) of one step per protocol for rings, calcCollChunking facts.
[[nodiscard]] double ringChunkBytes(Proto p);

}  // namespace crystal::model
