// libFuzzer: config YAML parser + graph build. Anything but InputError is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "crystal/base/error.h"
#include "crystal/config/config.h"
#include "crystal/graph/graph.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const crystal::Config c =
        crystal::parseConfig(std::string(reinterpret_cast<const char*>(data), size), "fuzz.yaml");
    // Bound the work per input: small worlds and short schedules only.
    if (c.workload.kind != "graph" && c.job.world_size <= 256 && c.workload.layers <= 64 &&
        c.workload.micro_batches <= 16 && c.job.iterations <= 2 &&
        c.workload.dp_bucket_bytes >= (1u << 20) && c.workload.hidden <= 4096)
      (void)crystal::graph::buildGraph(c);
  } catch (const crystal::InputError&) {
  }
  return 0;
}
