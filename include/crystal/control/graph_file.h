// NCCL_GRAPH_FILE of a real process under emulation.p2p_peers (host/node_graph.h says why):
// `crystal emulate` names a directory per emulation (CRYSTAL_GRAPH_DIR), the interposer points
// NCCL_GRAPH_FILE at its process's file there (an empty <graphs> until the host writes one),
// and the host writes that file for each comm of the process before NCCL's graph search.
#pragma once

#include <fmt/core.h>

#include <cstdint>
#include <filesystem>
#include <string>

namespace crystal::control {

inline constexpr const char* kEnvGraphDir = "CRYSTAL_GRAPH_DIR";
// A graph file with no graph: NCCL searches every graph as without the file.
inline constexpr const char* kNoGraphs = "<graphs version=\"1\">\n</graphs>\n";

// The directory of emulation `emulation_id` (under the system's temporary directory).
[[nodiscard]] inline std::string graphDir(std::uint64_t emulation_id) {
  return (std::filesystem::temp_directory_path() / fmt::format("crystal-{:x}", emulation_id))
      .string();
}
// The file of process `pid` in `dir`.
[[nodiscard]] inline std::string graphFile(const std::string& dir, std::uint32_t pid) {
  return fmt::format("{}/graph-{}.xml", dir, pid);
}

}  // namespace crystal::control
