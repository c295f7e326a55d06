// Text and JSON output of sweep rows (include/crystal/sweep/sweep_report.h).
#include "crystal/sweep/sweep_report.h"

#include <fmt/core.h>

#include <nlohmann/json.hpp>

namespace crystal::sweep {

std::string ncclTestsNumber(double value, int width) {
  // Same cascade as NCCL-tests' getFloatStr: the first precision that fits the width.
  const auto w = static_cast<std::size_t>(width);
  for (int decimals = 2; decimals >= 0; --decimals) {
    std::string s = fmt::format("{:>{}.{}f}", value, width, decimals);
    if (s.size() <= w) return s;
  }
  return fmt::format("{:>{}.{}e}", value, width, width >= 7 ? 1 : 0);
}

std::string formatSweepTable(std::span<const SweepRow> rows, int nranks, RowSource source) {
  std::string out;
  const bool model = source == RowSource::Model;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const SweepRow& r = rows[i];
    if (i == 0 || rows[i - 1].op != r.op) {
      if (i != 0) out += "\n";
      out += fmt::format("# {} ({}) on {} ranks: {}\n", name(r.op), binaryName(r.op), nranks,
                         model ? "crystal model, all ranks virtual"
                               : "measured time, bandwidth for the target's ranks");
      out += fmt::format("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {}\n", "size",
                         "count", "type", "redop", "root", "time", "algbw", "busbw",
                         model ? "algo     proto   ch" : "busbw(program)  #wrong");
      out += fmt::format("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}\n", "(B)",
                         "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)");
    }
    out += fmt::format("{:>12}  {:>12}  {:>8}  {:>6}  {:>6}  {}  {}  {}", r.size_bytes, r.count,
                       r.type, r.redop, r.root, ncclTestsNumber(r.time_us, 7),
                       ncclTestsNumber(r.algbw_GBps, 6), ncclTestsNumber(r.busbw_GBps, 6));
    if (model)
      out += fmt::format("  {:<8} {:<7} {:>2}\n", r.algo, r.proto, r.channels);
    else
      out += fmt::format("  {:>14}  {:>6}\n", ncclTestsNumber(r.program_busbw_GBps, 6),
                         r.wrong < 0 ? std::string("N/A") : fmt::format("{}", r.wrong));
  }
  return out;
}

nlohmann::json sweepJson(std::span<const SweepRow> rows, int nranks, RowSource source) {
  nlohmann::json results = nlohmann::json::array();
  for (const SweepRow& r : rows) {
    nlohmann::json j{{"op", name(r.op)},  {"size", r.size_bytes},   {"count", r.count},
                     {"type", r.type},    {"redop", r.redop},       {"root", r.root},
                     {"time", r.time_us}, {"alg_bw", r.algbw_GBps}, {"bus_bw", r.busbw_GBps}};
    if (source == RowSource::Model) {
      if (r.time_after_first_us >= 0) j["time_after_first"] = r.time_after_first_us;
      j["algo"] = r.algo;
      j["proto"] = r.proto;
      j["channels"] = r.channels;
    } else {
      j["in_place"] = r.in_place;
      j["program_bus_bw"] = r.program_busbw_GBps;
      if (r.wrong >= 0) j["wrong"] = r.wrong;
    }
    results.push_back(std::move(j));
  }
  return nlohmann::json{{"nranks", nranks},
                        {"source", source == RowSource::Model ? "model" : "emulated"},
                        {"results", std::move(results)}};
}

}  // namespace crystal::sweep
