// Parser of NCCL-tests' stdout (include/crystal/sweep/nccl_tests_table.h).
#include "crystal/sweep/nccl_tests_table.h"

#include <fmt/core.h>

#include <charconv>
#include <cstdlib>
#include <limits>

#include "crystal/base/error.h"

namespace crystal::sweep {
namespace {

std::vector<std::string_view> words(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    const std::size_t start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t' && line[i] != '\r') ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

bool allDigits(std::string_view w) {
  if (w.empty()) return false;
  for (char c : w)
    if (c < '0' || c > '9') return false;
  return true;
}

template <typename T>
std::optional<T> integer(std::string_view w) {
  T v{};
  const auto [end, ec] = std::from_chars(w.data(), w.data() + w.size(), v);
  if (ec != std::errc{} || end != w.data() + w.size()) return std::nullopt;
  return v;
}

std::optional<double> number(std::string_view w) {
  double v = 0;
  const auto [end, ec] = std::from_chars(w.data(), w.data() + w.size(), v);
  if (ec != std::errc{} || end != w.data() + w.size()) return std::nullopt;
  return v;
}

struct LineError {
  std::string_view source;
  int line;
  std::string_view text;
  [[noreturn]] void operator()(const std::string& what) const {
    std::string shown(text.substr(0, 160));
    throw InputError(fmt::format("{}:{}: {} in '{}'", source, line, what, shown));
  }
};

NcclTestsResult result(const std::vector<std::string_view>& w, std::size_t at,
                       const LineError& fail, std::string_view placement) {
  NcclTestsResult r;
  const char* names[] = {"time", "algbw", "busbw"};
  double* fields[] = {&r.time_us, &r.algbw_GBps, &r.busbw_GBps};
  for (int k = 0; k < 3; ++k) {
    const auto v = number(w[at + static_cast<std::size_t>(k)]);
    if (!v || *v < 0)
      fail(fmt::format("{} {} '{}' is not a non-negative number", placement, names[k],
                       w[at + static_cast<std::size_t>(k)]));
    *fields[k] = *v;
  }
  const std::string_view wrong = w[at + 3];
  if (wrong != "N/A") {
    const auto v = number(wrong);  // printed with %g
    if (!v || *v < 0 || *v > 9e18)
      fail(fmt::format("{} #wrong '{}' is neither a count nor N/A", placement, wrong));
    r.wrong = static_cast<std::int64_t>(*v);
  }
  return r;
}

// "#  Rank  0 Group  0 Pid 1234 on host device  0 [...] NVIDIA H200"
bool isRankLine(const std::vector<std::string_view>& w) {
  return w.size() >= 3 && w[0] == "#" && w[1] == "Rank" && allDigits(w[2]);
}

// "# <label words> : value ..."; returns the first word after ':'.
std::optional<std::string_view> labelled(std::string_view line, std::string_view label) {
  const std::size_t at = line.find(label);
  if (at == std::string_view::npos) return std::nullopt;
  const std::size_t colon = line.find(':', at + label.size());
  if (colon == std::string_view::npos) return std::nullopt;
  const auto w = words(line.substr(colon + 1));
  if (w.empty()) return std::nullopt;
  return w[0];
}

}  // namespace

NcclTestsOutput parseNcclTestsOutput(std::string_view text, std::string_view source) {
  NcclTestsOutput out;
  int line_no = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    const std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    const auto w = words(line);
    if (w.empty()) continue;
    const LineError fail{source, line_no, line};
    if (w[0][0] == '#') {
      if (isRankLine(w)) ++out.nranks;
      if (line.find("i_min") != std::string_view::npos) out.per_iteration = true;
      if (auto name = labelled(line, "Collective test starting")) out.test_name = *name;
      if (auto v = labelled(line, "Avg bus bandwidth")) out.avg_busbw_GBps = number(*v);
      if (auto v = labelled(line, "Out of bounds values"))
        out.out_of_bounds = integer<std::int64_t>(*v);
      continue;
    }
    if (!allDigits(w[0])) continue;  // NCCL INFO lines, warnings: not part of the table
    const std::size_t group = out.per_iteration ? 8 : 4;
    if (w.size() < 5 + group)
      fail(
          fmt::format("a result row needs size, count, type, redop, root and at least {} "
                      "result columns, found {} words",
                      group, w.size()));
    NcclTestsRow row;
    row.line = line_no;
    const auto size = integer<std::uint64_t>(w[0]);
    const auto count = integer<std::uint64_t>(w[1]);
    const auto root = integer<int>(w[4]);
    if (!size) fail(fmt::format("size '{}' is not a byte count", w[0]));
    if (!count) fail(fmt::format("count '{}' is not an element count", w[1]));
    if (!root || *root < -1) fail(fmt::format("root '{}' is not a rank or -1", w[4]));
    row.size_bytes = *size;
    row.count = *count;
    row.type = std::string(w[2]);
    row.redop = std::string(w[3]);
    row.root = *root;
    // Two placements when both were run; one (in place only) in trace replay; anything
    // after them (a timestamp with -Z) is not ours to read.
    if (w.size() >= 5 + 2 * group) {
      row.out_of_place = result(w, 5, fail, "out-of-place");
      row.in_place = result(w, 5 + group, fail, "in-place");
    } else {
      row.in_place = result(w, 5, fail, "in-place");
    }
    out.rows.push_back(std::move(row));
  }
  return out;
}

}  // namespace crystal::sweep
