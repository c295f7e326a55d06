// Names of the op enums (op.h), as printed by `crystal graph inspect` and written to JSON.
#include "crystal/graph/op.h"

namespace crystal::graph {

std::string_view toString(OpKind k) {
  switch (k) {
    case OpKind::Compute: return "compute";
    case OpKind::Collective: return "collective";
    case OpKind::Send: return "send";
    case OpKind::Recv: return "recv";
    case OpKind::GroupBegin: return "group_begin";
    case OpKind::GroupEnd: return "group_end";
    case OpKind::Alloc: return "alloc";
    case OpKind::Free: return "free";
    case OpKind::Record: return "record";
    case OpKind::Wait: return "wait";
    case OpKind::IterationMark: return "iteration";
  }
  return "?";
}

std::string_view toString(CollKind k) {
  switch (k) {
    case CollKind::Broadcast: return "broadcast";
    case CollKind::Reduce: return "reduce";
    case CollKind::AllGather: return "all_gather";
    case CollKind::ReduceScatter: return "reduce_scatter";
    case CollKind::AllReduce: return "all_reduce";
    case CollKind::AllToAll: return "all_to_all";
    case CollKind::AllToAllv: return "all_to_allv";
  }
  return "?";
}

std::string_view toString(DType t) {
  switch (t) {
    case DType::Int8: return "int8";
    case DType::Uint8: return "uint8";
    case DType::Int32: return "int32";
    case DType::Uint32: return "uint32";
    case DType::Int64: return "int64";
    case DType::Uint64: return "uint64";
    case DType::Float16: return "fp16";
    case DType::Float32: return "fp32";
    case DType::Float64: return "fp64";
    case DType::BFloat16: return "bf16";
    case DType::Float8e4m3: return "fp8e4m3";
    case DType::Float8e5m2: return "fp8e5m2";
  }
  return "?";
}

std::size_t dtypeSize(DType t) {
  switch (t) {
    case DType::Int8: case DType::Uint8: case DType::Float8e4m3: case DType::Float8e5m2: return 1;
    case DType::Float16: case DType::BFloat16: return 2;
    case DType::Int32: case DType::Uint32: case DType::Float32: return 4;
    case DType::Int64: case DType::Uint64: case DType::Float64: return 8;
  }
  return 0;
}

}  // namespace crystal::graph
