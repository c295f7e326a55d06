// Fuzz target: NCCL-tests' stdout parser (crystal::sweep::parseNcclTestsOutput) and the
// program -> target restatement of what it parsed. Any input must give rows or an InputError.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "crystal/base/error.h"
#include "crystal/sweep/nccl_tests_table.h"
#include "crystal/sweep/target_table.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto out = crystal::sweep::parseNcclTestsOutput(text, "fuzz");
    (void)crystal::sweep::targetRows(out, crystal::sweep::TestOp::AllGather, 2, 8192, false,
                                     "fuzz");
  } catch (const crystal::InputError&) {
  }
  return 0;
}
