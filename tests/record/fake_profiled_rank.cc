// A stand-in for one NCCL process in record mode: loads the profiler the way NCCL 2.28 does
// (dlopen $NCCL_PROFILER_PLUGIN, dlsym "ncclProfiler_v5") and reports the communication of
// rank RANK of CONFIG's generated graph through it: init per communicator (named by its
// layout family, as a program would name its groups), group/collective/p2p API events and
// the tasks NCCL would make of them, finalize. Used by record_cli_test.cc via crystal record.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "crystal/graph/import.h"
#include "crystal/nccl/profiler_v5.h"

using namespace crystal;
using namespace crystal::nccl;

namespace {

const char* funcOf(graph::CollKind k) {
  switch (k) {
    case graph::CollKind::AllReduce:
      return "AllReduce";
    case graph::CollKind::AllGather:
      return "AllGather";
    case graph::CollKind::ReduceScatter:
      return "ReduceScatter";
    case graph::CollKind::Broadcast:
      return "Broadcast";
    case graph::CollKind::Reduce:
      return "Reduce";
    default:
      return "AllToAll";
  }
}

const char* dtypeOf(graph::DType t) {
  switch (t) {
    case graph::DType::Float32:
      return "ncclFloat32";
    case graph::DType::Float16:
      return "ncclFloat16";
    default:
      return "ncclBfloat16";
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: fake_profiled_rank CONFIG RANK\n");
    return 2;
  }
  const char* lib = std::getenv("NCCL_PROFILER_PLUGIN");
  void* h = lib != nullptr ? ::dlopen(lib, RTLD_NOW | RTLD_LOCAL) : nullptr;
  if (h == nullptr) {
    std::fprintf(stderr, "fake_profiled_rank: cannot load NCCL_PROFILER_PLUGIN: %s\n", ::dlerror());
    return 1;
  }
  const auto* p = static_cast<const ncclProfiler_v5_t*>(::dlsym(h, "ncclProfiler_v5"));
  if (p == nullptr) return 1;
  try {
    const auto g = graph::buildGraph(loadConfig(argv[1]));
    const graph::RecordedRank r = graph::recordingOf(*g, std::stoi(argv[2]));
    std::vector<void*> ctx(r.comms.size(), nullptr);
    for (std::size_t k = 0; k < r.comms.size(); ++k) {
      int mask = 0;
      p->init(&ctx[k], 0x5000 + k, &mask, r.comms[k].name.c_str(), 1, r.comms[k].size,
              r.comms[k].rank, nullptr);
    }
    static int streams[256];
    void* group = nullptr;
    for (std::size_t i = 0; i < r.ops.size(); ++i) {
      const graph::Op& op = r.ops[i];
      if (op.kind == graph::OpKind::GroupBegin) {
        std::size_t j = i + 1;
        while (r.ops[j].comm < 0) ++j;  // the group's first communication names the comm
        ncclProfilerEventDescr_v5_t d{};
        d.type = ncclProfileGroupApi;
        d.groupApi.groupDepth = 1;
        p->startEvent(ctx[static_cast<std::size_t>(r.ops[j].comm)], &group, &d);
        continue;
      }
      if (op.kind == graph::OpKind::GroupEnd) {
        p->stopEvent(group);
        group = nullptr;
        continue;
      }
      const bool coll = op.kind == graph::OpKind::Collective;
      if (!coll && op.kind != graph::OpKind::Send && op.kind != graph::OpKind::Recv) continue;
      void* c = ctx[static_cast<std::size_t>(op.comm)];
      const auto size = static_cast<std::uint64_t>(r.comms[static_cast<std::size_t>(op.comm)].size);
      std::uint64_t count = op.bytes / graph::dtypeSize(op.dtype);
      if (coll &&
          (op.coll == graph::CollKind::AllGather || op.coll == graph::CollKind::ReduceScatter ||
           op.coll == graph::CollKind::AllToAll))
        count /= size;
      ncclProfilerEventDescr_v5_t api{}, task{};
      void *api_h = nullptr, *task_h = nullptr;
      api.parentObj = group;
      if (coll) {
        api.type = ncclProfileCollApi;
        api.collApi = {funcOf(op.coll),     count, dtypeOf(op.dtype), op.peer,
                       &streams[op.stream], false};
        task.type = ncclProfileColl;
        task.coll.func = funcOf(op.coll);
        task.coll.count = count;
        task.coll.datatype = dtypeOf(op.dtype);
        task.coll.root = op.peer;
        task.coll.algo = "RING";
        task.coll.proto = "SIMPLE";
      } else {
        const char* f = op.kind == graph::OpKind::Send ? "Send" : "Recv";
        api.type = ncclProfileP2pApi;
        api.p2pApi = {f, count, dtypeOf(op.dtype), &streams[op.stream], false};
        task.type = ncclProfileP2p;
        task.p2p.func = f;
        task.p2p.count = count;
        task.p2p.datatype = dtypeOf(op.dtype);
        task.p2p.peer = op.peer;
      }
      p->startEvent(c, &api_h, &api);
      task.parentObj = api_h;
      p->startEvent(c, &task_h, &task);
      p->stopEvent(api_h);
      p->stopEvent(task_h);
    }
    for (void* c : ctx) p->finalize(c);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fake_profiled_rank: %s\n", e.what());
    return 2;
  }
  return 0;
}
