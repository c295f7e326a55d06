// `crystal simulate --sweep`: what NCCL-tests' *_perf binaries would print on the target,
// all ranks virtual, from the same NCCL model the emulation uses (replay/model).
//
// Conventions are NCCL-tests' (src/common.cu, src/<op>.cu, read from its source): a step
// size S in bytes becomes count = S / sizeof(type) elements; all-gather, reduce-scatter and
// all-to-all split it into per-rank blocks of (count / N) rounded down to 16 bytes; the
// printed size is the larger buffer; algbw = size / time, busbw = algbw x factor(N).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "crystal/config/config.h"
#include "crystal/model/nccl_model.h"

namespace crystal::sweep {

// The NCCL-tests binaries CrystalLLM knows, by their test name.
enum class TestOp { AllReduce, AllGather, ReduceScatter, AllToAll, SendRecv, Broadcast, Reduce };
inline constexpr TestOp kAllTestOps[] = {
    TestOp::AllReduce, TestOp::AllGather, TestOp::ReduceScatter, TestOp::AllToAll,
    TestOp::SendRecv,  TestOp::Broadcast, TestOp::Reduce};

// "allreduce", "allgather", "reducescatter", "alltoall", "sendrecv", "broadcast".
[[nodiscard]] std::string_view name(TestOp op);
// The binary: "all_reduce_perf", ...
[[nodiscard]] std::string_view binaryName(TestOp op);
// Accepts a name (either spelling above, or with '_' between words), a binary name, or a
// path to the binary (its last component). nullopt if none matches.
[[nodiscard]] std::optional<TestOp> parseTestOp(std::string_view text);
// "allreduce,allgather" -> ops; throws InputError naming the bad item and the valid ones.
[[nodiscard]] std::vector<TestOp> parseTestOpList(std::string_view list);

// NCCL-tests' busbw factor for N ranks: AllReduce 2(N-1)/N; AllGather, ReduceScatter,
// AllToAll (N-1)/N; Broadcast, SendRecv 1. Unlike model::busBwFactor this is 0 (not 1)
// for N = 1 where NCCL-tests prints 0.
[[nodiscard]] double busBwFactor(TestOp op, int nranks);

// Element type (NCCL-tests -d): name and size. Throws InputError for an unknown name.
struct DataType {
  std::string name = "float";
  int bytes = 4;
};
[[nodiscard]] DataType parseDataType(std::string_view name);

// One step of a sweep, in NCCL-tests' terms for `nranks` ranks.
struct TestSize {
  std::uint64_t size_bytes = 0;  // printed "size": max(send, receive buffer) of one rank
  std::uint64_t count = 0;       // printed "count": elements NCCL is called with
};
[[nodiscard]] TestSize testSize(TestOp op, std::uint64_t step_bytes, const DataType& type,
                                int nranks);

// A size argument as NCCL-tests reads -b/-e/-i: a number with an optional K, M or G suffix
// (binary: 1K = 1024). Throws InputError naming `flag`.
[[nodiscard]] std::uint64_t parseSizeArg(std::string_view flag, std::string_view text);

// At most this many sizes in one sweep (a table nobody reads, and memory, beyond it).
inline constexpr std::size_t kMaxSteps = 1'000'000;

// The step sizes of `-b min -e max -f factor` (factor > 1) or `-i increment` (factor 0).
// Throws InputError on min > max, factor 1, a step of 0, or more than kMaxSteps sizes.
[[nodiscard]] std::vector<std::uint64_t> stepSizes(std::uint64_t min_bytes, std::uint64_t max_bytes,
                                                   double factor, std::uint64_t increment);

// One row of the table: NCCL-tests' columns + what the model chose.
struct SweepRow {
  TestOp op = TestOp::AllReduce;
  std::uint64_t size_bytes = 0;
  std::uint64_t count = 0;
  std::string type;
  std::string redop;  // "sum" for reductions, "none" otherwise (NCCL-tests prints that)
  int root = -1;      // 0 for broadcast, -1 otherwise
  double time_us = 0;
  // Model rows of a loop of -n N >= 2: the time per operation after the loop's first, i.e.
  // (N x time_us - one operation alone) / (N - 1): what a program that times its first
  // operation apart measures for the rest (a first operation after the program waited for its
  // stream carries the program's own first call, which the model does not time; a chain's
  // fill). The same as time_us where the loop's operations all take the same time; -1: none.
  double time_after_first_us = -1;
  double algbw_GBps = 0;
  double busbw_GBps = 0;
  std::string algo;   // "Ring", "Tree", "PAT", "p2p", "a2a", "-" (nothing sent)
  std::string proto;  // "Simple", "LL", "LL128", "-"
  int channels = 0;
  // Emulated rows only (from the program's own table): its busbw for its own rank count,
  // its #wrong (-1 when it printed N/A) and whether this is the in-place measurement.
  double program_busbw_GBps = 0;
  std::int64_t wrong = -1;
  bool in_place = false;
};

// algbw and busbw from a size and a time, NCCL-tests' way (GB/s = 1e9 B/s); 0 for t <= 0.
void fillBandwidth(SweepRow& row, int nranks);

struct SweepOptions {
  std::vector<TestOp> ops{std::begin(kAllTestOps), std::end(kAllTestOps)};
  std::vector<std::uint64_t> steps;  // step sizes (stepSizes)
  DataType type;
  int nranks = 0;  // communicator size; <= 0: the cluster's world (nodes x gpus per node)
  // Only this protocol, as under NCCL_PROTO=<p> (`crystal emulate` sets Simple): the
  // algorithm is the cheapest of the tuner's cost table (NCCL's estimate) with this protocol,
  // with the model's channels when that is the model's own choice, else the communicator's
  // channel count (NCCL's own count, which it lowers for small sizes, is not modelled).
  std::optional<model::Proto> proto;
  // Broadcast (root 0) and ring all-gather, reduce-scatter and all-reduce rows as this rank
  // sees them (model::NcclModel::timeAtRank): what an emulation whose real rank is `rank`
  // measures. Unset: the whole operation (the slowest rank, as NCCL-tests reports it).
  std::optional<int> rank;
  // Operations back to back per row, as NCCL-tests' -n (its default, 20): the time is per
  // operation of the loop. A broadcast streams from one operation into the next (its chain's
  // fill is paid once; the root ends a send window ahead): model::NcclModel::loopTimeAtRank.
  // Other ops do not overlap and take one operation's time. 1: one operation alone.
  int iters = 20;
};

// "Simple", "LL", "LL128" (any case) -> protocol; throws InputError naming --proto.
[[nodiscard]] model::Proto parseProto(std::string_view text);

// How N consecutive ranks sit on the cluster: min(N, gpus per node) per node. Throws
// InputError when N does not fill whole nodes (N > gpus per node, N % gpus per node != 0).
[[nodiscard]] model::CommShape sweepShape(const ClusterConfig& cluster, int nranks);

// The table, op-major then size, as NCCL-tests would print it on the target (all ranks
// starting together; NCCL-tests reports the slowest rank, which for send/recv is a
// cross-node pair as soon as N exceeds one node).
[[nodiscard]] std::vector<SweepRow> runSweep(const model::NcclModel& model,
                                             const SweepOptions& options);

}  // namespace crystal::sweep
