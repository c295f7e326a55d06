// `crystal graph import {kineto,chakra,nccl} FILE... --config CFG [-o OUT [--json]]`: one trace
// per recorded rank (one rank of each pipeline stage at least) -> the target's graph.
// `crystal graph export chakra CONFIG|FILE -o PREFIX [--ranks all|R,R...]`: Chakra ET files.
#include <fmt/core.h>

#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "cli/graph_import.h"
#include "crystal/base/error.h"
#include "crystal/graph/import.h"
#include "graph/validate.h"

namespace crystal::cli {
namespace {

double seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// "all", or comma-separated ranks.
std::vector<std::int32_t> parseRanks(const std::string& s, std::int32_t world) {
  std::vector<std::int32_t> out;
  if (s == "all") {
    for (std::int32_t r = 0; r < world; ++r) out.push_back(r);
    return out;
  }
  std::size_t pos = 0;
  while (pos <= s.size()) {
    const std::size_t comma = std::min(s.find(',', pos), s.size());
    const std::string item = s.substr(pos, comma - pos);
    std::size_t used = 0;
    int r = -1;
    try {
      r = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || r < 0 || r >= world)
      throw InputError(fmt::format("--ranks: '{}' is not a rank in 0..{}", item, world - 1));
    out.push_back(r);
    pos = comma + 1;
  }
  return out;
}

}  // namespace

int graphExport(std::span<const std::string> a) {
  if (a.empty() || a[0] != "chakra")
    throw InputError(
        "graph export: needs a format: crystal graph export chakra CONFIG|FILE -o "
        "PREFIX [--ranks all|R,R,...]");
  std::string in, prefix, ranks;
  for (std::size_t i = 1; i < a.size(); ++i) {
    if (a[i] == "-o" && i + 1 < a.size())
      prefix = a[++i];
    else if (a[i] == "--ranks" && i + 1 < a.size())
      ranks = a[++i];
    else if (in.empty() && !a[i].starts_with("-"))
      in = a[i];
    else
      throw InputError(fmt::format("graph export: unexpected argument '{}'", a[i]));
  }
  if (in.empty() || prefix.empty())
    throw InputError("graph export: needs CONFIG|FILE and -o PREFIX");
  const auto t0 = std::chrono::steady_clock::now();
  const auto g = in.ends_with(".yaml") || in.ends_with(".yml") ? graph::buildGraph(loadConfig(in))
                                                               : graph::loadGraphFile(in);
  std::vector<std::int32_t> which;
  if (ranks.empty()) {
    // One rank per class is what import needs to rebuild the whole target.
    for (std::int32_t c = 0; c < g->numClasses(); ++c) which.push_back(g->representative(c));
  } else {
    which = parseRanks(ranks, g->worldSize());
  }
  std::uint64_t bytes = 0;
  for (std::int32_t r : which) {
    const std::string path = fmt::format("{}.{}.et", prefix, r);
    const std::string et = graph::writeChakraTrace(*g, r);
    std::ofstream out(path, std::ios::binary);
    out.write(et.data(), static_cast<std::streamsize>(et.size()));
    if (!out) throw InputError(fmt::format("{}: cannot write", path));
    bytes += et.size();
  }
  fmt::print("wrote {} Chakra ET file(s) {}.<rank>.et ({} bytes), {:.2f} s\n", which.size(), prefix,
             bytes, seconds(t0));
  return 0;
}

int graphImport(std::span<const std::string> a) {
  if (a.empty() || (a[0] != "kineto" && a[0] != "chakra" && a[0] != "nccl"))
    throw InputError(
        "graph import: needs a format, kineto, chakra or nccl (a crystal record "
        "file): crystal graph import {kineto,chakra,nccl} FILE... --config CONFIG "
        "[-o OUT [--json]]");
  const std::string format = a[0];
  std::string config_path, out;
  bool json = false;
  std::vector<std::string> files;
  for (std::size_t i = 1; i < a.size(); ++i) {
    if (a[i] == "--config" && i + 1 < a.size())
      config_path = a[++i];
    else if (a[i] == "-o" && i + 1 < a.size())
      out = a[++i];
    else if (a[i] == "--json")
      json = true;
    else if (a[i].starts_with("-"))
      throw InputError(fmt::format("graph import: unknown option '{}'", a[i]));
    else
      files.push_back(a[i]);
  }
  if (config_path.empty() || files.empty())
    throw InputError("graph import: needs trace FILEs and --config CONFIG (the target job)");
  const auto t0 = std::chrono::steady_clock::now();
  const Config config = loadConfig(config_path);
  std::vector<graph::RecordedRank> recs;
  for (const auto& f : files) {
    recs.push_back(format == "kineto"   ? graph::readKinetoTrace(f)
                   : format == "chakra" ? graph::readChakraTrace(f)
                                        : graph::readNcclRecording(f));
    const auto& r = recs.back();
    fmt::print("{}: rank {}, {} ops, {} communicators\n", f, r.rank, r.ops.size(), r.comms.size());
    for (const auto& n : r.notes) fmt::print("  note: {}\n", n);
  }
  const auto g = graph::sliceRecordings(config, recs);
  const auto rep = graph::validateGraph(*g);
  fmt::print(
      "graph of {}: world size {}, {} classes, {} ops in total, valid ({} check), {:.2f} s\n",
      config_path, g->worldSize(), g->numClasses(), g->totalOps(), rep.method, seconds(t0));
  if (!out.empty()) {
    if (json)
      graph::saveGraphJson(*g, out);
    else
      graph::saveGraphBinary(*g, out);
    fmt::print("wrote {} ({})\n", out, json ? "json" : "binary");
  }
  return 0;
}

}  // namespace crystal::cli
