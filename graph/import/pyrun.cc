// Reading rank<R>.pyrun.json (python/crystal_site) and putting its peak memory into a
// recording.
#include "graph/import/pyrun.h"

#include <fmt/core.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "crystal/base/error.h"

namespace crystal::graph {
namespace {

using nlohmann::json;

constexpr std::string_view kFormat = "crystal-pyrun-1";

class Reader {
 public:
  Reader(const json& doc, const std::string& source) : doc_(doc), source_(source) {}

  PyRun read() {
    if (!doc_.is_object()) fail("", "the file is not a JSON object");
    const json& format = at(doc_, "format", "format");
    if (!format.is_string() || format.get<std::string>() != kFormat)
      fail("format", fmt::format("is {}, expected \"{}\"", format.dump(), kFormat));
    PyRun r;
    r.source = source_;
    r.world_size = static_cast<std::int32_t>(integer(doc_, "world_size", 1, INT32_MAX));
    r.rank = static_cast<std::int32_t>(integer(doc_, "rank", 0, r.world_size - 1));
    r.pid = integer(doc_, "pid", 0, std::numeric_limits<std::int64_t>::max());
    r.max_memory_allocated = static_cast<std::uint64_t>(
        integer(doc_, "max_memory_allocated", 0, std::numeric_limits<std::int64_t>::max()));
    r.max_memory_reserved = static_cast<std::uint64_t>(
        integer(doc_, "max_memory_reserved", 0, std::numeric_limits<std::int64_t>::max()));
    if (r.max_memory_reserved < r.max_memory_allocated)
      fail("max_memory_reserved",
           fmt::format("{} is below max_memory_allocated {}: the allocator reserves at least "
                       "what it hands out",
                       r.max_memory_reserved, r.max_memory_allocated));
    const json& steps = at(doc_, "steps", "steps");
    if (!steps.is_array()) fail("steps", "is not an array");
    for (std::size_t i = 0; i < steps.size(); ++i) {
      const std::string key = fmt::format("steps[{}]", i);
      if (!steps[i].is_object()) fail(key, "is not an object");
      r.steps.push_back(
          {optionalTime(steps[i], key, "gpu_ms"), optionalTime(steps[i], key, "host_ms")});
    }
    const json& trace = at(doc_, "kineto_trace", "kineto_trace");
    if (!trace.is_null()) {
      if (!trace.is_string()) fail("kineto_trace", "is not a file name or null");
      r.kineto_trace = trace.get<std::string>();
      if (r.kineto_trace.empty() || r.kineto_trace.find('/') != std::string::npos ||
          r.kineto_trace == "." || r.kineto_trace == "..")
        fail("kineto_trace",
             fmt::format("\"{}\" is not a file name in the run directory", r.kineto_trace));
    }
    const json& torch = at(doc_, "torch", "torch");
    if (!torch.is_string()) fail("torch", "is not a version string");
    r.torch = torch.get<std::string>();
    const json& nccl = at(doc_, "nccl", "nccl");
    if (!nccl.is_null()) {
      if (!nccl.is_array() || nccl.size() != 3)
        fail("nccl", "is not [major, minor, patch] or null");
      std::array<int, 3> v{};
      for (std::size_t k = 0; k < 3; ++k) {
        if (!nccl[k].is_number_integer() || nccl[k].get<std::int64_t>() < 0 ||
            nccl[k].get<std::int64_t>() > 100000)
          fail(fmt::format("nccl[{}]", k), "is not a version number");
        v[k] = nccl[k].get<int>();
      }
      r.nccl = v;
    }
    return r;
  }

