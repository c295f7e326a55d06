// The report's two parsers (cli/emulate_report.h): the times of NCCL record files and the
// kernels of a Kineto trace. Each keeps only what the report uses and names the
// file and the line or event in every error.
#include <fmt/core.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "cli/emulate_report.h"
#include "crystal/base/error.h"

namespace crystal::cli::report {

namespace {

using nlohmann::json;

json parseJson(std::string_view text, const std::string& source) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw InputError(fmt::format("{}: not JSON: {}", source, e.what()));
  }
}

// A non-negative number at `key` of `j`, or the error naming `where`.
double number(const json& j, const char* key, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number() || !(it->get<double>() >= 0))
    throw InputError(fmt::format("{}: '{}' missing or not a non-negative number", where, key));
  return it->get<double>();
}

std::int64_t integer(const json& j, const char* key, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer())
    throw InputError(fmt::format("{}: '{}' missing or not an integer", where, key));
  return it->get<std::int64_t>();
}

std::string text(const json& j, const char* key, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_string())
    throw InputError(fmt::format("{}: '{}' missing or not a string", where, key));
  return it->get<std::string>();
}

}  // namespace

NcclRecordTimes parseNcclRecordTimes(std::string_view file, const std::string& source) {
  NcclRecordTimes r;
  r.source = source;
  std::size_t line_no = 0;
  bool header = false;
  while (!file.empty()) {
    const auto nl = file.find('\n');
    const std::string_view line = file.substr(0, nl);
    file.remove_prefix(nl == std::string_view::npos ? file.size() : nl + 1);
    ++line_no;
    if (line.empty()) continue;
    const std::string where = fmt::format("{}:{}", source, line_no);
    const json j = parseJson(line, where);
    if (!j.is_object()) throw InputError(where + ": not a JSON object");
    if (!header) {
      if (!j.contains("crystal_record") || j["crystal_record"] != 1)
        throw InputError(where + ": not a crystal record file (no \"crystal_record\":1)");
      header = true;
      if (j.contains("pid") && j["pid"].is_number_integer()) r.pid = j["pid"].get<std::int64_t>();
      // The rank is a string (the RANK variable) or a number; anything else: unknown.
      const json rank = j.value("rank", json());
      try {
        const long long v = rank.is_number_integer() ? rank.get<long long>()
                            : rank.is_string()       ? std::stoll(rank.get<std::string>())
                                                     : -1;
        r.rank = v >= 0 && v <= INT32_MAX ? static_cast<int>(v) : -1;
      } catch (const std::exception&) {
        r.rank = -1;
      }
      continue;
    }
    const auto ev = j.find("ev");
    if (ev == j.end()) continue;  // a communicator line
    if (!ev->is_string()) throw InputError(where + ": 'ev' is not a string");
    const std::string kind = ev->get<std::string>();
    if (kind != "coll_api" && kind != "p2p_api") continue;  // tasks and groups: same calls
    NcclCall c;
    c.comm = text(j, "comm", where);
    c.func = text(j, "func", where);
    c.dtype = text(j, "dtype", where);
    const std::int64_t count = integer(j, "count", where);
    if (count < 0) throw InputError(where + ": negative count");
    c.count = static_cast<std::uint64_t>(count);
    c.p2p = kind == "p2p_api";
    c.t0_ns = integer(j, "t0", where);
    c.t1_ns = integer(j, "t1", where);
    // CLOCK_MONOTONIC times: non-negative, so differences of them cannot overflow.
    if (c.t0_ns < 0) throw InputError(where + ": negative t0");
    if (c.t1_ns < c.t0_ns) throw InputError(where + ": t1 before t0");
    r.calls.push_back(std::move(c));
  }
  if (!header) throw InputError(fmt::format("{}: empty record file", source));
  // Lines are written at each event's stop; the calls' order is that of their start.
  std::stable_sort(r.calls.begin(), r.calls.end(),
                   [](const NcclCall& a, const NcclCall& b) { return a.t0_ns < b.t0_ns; });
  return r;
}

KinetoKernels parseKinetoKernels(std::string_view json_text, const std::string& source) {
  const json j = parseJson(json_text, source);
  const auto events = j.is_object() ? j.find("traceEvents") : j.end();
  if (!j.is_object() || events == j.end() || !events->is_array())
    throw InputError(fmt::format("{}: no 'traceEvents' list (not a Chrome trace)", source));
  KinetoKernels k;
  k.source = source;
  for (std::size_t i = 0; i < events->size(); ++i) {
    const json& e = (*events)[i];
    if (!e.is_object()) continue;
    const std::string name =
        e.contains("name") && e["name"].is_string() ? e["name"].get<std::string>() : "";
    const std::string cat =
        e.contains("cat") && e["cat"].is_string() ? e["cat"].get<std::string>() : "";
    if (cat == "user_annotation" && name.starts_with("ProfilerStep#")) ++k.profiler_steps;
    if (cat != "kernel") continue;
    const std::string where = fmt::format("{}: traceEvents[{}]", source, i);
    const double ts = number(e, "ts", where), dur = number(e, "dur", where);
    std::string lower = name;
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    k.kernels.push_back({ts, ts + dur, lower.find("nccl") != std::string::npos});
  }
  return k;
}

}  // namespace crystal::cli::report
