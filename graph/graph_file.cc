// Graph files on disk: loadGraphFile / saveGraphBinary / saveGraphJson (graph.h).
#include <fstream>
#include <sstream>

#include <fmt/core.h>

#include "crystal/base/error.h"
#include "graph/file_format.h"
#include "graph/template_graph.h"

namespace crystal::graph {
namespace {

const TemplateGraph& asTemplates(const Graph& g) {
  const auto* tg = dynamic_cast<const TemplateGraph*>(&g);
  if (tg == nullptr) throw std::logic_error("graph files hold template graphs only");
  return *tg;
}

void writeFile(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw InputError(fmt::format("{}: cannot open for writing", path));
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
  if (!out) throw InputError(fmt::format("{}: write failed", path));
}

}  // namespace

std::unique_ptr<Graph> loadGraphFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot open graph file", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string data = ss.str();
  DecodedGraph d = looksBinary(data) ? decodeBinary(data, path) : decodeJson(data, path);
  if (d.config.workload.kind == "graph")
    throw InputError(fmt::format("{}: embedded config refers to another graph file", path));
  return std::make_unique<TemplateGraph>(std::move(d.config), std::move(d.templates));
}

void saveGraphBinary(const Graph& g, const std::string& path) {
  const auto& tg = asTemplates(g);
  writeFile(path, encodeBinary(tg.config(), tg.templates()));
}

void saveGraphJson(const Graph& g, const std::string& path) {
  const auto& tg = asTemplates(g);
  writeFile(path, encodeJson(tg.config(), tg.templates()));
}

}  // namespace crystal::graph
