// libFuzzer: the report's reader of NCCL record files (times of every call), then the
// iteration search over what it read. Anything but InputError is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "cli/emulate_report.h"
#include "crystal/base/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace crystal::cli::report;
  try {
    RankInputs in;
    in.rank = 0;
    in.nccl = parseNcclRecordTimes(std::string_view(reinterpret_cast<const char*>(data), size),
                                   "fuzz.jsonl");
    (void)analyzeRank(in, StepPlan{1, 1, 0});
  } catch (const crystal::InputError&) {
  }
  return 0;
}
