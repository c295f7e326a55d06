// Test child for `crystal emulate`'s report: plays one real rank of a PyTorch program the
// way python/crystal_site and the plugin's NCCL profiler would leave it. Writes
//   $CRYSTAL_RUN_DIR/rank$RANK.pyrun.json   7 steps: 10, 20, 4, 6, 5, 7, 3 ms (host), the
//                                           GPU times 0.5 ms less, 1 GiB / 2 GiB peaks
//   $CRYSTAL_RUN_DIR/rank$RANK.kineto.json  one profiled step: NCCL kernel [0, 10) ms,
//                                           compute [4, 12) ms -> 4 ms exposed
//   $CRYSTAL_RECORD/crystal-record.<pid>.jsonl  4 iterations of two all-reduces
// (FAKE_PYRUN=corrupt writes a broken pyrun file instead), then exits with FAKE_EXIT.
// Exits 5 if the emulation did not give it CRYSTAL_RUN_DIR, CRYSTAL_RECORD and
// NCCL_PROFILER_PLUGIN.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

bool writeFile(const std::string& path, const std::string& text) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return false;
  std::fputs(text.c_str(), f);
  return std::fclose(f) == 0;
}

}  // namespace

int main() {
  const char* run_dir = env("CRYSTAL_RUN_DIR");
  const char* record = env("CRYSTAL_RECORD");
  const char* rank = env("RANK");
  if (run_dir == nullptr || record == nullptr || env("NCCL_PROFILER_PLUGIN") == nullptr ||
      rank == nullptr) {
    std::fprintf(stderr,
                 "fake_pyrun_rank: CRYSTAL_RUN_DIR, CRYSTAL_RECORD, "
                 "NCCL_PROFILER_PLUGIN or RANK missing\n");
    return 5;
  }
  const std::string base = std::string(run_dir) + "/rank" + rank;
  std::string pyrun;
  const char* mode = env("FAKE_PYRUN");
  if (mode != nullptr && std::strcmp(mode, "corrupt") == 0) {
    pyrun = "{\"format\":\"crystal-pyrun-1\",\"rank\":";
  } else {
    pyrun = std::string("{\"format\":\"crystal-pyrun-1\",\"rank\":") + rank +
            ",\"world_size\":64,\"pid\":" + std::to_string(::getpid()) + ",\"steps\":[";
    const double host[] = {10, 20, 4, 6, 5, 7, 3};
    for (int i = 0; i < 7; ++i)
      pyrun += (i ? "," : "") + std::string("{\"gpu_ms\":") + std::to_string(host[i] - 0.5) +
               ",\"host_ms\":" + std::to_string(host[i]) + "}";
    pyrun +=
        "],\"max_memory_allocated\":1073741824,\"max_memory_reserved\":2147483648,"
        "\"kineto_trace\":\"rank" +
        std::string(rank) +
        ".kineto.json\",\"torch\":\"fake\","
        "\"nccl\":[2,28,9]}";
    const std::string kineto =
        "{\"traceEvents\":["
        "{\"ph\":\"X\",\"cat\":\"user_annotation\",\"name\":\"ProfilerStep#2\",\"ts\":0,\"dur\":"
        "12000},"
        "{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"ncclDevKernel_AllReduce\",\"ts\":0,\"dur\":"
        "10000},"
        "{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"sm90_gemm\",\"ts\":4000,\"dur\":8000}]}";
    if (!writeFile(base + ".kineto.json", kineto)) return 6;
  }
  if (!writeFile(base + ".pyrun.json", pyrun)) return 6;

  std::string rec = "{\"crystal_record\":1,\"rank\":\"" + std::string(rank) +
                    "\",\"pid\":" + std::to_string(::getpid()) + "}\n";
  long t = 1'000'000;
  for (int it = 0; it < 4; ++it)
    for (const char* count : {"1024", "2048"}) {
      rec += std::string("{\"ev\":\"coll_api\",\"func\":\"AllReduce\",\"count\":") + count +
             ",\"dtype\":\"ncclFloat32\",\"root\":-1,\"stream\":\"0x1\",\"graph\":false,"
             "\"comm\":\"aa\",\"id\":1,\"parent\":-1,\"t0\":" +
             std::to_string(t) + ",\"t1\":" + std::to_string(t + 100) + "}\n";
      t += 2'000'000;
    }
  if (!writeFile(std::string(record) + "/crystal-record." + std::to_string(::getpid()) + ".jsonl",
                 rec))
    return 6;
  const char* code = env("FAKE_EXIT");
  return code != nullptr ? std::atoi(code) : 0;
}
