// Names the engine prints (errors, tables, traces). Kept here so the output format is the
// engine's own and does not change when another module renames its enums' strings.
#pragma once

#include <string_view>

#include "crystal/graph/op.h"
#include "crystal/model/nccl_model.h"

namespace crystal::replay::detail {

[[nodiscard]] constexpr std::string_view opName(graph::OpKind k) {
  switch (k) {
    case graph::OpKind::Compute:
      return "Compute";
    case graph::OpKind::Collective:
      return "Collective";
    case graph::OpKind::Send:
      return "Send";
    case graph::OpKind::Recv:
      return "Recv";
    case graph::OpKind::GroupBegin:
      return "GroupBegin";
    case graph::OpKind::GroupEnd:
      return "GroupEnd";
    case graph::OpKind::Alloc:
      return "Alloc";
    case graph::OpKind::Free:
      return "Free";
    case graph::OpKind::Record:
      return "Record";
    case graph::OpKind::Wait:
      return "Wait";
    case graph::OpKind::IterationMark:
      return "IterationMark";
  }
  return "?";
}

[[nodiscard]] constexpr std::string_view collName(graph::CollKind k) {
  switch (k) {
    case graph::CollKind::Broadcast:
      return "Broadcast";
    case graph::CollKind::Reduce:
      return "Reduce";
    case graph::CollKind::AllGather:
      return "AllGather";
    case graph::CollKind::ReduceScatter:
      return "ReduceScatter";
    case graph::CollKind::AllReduce:
      return "AllReduce";
    case graph::CollKind::AllToAll:
      return "AllToAll";
    case graph::CollKind::AllToAllv:
      return "AllToAllv";
  }
  return "?";
}

[[nodiscard]] constexpr std::string_view algoName(model::Algo a) {
  constexpr std::string_view names[] = {"Tree",     "Ring", "CollNetDirect", "CollNetChain", "NVLS",
                                        "NVLSTree", "PAT"};
  const int i = static_cast<int>(a);
  return i >= 0 && i < model::kNumAlgos ? names[i] : "?";
}

[[nodiscard]] constexpr std::string_view protoName(model::Proto p) {
  constexpr std::string_view names[] = {"LL", "LL128", "Simple"};
  const int i = static_cast<int>(p);
  return i >= 0 && i < model::kNumProtos ? names[i] : "?";
}

}  // namespace crystal::replay::detail
