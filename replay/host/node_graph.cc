#include "node_graph.h"

#include <fmt/core.h>

#include <set>

#include "crystal/base/error.h"
#include "crystal/control/graph_file.h"

namespace crystal::host {

std::vector<int> nodeRingOrder(int members, int real_local, bool multi_node) {
  std::vector<int> order;
  const bool at_end = real_local == 0 || real_local == members - 1;
  if (!multi_node || members < 3 || !at_end) {
    for (int i = 0; i < members; ++i) order.push_back(i);
    return order;
  }
  const int first = real_local == 0 ? 2 : 1;  // the chain's head, then round the node
  for (int i = 0; i < members; ++i) order.push_back((first + i) % members);
  return order;
}

namespace {

// One <graph> as NCCL's own dump writes it (graph/search.cc ncclTopoGetXmlFromGraphs):
// speeds in GB/s a channel and path types of the fused node on the H200 lease, where NCCL's
// search found 20 GB/s and PHB (2026-12-04). NCCL uses them for its own tuning model only;
// the tuner sets algorithm, protocol and channels (plugin/tuner.h). Devs are hexadecimal
// (strtol base 16).
// As C's "%#lx" (NCCL's xmlSetAttrLong): "0" for zero, "0x..." otherwise.
std::string hexDev(int v) { return v == 0 ? std::string("0") : fmt::format("{:#x}", v); }

void appendGraph(std::string& out, int id, int pattern, int same_channels, const NodeGraph& g,
                 const std::vector<int>& order) {
  out += fmt::format(
      "  <graph id=\"{}\" pattern=\"{}\" crossnic=\"0\" nchannels=\"{}\" speedintra=\"20\" "
      "speedinter=\"20\" latencyinter=\"0\" typeintra=\"PHB\" typeinter=\"PHB\" "
      "samechannels=\"{}\">\n",
      id, pattern, g.channels, same_channels);
  for (int c = 0; c < g.channels; ++c) {
    out += "    <channel>\n";
    out += fmt::format("      <net dev=\"{}\"/>\n", hexDev(g.net_dev));
    for (const int local : order)
      out += fmt::format("      <gpu dev=\"{}\"/>\n", hexDev(g.devs[static_cast<std::size_t>(local)]));
    out += fmt::format("      <net dev=\"{}\"/>\n", hexDev(g.net_dev));
    out += "    </channel>\n";
  }
  out += "  </graph>\n";
}

// NCCL 2.28.9 graph/topo.h: NCCL_TOPO_PATTERN_TREE (all NET at the chain's head), _RING.
constexpr int kPatternTree = 3;
constexpr int kPatternRing = 4;
constexpr int kMaxDev = 32;  // NCCL's NVML pair table (virtual_slices.h sameNodeDev)

}  // namespace

std::string nodeGraphXml(const NodeGraph& g) {
  const int m = static_cast<int>(g.devs.size());
  if (m < 2 || g.real_local < 0 || g.real_local >= m || g.channels < 1 || g.net_dev < 0)
    throw InputError(fmt::format("node graph: {} members, real rank at {}, {} channels", m,
                                 g.real_local, g.channels));
  std::set<int> seen;
  for (const int d : g.devs)
    if (d < 0 || d >= kMaxDev || !seen.insert(d).second)
      throw InputError(fmt::format("node graph: NVML index {} outside [0, {}) or repeated", d,
                                   kMaxDev));
  std::vector<int> rank_order;
  for (int i = 0; i < m; ++i) rank_order.push_back(i);
  std::string out = "<graphs version=\"1\">\n";
  appendGraph(out, 0, kPatternRing, 1, g, nodeRingOrder(m, g.real_local, g.multi_node));
  appendGraph(out, 1, kPatternTree, 1, g, rank_order);
  out += "</graphs>\n";
  return out;
}

std::string emptyGraphXml() { return control::kNoGraphs; }

}  // namespace crystal::host
