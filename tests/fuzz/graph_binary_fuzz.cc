// libFuzzer: binary (and JSON) graph file decoders. Anything but InputError is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "crystal/base/error.h"
#include "graph/file_format.h"
#include "graph/template_graph.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  try {
    auto d = crystal::graph::looksBinary(in) ? crystal::graph::decodeBinary(in, "fuzz.bin", false)
                                             : crystal::graph::decodeJson(in, "fuzz.json");
    if (d.config.workload.kind != "graph") {
      crystal::graph::TemplateGraph g(std::move(d.config), std::move(d.templates));
      std::vector<crystal::graph::Op> ops;
      g.materialize(0, ops);
    }
  } catch (const crystal::InputError&) {
  }
  return 0;
}
