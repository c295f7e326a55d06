// NCCL 2.28's tuning model for one communicator on the target: the latency/bandwidth table
// of graph/tuning.cc:ncclTopoTuneModel, the time estimate of ncclTopoGetAlgoTime, the
// algorithm/protocol choice and channel count of enqueue.cc:topoGetAlgoInfo.
#pragma once

#include <cstdint>
#include <string_view>

#include "nccl_graph.h"

namespace crystal::model {

struct TuneOptions {
  int compcap = 90;
  bool ll128 = true;     // NCCL_PROTO could disable it; default NCCL enable rules apply
  bool amd_cpu = false;  // llMaxBw row and net overhead (tuning.cc:getNetOverhead)
};

// One cell of NCCL's table. bw == 0 means NCCL will not use it (time -1).
struct TuneEntry {
  double lat_us = 0;
  double bw_GBps = 0;
  std::string_view reason;  // why bw == 0 ("" when usable)
};

class Tuning {
 public:
  Tuning(const Placement& place, const CommGraphs& graphs, const TuneOptions& opt);

  [[nodiscard]] TuneEntry entry(Func f, Algo a, Proto p) const;
  // ncclTopoGetAlgoTime with numPipeOps = 1; -1 when the entry is unusable.
  [[nodiscard]] double estimate(Func f, Algo a, Proto p, std::uint64_t bytes) const;
  // Argmin over the table (topoGetAlgoInfo). algo/proto of an unusable call: Ring/Simple.
  struct Pick {
    Algo algo = Algo::Ring;
    Proto proto = Proto::Simple;
    double estimate_us = 0;
    bool ok = false;
  };
  [[nodiscard]] Pick pick(Func f, std::uint64_t bytes) const;
  // Channels topoGetAlgoInfo leaves for this call (nc shrinks for small sizes).
  [[nodiscard]] int channels(Algo a, Proto p, std::uint64_t bytes) const;
  // comm->maxThreads[a][p].
  [[nodiscard]] int maxThreads(Algo a, Proto p) const;

  [[nodiscard]] const CommGraphs& graphs() const { return graphs_; }
  [[nodiscard]] const Placement& placement() const { return place_; }

 private:
  Placement place_;
  CommGraphs graphs_;
  TuneOptions opt_;
};

}  // namespace crystal::model
