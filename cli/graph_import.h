// `crystal graph import|export`: graphs from traces, graphs to Chakra ET (cli/cmd_graph_import.cc).
#pragma once

#include <span>
#include <string>

namespace crystal::cli {

// args: what follows "import" / "export".
int graphImport(std::span<const std::string> args);
int graphExport(std::span<const std::string> args);

}  // namespace crystal::cli
