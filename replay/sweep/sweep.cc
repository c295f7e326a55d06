// NCCL-tests' sizing and bandwidth rules, and the model-driven sweep
// (include/crystal/sweep/sweep.h).
#include "crystal/sweep/sweep.h"

#include <fmt/core.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>

#include "crystal/base/error.h"

namespace crystal::sweep {
namespace {

struct OpNames {
  TestOp op;
  std::string_view name;
  std::string_view binary;
};
constexpr std::array<OpNames, 7> kOpNames{{
    {TestOp::AllReduce, "allreduce", "all_reduce_perf"},
    {TestOp::AllGather, "allgather", "all_gather_perf"},
    {TestOp::ReduceScatter, "reducescatter", "reduce_scatter_perf"},
    {TestOp::AllToAll, "alltoall", "alltoall_perf"},
    {TestOp::SendRecv, "sendrecv", "sendrecv_perf"},
    {TestOp::Broadcast, "broadcast", "broadcast_perf"},
    {TestOp::Reduce, "reduce", "reduce_perf"},
}};

// NCCL-tests' type names (src/common.cu test_typenames) and sizes.
struct TypeName {
  std::string_view name;
  int bytes;
};
constexpr std::array<TypeName, 12> kTypes{{{"int8", 1},
                                           {"uint8", 1},
                                           {"int32", 4},
                                           {"uint32", 4},
                                           {"int64", 8},
                                           {"uint64", 8},
                                           {"half", 2},
                                           {"float", 4},
                                           {"double", 8},
                                           {"bfloat16", 2},
                                           {"f8e4m3", 1},
                                           {"f8e5m2", 1}}};

std::string withoutUnderscores(std::string_view s) {
  std::string out;
  for (char c : s)
    if (c != '_') out.push_back(c);
  return out;
}

bool isReduction(TestOp op) {
  return op == TestOp::AllReduce || op == TestOp::ReduceScatter || op == TestOp::Reduce;
}

// Ops with a root (NCCL-tests' -r, default 0): chains through the ring order.
bool isRooted(TestOp op) { return op == TestOp::Broadcast || op == TestOp::Reduce; }

// Per-rank blocks of ops that split the buffer over ranks: (count / N) rounded down to a
// multiple of 16 bytes (NCCL-tests' "& ~(16/eltSize - 1)").
std::uint64_t blockCount(std::uint64_t count, int nranks, int elt) {
  const std::uint64_t per_rank = count / static_cast<std::uint64_t>(nranks);
  const std::uint64_t align = elt >= 16 ? 1 : static_cast<std::uint64_t>(16 / elt);
  return per_rank & ~(align - 1);
}

model::Func modelFunc(TestOp op) {
  switch (op) {
    case TestOp::AllReduce:
      return model::Func::AllReduce;
    case TestOp::AllGather:
      return model::Func::AllGather;
    case TestOp::ReduceScatter:
      return model::Func::ReduceScatter;
    case TestOp::Broadcast:
      return model::Func::Broadcast;
    case TestOp::Reduce:
      return model::Func::Reduce;
    case TestOp::AllToAll:
      return model::Func::AllToAll;
    case TestOp::SendRecv:
      return model::Func::SendRecv;
  }
  return model::Func::AllReduce;
}

}  // namespace

std::string_view name(TestOp op) {
  for (const auto& n : kOpNames)
    if (n.op == op) return n.name;
  return "?";
}

std::string_view binaryName(TestOp op) {
  for (const auto& n : kOpNames)
    if (n.op == op) return n.binary;
  return "?";
}

std::optional<TestOp> parseTestOp(std::string_view text) {
  const std::size_t slash = text.rfind('/');
  if (slash != std::string_view::npos) text = text.substr(slash + 1);
  for (const auto& n : kOpNames)
    if (text == n.binary) return n.op;
  const std::string bare = withoutUnderscores(text);
  for (const auto& n : kOpNames)
    if (bare == n.name) return n.op;
  return std::nullopt;
}

std::vector<TestOp> parseTestOpList(std::string_view list) {
  std::vector<TestOp> ops;
  std::size_t pos = 0;
  while (pos <= list.size()) {
    const std::size_t comma = list.find(',', pos);
    const std::string_view item =
        list.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    const auto op = parseTestOp(item);
    if (!op)
      throw InputError(fmt::format(
          "--op: unknown operation '{}' (known: allreduce, allgather, reducescatter, alltoall, "
          "sendrecv, broadcast, reduce)",
          item));
    ops.push_back(*op);
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return ops;
}

double busBwFactor(TestOp op, int nranks) {
  if (nranks < 1) return 0;
  const double n = nranks;
  switch (op) {
    case TestOp::AllReduce:
      return 2.0 * (n - 1) / n;
    case TestOp::AllGather:
    case TestOp::ReduceScatter:
    case TestOp::AllToAll:
      return (n - 1) / n;
    case TestOp::SendRecv:
    case TestOp::Broadcast:
    case TestOp::Reduce:
      return 1.0;
  }
  return 1.0;
}

DataType parseDataType(std::string_view name) {
  for (const auto& t : kTypes)
    if (t.name == name) return DataType{std::string(t.name), t.bytes};
  throw InputError(fmt::format(
      "-d: unknown data type '{}' (NCCL-tests names: int8 uint8 int32 uint32 int64 uint64 "
      "half float double bfloat16 f8e4m3 f8e5m2)",
      name));
}

TestSize testSize(TestOp op, std::uint64_t step_bytes, const DataType& type, int nranks) {
  const auto elt = static_cast<std::uint64_t>(type.bytes);
  const std::uint64_t count = step_bytes / elt;
  const auto n = static_cast<std::uint64_t>(nranks < 1 ? 1 : nranks);
  switch (op) {
    case TestOp::AllGather:
    case TestOp::ReduceScatter:
    case TestOp::AllToAll: {
      const std::uint64_t block = blockCount(count, static_cast<int>(n), type.bytes);
      return TestSize{block * n * elt, block};
    }
    case TestOp::AllReduce:
    case TestOp::SendRecv:
    case TestOp::Broadcast:
    case TestOp::Reduce:
      return TestSize{count * elt, count};
  }
  return TestSize{count * elt, count};
}

std::uint64_t parseSizeArg(std::string_view flag, std::string_view text) {
  std::string_view digits = text;
  std::uint64_t unit = 1;
  if (!digits.empty()) {
    switch (digits.back()) {
      case 'K':
      case 'k':
        unit = 1ULL << 10;
        break;
      case 'M':
      case 'm':
        unit = 1ULL << 20;
        break;
      case 'G':
      case 'g':
        unit = 1ULL << 30;
        break;
      default:
        break;
    }
    if (unit != 1) digits.remove_suffix(1);
  }
  std::uint64_t v = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (digits.empty() || ec != std::errc{} || end != digits.data() + digits.size() ||
      v > (std::uint64_t{1} << 50) / unit)
    throw InputError(fmt::format("{} wants a size like 8, 64K, 1M or 8G, got '{}'", flag, text));
  return v * unit;
}

std::vector<std::uint64_t> stepSizes(std::uint64_t min_bytes, std::uint64_t max_bytes,
                                     double factor, std::uint64_t increment) {
  if (min_bytes > max_bytes)
    throw InputError(fmt::format("-b {} is larger than -e {}", min_bytes, max_bytes));
  if (factor != 0 && !(factor > 1))
    throw InputError(fmt::format("-f {} must be larger than 1", factor));
  if (factor == 0 && increment == 0) throw InputError("-i must be at least 1 byte");
  if (factor != 0 && min_bytes == 0)
    throw InputError("-b 0 with -f never grows; start at 1 byte or more");
  std::vector<std::uint64_t> steps;
  for (std::uint64_t s = min_bytes; s <= max_bytes;) {
    if (steps.size() == kMaxSteps)
      throw InputError(fmt::format(
          "-b {} -e {} with {} {} makes more than {} sizes", min_bytes, max_bytes,
          factor != 0 ? "-f" : "-i",
          factor != 0 ? fmt::format("{}", factor) : fmt::format("{}", increment), kMaxSteps));
    steps.push_back(s);
    const std::uint64_t next =
        factor != 0 ? static_cast<std::uint64_t>(static_cast<double>(s) * factor) : s + increment;
    if (next <= s) break;  // overflow or a factor that rounds back to s
    s = next;
  }
  return steps;
}

void fillBandwidth(SweepRow& row, int nranks) {
  if (row.time_us <= 0) {
    row.algbw_GBps = row.busbw_GBps = 0;
    return;
  }
  // bytes / 1e9 / seconds == bytes / 1e3 / microseconds.
  row.algbw_GBps = static_cast<double>(row.size_bytes) / 1e3 / row.time_us;
  row.busbw_GBps = row.algbw_GBps * busBwFactor(row.op, nranks);
}

model::CommShape sweepShape(const ClusterConfig& cluster, int nranks) {
  const int gpn = cluster.gpus_per_node;
  if (nranks < 1 || gpn < 1)
    throw InputError(fmt::format("--ranks {}: a communicator needs at least one rank", nranks));
  if (nranks <= gpn) return model::CommShape{nranks, 1, nranks};
  if (nranks % gpn != 0)
    throw InputError(fmt::format(
        "--ranks {}: more than one node ({} GPUs, cluster.gpus_per_node) must fill whole nodes",
        nranks, gpn));
  return model::CommShape{nranks, nranks / gpn, gpn};
}

model::Proto parseProto(std::string_view text) {
  std::string lower;
  for (char c : text) lower.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c));
  if (lower == "simple") return model::Proto::Simple;
  if (lower == "ll") return model::Proto::LL;
  if (lower == "ll128") return model::Proto::LL128;
  throw InputError(fmt::format("--proto '{}': expected Simple, LL or LL128", text));
}

