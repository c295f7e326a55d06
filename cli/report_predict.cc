// The prediction beside the measurement (cli/emulate_report.h): the replay engine on the
// same config, exactly as `crystal simulate CONFIG` runs it, and a second replay for the
// timeline of the real ranks and a few virtual peers over the measured number of steps.
#include <fmt/core.h>

#include <algorithm>
#include <set>

#include "cli/emulate_report.h"
#include "crystal/graph/graph.h"
#include "crystal/replay/cost_model.h"
#include "crystal/replay/replay.h"
#include "crystal/replay/report.h"

namespace crystal::cli::report {

namespace {

// Virtual ranks that share a communicator with a real rank: its next member in each of its
// communicators (tp, dp, pp, ... in the graph's family order), skipping real ranks.
std::vector<int> virtualPeers(const graph::Graph& g, std::span<const int> real, std::size_t max) {
  const std::set<int> is_real(real.begin(), real.end());
  std::set<int> chosen;
  std::vector<int> out;
  const graph::CommTable& comms = g.comms();
  for (const int r : real) {
    for (const std::string& family : g.families()) {
      if (out.size() >= max) return out;
      const std::int32_t comm = comms.commOf(family, r);
      if (comm < 0) continue;
      const std::int32_t size = comms.info(comm).size;
      const std::int32_t index = comms.indexOf(comm, r);
      for (std::int32_t step = 1; step < size; ++step) {
        const int peer = comms.member(comm, (index + step) % size);
        if (is_real.contains(peer)) continue;
        if (chosen.insert(peer).second) out.push_back(peer);
        break;
      }
    }
  }
  return out;
}

}  // namespace

Prediction predict(const Config& config, std::span<const int> real_ranks, int iterations,
                   std::size_t peers) {
  Prediction p;
  try {
    const auto g = graph::buildGraph(config);
    const replay::NcclCostModel cost(config.cluster, config.model);
    replay::ReplayOptions opts;  // what `crystal simulate CONFIG` runs
    const replay::ReplayResult r = replay::runReplay(*g, cost, opts);
    for (const int rank : real_ranks) {
      if (rank < 0 || rank >= g->worldSize()) continue;
      const auto& unit = r.unitOf(*g, rank);
      for (const replay::ClassSummary& c : replay::summarizeClasses(*g, r))
        if (c.cls == unit.cls)
          p.ranks.push_back({rank, c.cls, static_cast<double>(c.mean.time) / 1e6, c.peak_memory});
    }
    // The timeline: the real ranks' and their peers' predicted streams over the steps.
    p.virtual_peers = virtualPeers(*g, real_ranks, peers);
    Config longer = config;
    if (iterations > 0) longer.job.iterations = iterations;
    const auto g2 = iterations > 0 ? graph::buildGraph(longer) : nullptr;
    opts.trace_ranks.assign(real_ranks.begin(), real_ranks.end());
    opts.trace_ranks.insert(opts.trace_ranks.end(), p.virtual_peers.begin(), p.virtual_peers.end());
    std::erase_if(opts.trace_ranks, [&](int rank) { return rank < 0 || rank >= g->worldSize(); });
    p.trace = replay::chromeTrace(replay::runReplay(g2 ? *g2 : *g, cost, opts));
  } catch (const std::exception& e) {
    p.error = e.what();
  }
  return p;
}

}  // namespace crystal::cli::report
