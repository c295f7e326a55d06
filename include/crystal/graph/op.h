// One operation of a rank's execution stream.
//
// Contract between graph/ (producer) and replay/ (consumer). An Op is 40 bytes of plain
// data so that a rank's stream can be materialised into a reused vector cheaply.
#pragma once

#include <cstdint>
#include <string_view>

namespace crystal::graph {

enum class OpKind : std::uint8_t {
  Compute,     // duration_us on `stream`
  Collective,  // coll on communicator `comm`
  Send,        // p2p to global rank `peer` in communicator `comm`
  Recv,        // p2p from global rank `peer` in communicator `comm`
  GroupBegin,  // ncclGroupStart: following Send/Recv/Collective until GroupEnd form one launch
  GroupEnd,
  Alloc,       // bytes allocated (device memory)
  Free,        // bytes freed
  Record,      // record event `tag` on `stream`
  Wait,        // `stream` waits for event `tag`
  IterationMark,  // start of iteration `tag` (all streams)
};

// Numbering follows NCCL's ncclFunc_t where NCCL has the function.
enum class CollKind : std::uint8_t {
  Broadcast = 0,
  Reduce = 1,
  AllGather = 2,
  ReduceScatter = 3,
  AllReduce = 4,
  AllToAll = 8,   // grouped send/recv to every member, equal sizes
  AllToAllv = 9,  // grouped send/recv, sizes differ; `bytes` is this rank's total send bytes
};

// Numbering follows ncclDataType_t.
enum class DType : std::uint8_t {
  Int8 = 0, Uint8 = 1, Int32 = 2, Uint32 = 3, Int64 = 4, Uint64 = 5,
  Float16 = 6, Float32 = 7, Float64 = 8, BFloat16 = 9, Float8e4m3 = 10, Float8e5m2 = 11,
};

// Numbering follows ncclRedOp_t.
enum class RedOp : std::uint8_t { Sum = 0, Prod = 1, Max = 2, Min = 3, Avg = 4 };

struct Op {
  OpKind kind = OpKind::Compute;
  std::uint8_t stream = 0;
  CollKind coll = CollKind::AllReduce;
  DType dtype = DType::BFloat16;
  RedOp red = RedOp::Sum;
  std::int32_t comm = -1;  // global communicator id (CommTable), -1 if none
  std::int32_t peer = -1;  // Send/Recv: global rank; Broadcast/Reduce: root's rank in comm
  std::uint32_t tag = 0;   // Send/Recv: order per (comm, peer); Record/Wait: event id;
                           // IterationMark: iteration number
  // Collective: NCCL's tuning size (nccl-tests "size"): all-reduce/broadcast/reduce: buffer
  // bytes; all-gather: total output bytes; reduce-scatter: total input bytes; all-to-all:
  // this rank's total send bytes. Send/Recv: payload. Alloc/Free: bytes.
  std::uint64_t bytes = 0;
  double duration_us = 0;  // Compute only
  std::uint32_t name = 0;  // index into the graph's string table ("fwd.attn", ...), 0 = none

  friend bool operator==(const Op&, const Op&) = default;
};

std::string_view toString(OpKind k);
std::string_view toString(CollKind k);
std::string_view toString(DType t);
std::size_t dtypeSize(DType t);

}  // namespace crystal::graph