namespace {

// NCCL's pick with only protocol `p` allowed (what the tuner plugin leads NCCL to under
// NCCL_PROTO=p), timed by the step model. Choice.time_us < 0 if no algorithm has `p`.
model::Choice chooseWithProto(const model::NcclModel& m, model::Func f, std::uint64_t bytes,
                              const model::CommShape& shape, model::Proto p) {
  const model::Choice own = m.choose(f, bytes, shape);
  if (own.proto == p) return own;
  const model::CostTable cost = m.costTable(f, bytes, shape);
  const auto pi = static_cast<std::size_t>(p);
  int best = -1;
  for (int a = 0; a < model::kNumAlgos; ++a) {
    const float c = cost[static_cast<std::size_t>(a)][pi];
    if (c >= 0 && (best < 0 || c < cost[static_cast<std::size_t>(best)][pi])) best = a;
  }
  model::Choice c;
  c.time_us = -1;
  if (best < 0) return c;
  c.algo = static_cast<model::Algo>(best);
  c.proto = p;
  c.channels = m.commChannels(shape);
  c.time_us = m.time(f, bytes, shape, c.algo, p, c.channels);
  return c;
}

}  // namespace

std::vector<SweepRow> runSweep(const model::NcclModel& model, const SweepOptions& options) {
  const int n = options.nranks > 0 ? options.nranks : model.cluster().world();
  const model::CommShape shape = sweepShape(model.cluster(), n);
  std::vector<SweepRow> rows;
  rows.reserve(options.ops.size() * options.steps.size());
  for (const TestOp op : options.ops) {
    for (const std::uint64_t step : options.steps) {
      const TestSize ts = testSize(op, step, options.type, n);
      SweepRow row;
      row.op = op;
      row.size_bytes = ts.size_bytes;
      row.count = ts.count;
      row.type = options.type.name;
      row.redop = isReduction(op) ? "sum" : "none";
      row.root = isRooted(op) ? 0 : -1;
      row.algo = row.proto = "-";
      if (ts.count > 0) {
        if (op == TestOp::SendRecv && n == 1) {
          // Rank 0 sends to itself: a local copy NCCL does without the network; the model
          // has no price for it.
          row.algo = "self";
        } else if (op == TestOp::SendRecv) {
          // Rank r sends to r+1: the slowest pair crosses a node boundary when N > 1 node.
          row.time_us = model.p2pTime(ts.size_bytes, shape.nnodes == 1, n);
          row.algo = "p2p";
          row.proto = "Simple";
          row.channels = model.choose(model::Func::SendRecv, ts.size_bytes, shape).channels;
        } else if (op == TestOp::AllToAll) {
          // nccl-tests calls it back to back: the host's enqueue of 2 N grouped calls bounds
          // it from below (below ~1 MiB on 64 ranks).
          row.time_us = std::max(
              model.allToAllTime(ts.count * static_cast<std::uint64_t>(options.type.bytes), shape),
              model.allToAllHostUs(shape));
          row.algo = "a2a";
          row.proto = "Simple";
        } else {
          const model::Choice c =
              options.proto
                  ? chooseWithProto(model, modelFunc(op), ts.size_bytes, shape, *options.proto)
                  : model.choose(modelFunc(op), ts.size_bytes, shape);
          if (c.time_us < 0)
            throw InputError(fmt::format("--proto {}: no algorithm for {} on {} ranks uses it",
                                         model::toString(*options.proto), name(op), n));
          row.time_us = c.time_us;
          const bool at_rank =
              op == TestOp::AllGather || op == TestOp::ReduceScatter || op == TestOp::AllReduce;
          if (isRooted(op)) {
            auto loop = [&](int iters) {
              return model.loopTimeAtRank(modelFunc(op), ts.size_bytes, shape, c.algo, c.proto,
                                          c.channels, options.rank.value_or(-1), row.root, iters);
            };
            row.time_us = loop(options.iters);
            if (options.iters >= 2)
              row.time_after_first_us =
                  std::max(0.0, (options.iters * row.time_us - loop(1)) / (options.iters - 1));
          } else if (at_rank && options.rank) {
            row.time_us = model.timeAtRank(modelFunc(op), ts.size_bytes, shape, c.algo, c.proto,
                                           c.channels, *options.rank, row.root);
          }
          row.algo = std::string(model::toString(c.algo));
          row.proto = std::string(model::toString(c.proto));
          row.channels = c.channels;
        }
      }
      // Only a chain's loop differs from one operation to the next in the model.
      if (options.iters >= 2 && row.time_after_first_us < 0 && row.time_us > 0)
        row.time_after_first_us = row.time_us;
      fillBandwidth(row, n);
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

}  // namespace crystal::sweep
