// Which NCCL operation each request on one connection belongs to, from the proxy-op
// starts NCCL's profiler reports (plugin/profiler/proxy_ops.h). A connection serves its
// operations in order, each with a known number of transfers, so requests are counted off
// against the queue of announced operations.
//
// Why: NCCL shares one connection between a ring channel and a tree whose chain runs
// through the same neighbour (same channel and peer). The data policy mirror pairs a ring
// receive with the real rank's send of the same operation and the same index in it; counting
// all requests of the shared send connection would let tree sends shift that pairing.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>

namespace crystal::plugin {

// A broadcast or reduce as NCCL's profiler described it (profiler/proxy_ops.h).
struct ChainOp {
  int root = -1;  // -1: not a chain
  bool reduce = false;
  std::uint64_t coll_bytes = 0;  // the collective's buffer; 0: unknown
  int chunk_bytes = 0;           // NCCL's chunk for the operation
  std::int64_t issued_ns = 0;    // when the program enqueued it (0: unknown)
};

class OpSegments {
 public:
  // `nranks`: the communicator's size (0: unknown); `self_rank`: the real rank's (-1: unknown).
  explicit OpSegments(int nranks = 0, int self_rank = -1)
      : nranks_(nranks), self_rank_(self_rank) {}
  struct Place {
    std::uint64_t op = 0;     // ProxyOpStart::op (0: an operation that is no collective)
    std::uint32_t index = 0;  // this request's position in the operation
    bool ring = false;
    // A ring all-gather on a communicator of known size: its ring steps per loop (nranks - 1);
    // 0 otherwise. Every step of a loop carries one rank's contribution (the mirror's source).
    int allgather_steps = 0;
    // What the real rank receives in this operation is never read: the interposer rewrites
    // its result (data policy mirror: a reduction, or a broadcast from a virtual root). No mirroring, and no data written.
    bool bytes_free = false;
    // The channels the collective runs on (NCCL's choice, after the tuner's); 0 = unknown.
    int channels = 0;
    // A ring broadcast or reduce: ring positions from the chain's head (a broadcast's root,
    // the rank after a reduce's) to the real rank, whose receives come down the chain (rings
    // run in rank order: the host's graph); -1: not a chain, or the ranks are unknown.
    int chain_hops = -1;
    // With chain_hops: the bytes of one of its transfers (NCCL's chunk, or the collective's
    // bytes per channel and transfer when less); 0 = unknown.
    std::uint64_t chain_unit_bytes = 0;
    std::int64_t chain_issued_ns = 0;  // with chain_hops: when the program enqueued it (0: unknown)
    std::uint32_t transfers = 0;       // the operation's requests on this connection
    bool chain_reduce = false;         // with chain_hops: a reduce (else a broadcast)
  };
  // NCCL announced an operation with `transfers` requests on this connection.
  void push(std::uint64_t op, int transfers, bool ring, bool allgather = false,
            bool bytes_free = false, int channels = 0, ChainOp chain = {});
  // The place of the next request; nullopt when no announced operation covers it (the
  // profiler is not loaded, or NCCL posted more than it announced).
  [[nodiscard]] std::optional<Place> next();
  [[nodiscard]] std::size_t pending() const;
  // Requests next() found no announced operation for.
  [[nodiscard]] std::uint64_t unplaced() const;

 private:
  struct Segment {
    std::uint64_t op;
    std::uint32_t transfers;
    bool ring;
    bool allgather;
    bool bytes_free;
    int channels;
    int chain_hops;
    std::uint64_t chain_unit_bytes;
    std::int64_t chain_issued_ns;
    bool chain_reduce;
  };
  const int nranks_;
  const int self_rank_;
  mutable std::mutex mu_;  // push: the profiler's caller; next: the net plugin's caller
  std::deque<Segment> queue_;
  std::uint32_t used_ = 0;  // requests of queue_.front() already placed
  std::uint64_t unplaced_ = 0;
};

}  // namespace crystal::plugin
