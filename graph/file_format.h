// Encoders/decoders of the graph file forms, on strings (the file I/O is in graph_file.cc).
#pragma once

#include <string>
#include <string_view>

#include "crystal/config/config.h"
#include "graph/templates.h"

namespace crystal::graph {

struct DecodedGraph {
  Config config;
  Templates templates;
};

// Enum fields of `op` hold values op.h defines.
[[nodiscard]] bool opEnumsValid(const Op& op);

[[nodiscard]] std::uint64_t fnv1a(std::string_view data);

[[nodiscard]] std::string encodeBinary(const Config& config, const Templates& t);
[[nodiscard]] bool looksBinary(std::string_view data);
// Throws InputError naming `file` and the byte offset of the damage. The fuzzer turns the
// checksum off to reach the decoder behind it.
[[nodiscard]] DecodedGraph decodeBinary(std::string_view data, const std::string& file,
                                        bool verify_checksum = true);

[[nodiscard]] std::string encodeJson(const Config& config, const Templates& t);
[[nodiscard]] DecodedGraph decodeJson(std::string_view data, const std::string& file);

}  // namespace crystal::graph
