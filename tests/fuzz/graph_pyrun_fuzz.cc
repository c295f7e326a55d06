// libFuzzer: rank<R>.pyrun.json reader (graph/import/pyrun.h), then putting the peak it read
// into a small recording. Anything but InputError is a bug.
#include <cstddef>
#include <cstdint>
#include <string>

#include "crystal/base/error.h"
#include "graph/import/pyrun.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace crystal::graph;
  try {
    const PyRun run =
        parsePyRun(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.pyrun.json");
    RecordedRank rec;
    rec.source = "fuzz.kineto.json";
    rec.rank = run.rank;
    Op alloc, mark, free;
    alloc.kind = OpKind::Alloc;
    alloc.bytes = 1 << 20;
    mark.kind = OpKind::IterationMark;
    free.kind = OpKind::Free;
    free.bytes = 1 << 19;
    rec.ops = {alloc, mark, free};
    rec.where = {"a", "b", "c"};
    applyPyRunMemory(rec, run);
    if (rec.ops.size() != rec.where.size()) __builtin_trap();
  } catch (const crystal::InputError&) {
  }
  return 0;
}
