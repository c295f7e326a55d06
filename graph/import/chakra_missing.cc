// Chakra ET entry points of a build without protobuf: each says what to install.
#include <fmt/core.h>

#include "crystal/base/error.h"
#include "crystal/graph/import.h"

namespace crystal::graph {
namespace {

[[noreturn]] void missing(const std::string& what) {
  throw InputError(
      fmt::format("{}: this crystal was built without protobuf, so it cannot read "
                  "or write Chakra ET; install libprotobuf-dev and "
                  "protobuf-compiler and rebuild",
                  what));
}

}  // namespace

RecordedRank parseChakraTrace(std::string_view, const std::string& source) { missing(source); }
RecordedRank readChakraTrace(const std::string& path) { missing(path); }
std::string writeChakraTrace(const Graph&, std::int32_t) { missing("graph export chakra"); }

}  // namespace crystal::graph
