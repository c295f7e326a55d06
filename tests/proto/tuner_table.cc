// Prints the tuner's pick per collective and size, 8 B .. 1 GiB, in the words of NCCL's own
// "AllReduce: N Bytes -> Algo RING proto LL" INFO line, for a communicator that NCCL sees as
// RANKS ranks on NODES nodes. NCCL's usable set is assumed to be Tree, Ring and PAT with LL
// and Simple (LL128 too with --ll128): what NCCL enables over crystal's host-memory NICs
// (LL128 needs GDR unless NCCL_PROTO names it). The GPU check (tests/gpu/proto) compares
// the plugin's runtime log instead, which holds NCCL's real usable set.
//
// usage: proto_tuner_table [--config FILE] [--ll128] RANKS NODES
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "crystal/config/config.h"
#include "state.h"
#include "tuner.h"

int main(int argc, char** argv) {
  using namespace crystal;
  std::vector<std::string> pos;
  std::string config_path;
  bool ll128 = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--ll128")
      ll128 = true;
    else if (a == "--config" && i + 1 < argc)
      config_path = argv[++i];
    else
      pos.push_back(a);
  }
  if (pos.size() != 2) {
    std::fprintf(stderr, "usage: proto_tuner_table [--config FILE] [--ll128] RANKS NODES\n");
    return 2;
  }
  try {
    Config cfg;
    if (!config_path.empty()) cfg = loadConfig(config_path);
    plugin::PluginState::get().configure(cfg);
    const auto& st = plugin::PluginState::get();
    const std::size_t ranks = std::stoul(pos[0]), nodes = std::stoul(pos[1]);
    const model::CommShape shape = plugin::targetShape(cfg.cluster, ranks, nodes);
    std::printf("# %zu ranks on %zu NCCL nodes -> target %d ranks, %d nodes x %d (%s)%s\n", ranks,
                nodes, shape.nranks, shape.nnodes, shape.ranks_per_node, st.model().name(),
                ll128 ? ", LL128 usable" : "");
    constexpr int kAlgos = 7, kProtos = 3;
    for (int f = 0; f < 5; ++f) {
      for (std::size_t bytes = 8; bytes <= (std::size_t{1} << 30); bytes *= 2) {
        float table[kAlgos * kProtos];
        for (int a = 0; a < kAlgos; ++a)
          for (int p = 0; p < kProtos; ++p) {
            const bool algo_ok = a == 0 || a == 1 || a == 6;
            const bool proto_ok = p != 1 || ll128;
            table[a * kProtos + p] = algo_ok && proto_ok ? 1.0f : -1.0f;
          }
        int channels = 0;
        if (!plugin::applyTargetCosts(st.model(), static_cast<nccl::ncclFunc_t>(f), bytes, shape,
                                      table, kAlgos, kProtos, &channels))
          continue;
        const plugin::TunerPick pick = plugin::bestEntry(table, kAlgos, kProtos);
        // 0: the model's own choice is not usable, so NCCL keeps its channel count.
        const std::string ch = channels > 0 ? std::to_string(channels) : "NCCL's";
        std::printf("%s: %zu Bytes -> Algo %s proto %s channels %s\n", plugin::ncclFuncName(f),
                    bytes, plugin::ncclAlgoName(pick.algo), plugin::ncclProtoName(pick.proto),
                    ch.c_str());
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "proto_tuner_table: %s\n", e.what());
    return 1;
  }
  return 0;
}
