// libFuzzer: Chakra ET reader, then slicing of what it read against a small layout.
// Anything but InputError is a bug.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "crystal/base/error.h"
#include "crystal/graph/import.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const crystal::Config config = crystal::parseConfig(
      "job: {world_size: 8, layout: {tp: 2, dp: 2, pp: 2}}\n"
      "workload: {kind: dense, layers: 2, hidden: 64, heads: 2, vocab: 100, seq_len: 16}\n",
      "fuzz.yaml");
  try {
    const auto rec = crystal::graph::parseChakraTrace(
        std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.0.et");
    std::vector<crystal::graph::RecordedRank> recs{rec, rec};
    recs[1].rank = rec.rank + 4;
    (void)crystal::graph::sliceRecordings(config, recs);
  } catch (const crystal::InputError&) {
  }
  return 0;
}
