// Where one NCCL operation's network transfers start and end on a connection, learned from
// NCCL's profiler: the proxy thread reports each operation it appends to a connection
// (ncclProfileProxyOp: channel, peer, direction, transfer count) before it posts any of its
// transfers, under the collective's event (algorithm). NCCL's proxy serves
// a connection's operations in that order, so the k-th request on a connection belongs to
// the operation whose transfers cover k.
//
// The net plugin observes these in emulation: a ring channel's connection that NCCL also
// uses for tree operations then knows which requests are the ring's (plugin/op_segments.h).
#pragma once

#include <cstdint>

namespace crystal::profiler {

struct ProxyOpStart {
  std::uint64_t comm = 0;  // NCCL's commHash (the net and tuner plugins get the same id)
  int channel = 0;
  int peer = -1;  // the remote rank in the communicator
  bool send = false;
  int transfers = 0;     // isend/irecv calls this operation makes on the connection
  std::uint64_t op = 0;  // the collective's identity in this process (> 0); 0: not one
  bool ring = false;     // the collective runs NCCL's ring algorithm
  bool allgather = false;  // the collective is an all-gather
  // An all-reduce, reduce-scatter, reduce or broadcast: the collectives whose result on the
  // real rank the interposer may rewrite under data policy mirror (plugin/mirror_result.h).
  bool rewritable = false;
  int channels = 0;  // the channels the collective runs on (its event's nChannels); 0: unknown
  // A broadcast or reduce (a chain through the ring from its head): its root (the
  // communicator's rank, NCCL's event's root); -1: another collective.
  int chain_root = -1;
  bool chain_reduce = false;     // with chain_root: a reduce (its head is the rank after the root)
  std::uint64_t coll_bytes = 0;  // the collective's buffer (count x type size); 0: unknown
  int chunk_bytes = 0;           // NCCL's chunk for this operation (its largest transfer)
  // When the program's thread enqueued the collective (CLOCK_MONOTONIC ns, the plugin's
  // clock); 0: unknown. A chain's head starts then, not when the real rank's proxy got to it.
  std::int64_t issued_ns = 0;
};

struct ProxyOpObserver {
  bool (*wanted)() = nullptr;  // asked at each communicator's profiler init
  void (*started)(const ProxyOpStart&) = nullptr;
  // Asked at each collective's event: whether a proxy operation of communicator `comm` can
  // be fed anywhere now (a connection asked for them); nullptr: always. NCCL connects a
  // collective's connections before it launches it, and the collective's event comes at the
  // launch, so an answer of no holds for the collective's proxy operations. A collective
  // event costs its thread an allocation and a lock (one per collective, on the program's
  // thread: its host time), its proxy operations' parent only.
  bool (*coll_wanted)(std::uint64_t comm) = nullptr;
};

// Called once by the net plugin at load; thread-safe against concurrent reads.
void setProxyOpObserver(ProxyOpObserver o) noexcept;
[[nodiscard]] ProxyOpObserver proxyOpObserver() noexcept;

}  // namespace crystal::profiler
