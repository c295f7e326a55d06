// Attribute names of the Chakra files CrystalLLM writes and reads (docs/record.md).
#pragma once

namespace crystal::graph::chakra {

// Chakra's own (read by Chakra tools and ASTRA-sim).
inline constexpr const char* kVersion = "0.0.4";
inline constexpr const char* kCommType = "comm_type";
inline constexpr const char* kCommSize = "comm_size";
inline constexpr const char* kCommSrc = "comm_src";
inline constexpr const char* kCommDst = "comm_dst";
inline constexpr const char* kCommTag = "comm_tag";
inline constexpr const char* kPgName = "pg_name";
inline constexpr const char* kIsCpuOp = "is_cpu_op";
// Ours. Metadata: the recorded rank, and per process group "pg:<pg_name>" with its global
// member ranks (int64_list; doc_string = the layout family name).
inline constexpr const char* kRank = "rank";
inline constexpr const char* kPgPrefix = "pg:";
// Ours. Nodes: what Chakra has no field for.
inline constexpr const char* kKind = "crystal.kind";  // metadata nodes: "alloc", "wait", ...
inline constexpr const char* kStream = "crystal.stream";
inline constexpr const char* kDurationUs = "crystal.duration_us";  // exact, double
inline constexpr const char* kColl = "crystal.coll";               // CollKind (all-to-all vs v)
inline constexpr const char* kDtype = "crystal.dtype";             // DType
inline constexpr const char* kRedOp = "crystal.red";               // RedOp
inline constexpr const char* kRoot = "crystal.root";    // Broadcast/Reduce root (index in comm)
inline constexpr const char* kBytes = "crystal.bytes";  // Alloc/Free
inline constexpr const char* kTag = "crystal.tag";      // Record/Wait event, iteration number

}  // namespace crystal::graph::chakra
