// Prints our model's version of NCCL's tuning table (graph/tuning.cc:ncclTopoTuneModel's
// "latency/bandwidth" lines), the channel count and the per-size choice, in NCCL's layout,
// for comparison with NCCL's NCCL_DEBUG_SUBSYS=TUNING output (tests/gpu/tuning_check/).
//
//   model_tuning_table NODES RANKS_PER_NODE NIC_GBPS [nic_path_phb=0|1]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "crystal/base/error.h"
#include "crystal/model/nccl_model.h"

using namespace crystal;
using namespace crystal::model;

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s NODES RANKS_PER_NODE NIC_GBPS [NIC_PATH_PHB]\n", argv[0]);
    return kExitBadInput;
  }
  try {
    ClusterConfig cluster;
    cluster.nodes = std::stoi(argv[1]);
    cluster.gpus_per_node = std::stoi(argv[2]);
    cluster.fabric.nic.bandwidth_GBps = std::stod(argv[3]);
    cluster.fabric.nics_per_node = cluster.gpus_per_node;
    ModelConfig mc;
    if (argc > 4) mc.overrides.emplace_back("nic_path_phb", std::stod(argv[4]));
    const NcclModel m(cluster, mc);
    const CommShape shape{cluster.world(), cluster.nodes, cluster.gpus_per_node};
    const Func funcs[] = {Func::Broadcast, Func::Reduce, Func::AllGather, Func::ReduceScatter,
                          Func::AllReduce};
    for (int block = 0; block < 3; ++block) {
      std::printf("  Algorithm   |");
      for (int b = 0; b < 3 && block * 3 + b < kNumAlgos; ++b) {
        std::printf(" %14s   %14s   %14s |", "",
                    std::string(toString(static_cast<Algo>(block * 3 + b))).c_str(), "");
      }
      std::printf("\n");
      for (Func f : funcs) {
        std::printf("%13s |", std::string(toString(f)).c_str());
        for (int b = 0; b < 3 && block * 3 + b < kNumAlgos; ++b) {
          for (int p = 0; p < kNumProtos; ++p) {
            const Algo a = static_cast<Algo>(block * 3 + b);
            const Proto pr = static_cast<Proto>(p);
            // ncclEstimate(bytes=0) is the latency; bandwidth from a 1 GB difference.
            const double t0 = m.ncclEstimate(f, 0, shape, a, pr);
            const double t1 = m.ncclEstimate(f, 1000000000ULL, shape, a, pr);
            const double bw = t0 < 0 ? 0.0 : 1e9 / 1000.0 / (t1 - t0);
            std::printf("%8.1f/%6.1f |", t0 < 0 ? 0.0 : t0, bw);
          }
        }
        std::printf("\n");
      }
    }
    std::printf("%d coll channels\n", m.commChannels(shape));
    for (std::uint64_t bytes : {1ULL << 10, 1ULL << 16, 1ULL << 20, 1ULL << 24}) {
      const Choice c = m.choose(Func::AllReduce, bytes, shape);
      std::printf("AllReduce: %llu Bytes -> Algo %s proto %s channels %d time_us %.1f\n",
                  static_cast<unsigned long long>(bytes), std::string(toString(c.algo)).c_str(),
                  std::string(toString(c.proto)).c_str(), c.channels, c.time_us);
    }
  } catch (const InputError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return kExitBadInput;
  }
  return 0;
}