 private:
  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    if (key.empty()) throw InputError(fmt::format("{}: {}", source_, what));
    throw InputError(fmt::format("{}: '{}' {}", source_, key, what));
  }
  const json& at(const json& obj, const char* name, const std::string& key) const {
    const auto it = obj.find(name);
    if (it == obj.end()) fail(key, "is missing");
    return *it;
  }
  std::int64_t integer(const json& obj, const char* name, std::int64_t lo, std::int64_t hi) const {
    const json& v = at(obj, name, name);
    if (!v.is_number_integer()) fail(name, fmt::format("is {}, not an integer", v.dump()));
    if (v.is_number_unsigned() &&
        v.get<std::uint64_t>() >
            static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      fail(name, fmt::format("{} is out of range [{}, {}]", v.dump(), lo, hi));
    const std::int64_t x = v.get<std::int64_t>();
    if (x < lo || x > hi) fail(name, fmt::format("{} is out of range [{}, {}]", x, lo, hi));
    return x;
  }
  std::optional<double> optionalTime(const json& step, const std::string& key,
                                     const char* name) const {
    const std::string full = key + "." + name;
    const json& v = at(step, name, full);
    if (v.is_null()) return std::nullopt;
    if (!v.is_number() || !(v.get<double>() >= 0) ||
        v.get<double>() > std::numeric_limits<double>::max())
      fail(full, fmt::format("is {}, not a time in ms (a number >= 0) or null", v.dump()));
    return v.get<double>();
  }

  const json& doc_;
  const std::string& source_;
};

}  // namespace

PyRun parsePyRun(std::string_view json_text, const std::string& source) {
  json doc;
  try {
    doc = json::parse(json_text);
  } catch (const json::parse_error& e) {
    throw InputError(fmt::format("{}: not JSON (byte {}): {}", source, e.byte, e.what()));
  } catch (const json::exception& e) {  // a number out of range (1e999), ...
    throw InputError(fmt::format("{}: not JSON: {}", source, e.what()));
  }
  return Reader(doc, source).read();
}

PyRun readPyRun(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot open", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  return parsePyRun(ss.str(), path);
}

void applyPyRunMemory(RecordedRank& rec, const PyRun& run) {
  if (rec.rank != run.rank)
    throw InputError(fmt::format("{} is rank {}, {} is rank {}: not the same process", rec.source,
                                 rec.rank, run.source, run.rank));
  const auto mark = std::find_if(rec.ops.begin(), rec.ops.end(),
                                 [](const Op& op) { return op.kind == OpKind::IterationMark; });
  const auto at = static_cast<std::size_t>(mark == rec.ops.end() ? 0 : mark - rec.ops.begin() + 1);
  std::uint64_t mem = 0, peak = 0, mem_at = 0;  // mem_at: held where the pair would go
  for (std::size_t i = 0; i < rec.ops.size(); ++i) {
    if (i == at) mem_at = mem;
    const Op& op = rec.ops[i];
    if (op.kind == OpKind::Alloc) mem += op.bytes;
    if (op.kind == OpKind::Free) mem -= std::min(mem, op.bytes);
    peak = std::max(peak, mem);
  }
  if (at == rec.ops.size()) mem_at = mem;
  if (peak > run.max_memory_allocated)
    throw InputError(fmt::format(
        "{}: the recording's memory reaches {} bytes, above max_memory_allocated {} of {}: "
        "files of different runs?",
        rec.source, peak, run.max_memory_allocated, run.source));
  if (peak == run.max_memory_allocated) return;
  Op alloc, free;
  alloc.kind = OpKind::Alloc;
  free.kind = OpKind::Free;
  alloc.bytes = free.bytes = run.max_memory_allocated - mem_at;
  rec.ops.insert(rec.ops.begin() + static_cast<std::ptrdiff_t>(at), {alloc, free});
  if (rec.where.size() + 2 == rec.ops.size()) {
    const std::string where = run.source + ": max_memory_allocated";
    rec.where.insert(rec.where.begin() + static_cast<std::ptrdiff_t>(at), {where, where});
  }
  rec.notes.push_back(fmt::format(
      "rank {}: the process peaked at {} bytes (max_memory_allocated, {}) outside the recorded "
      "ops, whose peak is {}: a transient allocation of {} bytes stands for it in iteration 0",
      rec.rank, run.max_memory_allocated, run.source, peak, alloc.bytes));
}

}  // namespace crystal::graph
