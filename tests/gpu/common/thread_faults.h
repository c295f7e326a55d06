// Minor page faults per thread of this process (/proc/self/task/TID/stat), so a device
// program can say which of its threads (its own, NCCL's, the plugin's) first touched fresh
// memory during a timed loop: a warm-up long enough should leave none there. Header-only
// and free of CUDA: tests/gpu/common/thread_faults_test.cc checks it on the CPU.
#pragma once

#include <dirent.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace gpu_check {

struct ThreadFaults {
  std::string name;  // the thread's comm (NCCL names its threads "NCCL Progress 8", ...)
  long minor = 0;    // minor faults since the thread started
};

// Thread id -> its name and minor faults. A thread that ends while this reads is left out.
inline std::map<int, ThreadFaults> minorFaultsByThread() {
  std::map<int, ThreadFaults> out;
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return out;
  while (const dirent* e = readdir(dir)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const std::string path = std::string("/proc/self/task/") + e->d_name + "/stat";
    FILE* f = std::fopen(path.c_str(), "r");
    if (f == nullptr) continue;
    char buf[1024];
    const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[n] = '\0';
    // "TID (COMM) STATE PPID PGRP SESSION TTY TPGID FLAGS MINFLT ...": COMM may hold spaces
    // and parentheses, so it ends at the last ')'.
    const char* open = std::strchr(buf, '(');
    const char* close = std::strrchr(buf, ')');
    if (open == nullptr || close == nullptr || close < open || close[1] == '\0') continue;
    long minor = 0;
    if (std::sscanf(close + 2, "%*c %*d %*d %*d %*d %*d %*u %ld", &minor) != 1) continue;
    out[std::atoi(e->d_name)] = ThreadFaults{std::string(open + 1, close), minor};
  }
  closedir(dir);
  return out;
}

// "TOTAL (NAME N, NAME N, ...)": the faults between two readings, the `top` threads with most
// first. A thread born between them counts all of its faults; one that ended, none.
inline std::string faultsBetween(const std::map<int, ThreadFaults>& before,
                                 const std::map<int, ThreadFaults>& after, size_t top = 4) {
  std::vector<std::pair<long, std::string>> by_thread;
  long total = 0;
  for (const auto& [tid, now] : after) {
    const auto was = before.find(tid);
    const long d = now.minor - (was == before.end() ? 0 : was->second.minor);
    if (d <= 0) continue;
    total += d;
    by_thread.emplace_back(d, now.name);
  }
  std::sort(by_thread.begin(), by_thread.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string text = std::to_string(total);
  for (size_t i = 0; i < by_thread.size() && i < top; ++i)
    text += (i == 0 ? " (" : ", ") + by_thread[i].second + " " + std::to_string(by_thread[i].first);
  if (!by_thread.empty()) text += by_thread.size() > top ? ", ...)" : ")";
  return text;
}

}  // namespace gpu_check
