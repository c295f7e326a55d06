#include "tests/record/kineto_writer.h"

#include <fmt/core.h>
#include <fmt/ranges.h>

#include <map>
#include <nlohmann/json.hpp>

namespace crystal::graph::testing {
namespace {

using nlohmann::json;

std::string_view collectiveName(const Op& op) {
  if (op.kind == OpKind::Send) return "send";
  if (op.kind == OpKind::Recv) return "recv";
  switch (op.coll) {
    case CollKind::AllReduce:
      return "allreduce";
    case CollKind::AllGather:
      return "_allgather_base";
    case CollKind::ReduceScatter:
      return "_reduce_scatter_base";
    case CollKind::Broadcast:
      return "broadcast";
    case CollKind::Reduce:
      return "reduce";
    case CollKind::AllToAll:
    case CollKind::AllToAllv:
      return "all_to_all";
  }
  return "?";
}

// c10::toString(ScalarType) spelling.
std::string_view torchDtype(DType t) {
  switch (t) {
    case DType::Int8:
      return "Char";
    case DType::Uint8:
      return "Byte";
    case DType::Int32:
      return "Int";
    case DType::Uint32:
      return "UInt32";
    case DType::Int64:
      return "Long";
    case DType::Uint64:
      return "UInt64";
    case DType::Float16:
      return "Half";
    case DType::Float32:
      return "Float";
    case DType::Float64:
      return "Double";
    case DType::BFloat16:
      return "BFloat16";
    case DType::Float8e4m3:
      return "Float8_e4m3fn";
    case DType::Float8e5m2:
      return "Float8_e5m2";
  }
  return "?";
}

}  // namespace

std::string writeKinetoTrace(const RecordedRank& r, KinetoWriteOptions opt) {
  json events = json::array();
  double cpu = 100;     // CPU issue time, us
  double gpu = 50'000;  // GPU time runs behind
  std::int64_t corr = 1000;
  auto streamId = [](std::uint8_t s) { return 7 + 10 * static_cast<int>(s); };
  std::map<std::uint32_t, std::pair<std::int64_t, std::uint8_t>> records;  // tag -> corr, stream
  double group_start = -1;
  std::int64_t allocated = 0;
  auto launch = [&](const char* api) {
    events.push_back({{"ph", "X"},
                      {"cat", "cuda_runtime"},
                      {"name", api},
                      {"pid", 1},
                      {"tid", 1},
                      {"ts", cpu},
                      {"dur", 0.25},
                      {"args", {{"correlation", ++corr}}}});
    return corr;
  };
  for (const Op& op : r.ops) {
    cpu += 1;
    switch (op.kind) {
      case OpKind::Compute: {
        const auto c = launch("cudaLaunchKernel");
        events.push_back(
            {{"ph", "X"},
             {"cat", "kernel"},
             {"name", r.strings[op.name]},
             {"pid", 0},
             {"tid", streamId(op.stream)},
             {"ts", gpu},
             {"dur", op.duration_us},
             {"args",
              {{"stream", streamId(op.stream)}, {"correlation", c}, {"External id", c - 500}}}});
        gpu += op.duration_us;
        break;
      }
      case OpKind::Collective:
      case OpKind::Send:
      case OpKind::Recv: {
        const auto c = launch("cudaLaunchKernel");
        const RecordedComm& comm = r.comms[static_cast<std::size_t>(op.comm)];
        const auto e = static_cast<std::int64_t>(dtypeSize(op.dtype));
        const auto n = static_cast<std::int64_t>(op.bytes) / e;
        std::int64_t in = n, out = n;
        if (op.kind == OpKind::Collective && op.coll == CollKind::AllGather) in = n / comm.size;
        if (op.kind == OpKind::Collective && op.coll == CollKind::ReduceScatter)
          out = n / comm.size;
        json args = {{"stream", streamId(op.stream)}, {"correlation", c},
                     {"External id", c - 500},        {"Collective name", collectiveName(op)},
                     {"dtype", torchDtype(op.dtype)}, {"In msg nelems", in},
                     {"Out msg nelems", out},         {"Group size", comm.size},
                     {"Process Group Name", comm.key}};
        if (opt.descriptions) args["Process Group Description"] = comm.name;
        if (opt.members)
          args["Process Group Ranks"] = fmt::format("[{}]", fmt::join(comm.ranks, ", "));
        if (op.kind == OpKind::Collective && op.coll == CollKind::AllToAllv)
          args["In split size"] = "[1, 2]";
        else if (op.kind == OpKind::Collective && op.coll == CollKind::AllToAll)
          args["In split size"] = "[]";
        if (op.kind == OpKind::Send) args["Dst Rank"] = op.peer;
        if (op.kind == OpKind::Recv) args["Src Rank"] = op.peer;
        events.push_back({{"ph", "X"},
                          {"cat", "kernel"},
                          {"name", "ncclDevKernel_Generic"},
                          {"pid", 0},
                          {"tid", streamId(op.stream)},
                          {"ts", gpu},
                          {"dur", 10.0},
                          {"args", args}});
        gpu += 10;
        break;
      }
      case OpKind::Record:
        records[op.tag] = {launch("cudaEventRecord"), op.stream};
        break;
      case OpKind::Wait: {
        const auto& [rc, rs] = records.at(op.tag);
        const auto c = launch("cudaStreamWaitEvent");
        events.push_back({{"ph", "X"},
                          {"cat", "cuda_sync"},
                          {"name", "Stream Wait Event"},
                          {"pid", 0},
                          {"tid", streamId(op.stream)},
                          {"ts", gpu},
                          {"dur", 0.0},
                          {"args",
                           {{"cuda_sync_kind", "Stream Wait Event"},
                            {"stream", streamId(op.stream)},
                            {"correlation", c},
                            {"wait_on_stream", streamId(rs)},
                            {"wait_on_cuda_event_record_corr_id", rc},
                            {"wait_on_cuda_event_id", op.tag}}}});
        break;
      }
      case OpKind::Alloc:
      case OpKind::Free: {
        const auto b = static_cast<std::int64_t>(op.bytes);
        allocated += op.kind == OpKind::Alloc ? b : -b;
        events.push_back({{"ph", "i"},
                          {"s", "t"},
                          {"cat", "cpu_instant_event"},
                          {"name", "[memory]"},
                          {"pid", 1},
                          {"tid", 1},
                          {"ts", cpu},
                          {"args",
                           {{"Device Type", 1},
                            {"Device Id", 0},
                            {"Addr", 4096},
                            {"Bytes", op.kind == OpKind::Alloc ? b : -b},
                            {"Total Allocated", allocated},
                            {"Total Reserved", allocated}}}});
        break;
      }
      case OpKind::IterationMark:
        events.push_back({{"ph", "X"},
                          {"cat", "user_annotation"},
                          {"name", fmt::format("ProfilerStep#{}", op.tag)},
                          {"pid", 1},
                          {"tid", 1},
                          {"ts", cpu},
                          {"dur", 0.5}});
        break;
      case OpKind::GroupBegin:
        group_start = cpu;
        break;
      case OpKind::GroupEnd:
        events.push_back({{"ph", "X"},
                          {"cat", "cpu_op"},
                          {"name", "nccl:coalesced"},
                          {"pid", 1},
                          {"tid", 1},
                          {"ts", group_start},
                          {"dur", cpu - group_start}});
        break;
    }
  }
  json doc = {{"schemaVersion", 1},
              {"distributedInfo", {{"backend", "nccl"}, {"rank", r.rank}}},
              {"traceEvents", events}};
  return doc.dump(1);
}

}  // namespace crystal::graph::testing
