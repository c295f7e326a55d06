// Test harness that drives the BUILT libnccl-net-crystal.so the way NCCL's proxy does:
// dlopen, dlsym each versioned table, then listen/connect/accept/isend/irecv/test.
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdarg>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "crystal/live/clock.h"
#include "crystal/live/handle.h"
#include "crystal/live/target_model.h"
#include "crystal/nccl/net_v10.h"
#include "crystal/nccl/net_v11.h"
#include "crystal/nccl/net_v8.h"
#include "crystal/nccl/net_v9.h"
#include "crystal/nccl/tuner_v3.h"
#include "crystal/nccl/tuner_v4.h"
#include "crystal/nccl/tuner_v5.h"

namespace crystal::test {

using namespace crystal::nccl;

// Lines the plugin logged through the NCCL logger (level, flags, text).
struct LogLine {
  int level;
  unsigned long flags;
  std::string text;
};
inline std::mutex g_log_mu;
inline std::vector<LogLine> g_log;

inline void testLogger(ncclDebugLogLevel level, unsigned long flags, const char*, int,
                       const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::lock_guard lock(g_log_mu);
  g_log.push_back({level, flags, buf});
}

inline bool logged(const std::string& needle) {
  std::lock_guard lock(g_log_mu);
  for (const auto& l : g_log)
    if (l.text.find(needle) != std::string::npos) return true;
  return false;
}

struct Plugin {
  void* dl = nullptr;
  const ncclNet_v11_t* v11 = nullptr;
  const ncclNet_v10_t* v10 = nullptr;
  const ncclNet_v9_t* v9 = nullptr;
  const ncclNet_v8_t* v8 = nullptr;
  const ncclTuner_v5_t* t5 = nullptr;
  const ncclTuner_v4_t* t4 = nullptr;
  const ncclTuner_v3_t* t3 = nullptr;

  static Plugin& get() {
    static Plugin p = [] {
      Plugin q;
      q.dl = dlopen(CRYSTAL_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
      if (!q.dl) return q;
      q.v11 = static_cast<const ncclNet_v11_t*>(dlsym(q.dl, "ncclNetPlugin_v11"));
      q.v10 = static_cast<const ncclNet_v10_t*>(dlsym(q.dl, "ncclNetPlugin_v10"));
      q.v9 = static_cast<const ncclNet_v9_t*>(dlsym(q.dl, "ncclNetPlugin_v9"));
      q.v8 = static_cast<const ncclNet_v8_t*>(dlsym(q.dl, "ncclNetPlugin_v8"));
      q.t5 = static_cast<const ncclTuner_v5_t*>(dlsym(q.dl, "ncclTunerPlugin_v5"));
      q.t4 = static_cast<const ncclTuner_v4_t*>(dlsym(q.dl, "ncclTunerPlugin_v4"));
      q.t3 = static_cast<const ncclTuner_v3_t*>(dlsym(q.dl, "ncclTunerPlugin_v3"));
      return q;
    }();
    return p;
  }
};

// The model's prediction for the built-in target (no CRYSTAL_CONFIG), computed here from the
// same TargetModel the plugin uses (NcclModel when linked), not from the plugin.
inline const live::LinkParams& targetLink() {
  static const live::LinkParams lp = [] {
    Config cfg;
    return live::linkParams(*live::makeTargetModel(cfg), cfg.cluster);
  }();
  return lp;
}

inline std::int64_t modelNs(std::uint64_t bytes) {
  return targetLink().occupancy(bytes) + targetLink().latency_ns;
}

// Forged handle of a virtual receiver (what the host writes for a virtual rank).
inline live::NetHandle virtualPeerHandle(int rank, int nranks, std::uint32_t seq = 0) {
  live::NetHandle h;
  h.kind = live::HandleKind::VirtualPeer;
  h.rank = rank;
  h.nranks = nranks;
  h.conn_seq = seq;
  return h;
}

// Opens a stream to a RealListen handle and sends Hello{kind} (the host acting for a
// virtual sender, or a raw real peer). Returns the socket (caller closes).
int openHello(const live::NetHandle& h, live::PeerKind kind, std::uint32_t listen_id_override = 0);
// The host's Hello for a virtual sender of ring channel `ordinal` (prev -> receiver).
int openRingHello(const live::NetHandle& h, int receiver, int nranks, int ordinal);
// The host's VirtualPeer handle for the real rank `self`'s ring send on channel `ordinal`.
inline live::NetHandle ringPeerHandle(int self, int nranks, int ordinal) {
  live::NetHandle h = virtualPeerHandle((self + 1) % nranks, nranks);
  h.self_rank = self;
  h.distance = 1;
  h.ordinal = static_cast<std::uint16_t>(ordinal);
  h.graph = live::kGraphRing;
  return h;
}

// Polls fn() (returning a ncclResult_t and setting a pointer) until the pointer is set.
template <typename F>
void* pollUntil(F&& fn, int max_iters = 1'000'000) {
  void* out = nullptr;
  for (int i = 0; i < max_iters && !out; ++i) {
    EXPECT_EQ(fn(&out), ncclSuccess);
  }
  return out;
}

// Polls test() until done; returns the time it saw completion and fills sizes. *last_miss
// gets the start time of the last test() call that still said "not done" (0 if none): the
// plugin withheld nothing if that is before the predicted time (+ tolerance), whatever the
// scheduler did to this thread afterwards.
inline live::TimeNs waitDone(const ncclNet_v11_t* n, void* req, int* sizes = nullptr,
                             live::TimeNs* last_miss = nullptr) {
  int done = 0;
  live::TimeNs miss = 0;
  for (;;) {
    const live::TimeNs ts = live::nowNs();
    if (n->test(req, &done, sizes) != ncclSuccess) return -1;
    if (done) break;
    miss = ts;
  }
  if (last_miss) *last_miss = miss;
  return live::nowNs();
}

// The tolerance of the issue: 5 % of the modelled time + 20 us.
// The bound: 5 % + 20 us. Sanitizer builds run several times slower and share two
// cores with a parallel ctest, so they add 2 ms of scheduling slack: the release run checks
// the timing, the sanitizer run checks memory safety of the same paths.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr std::int64_t kSchedulingSlackNs = 2'000'000;
#else
inline constexpr std::int64_t kSchedulingSlackNs = 0;
#endif
inline std::int64_t tolerance(std::int64_t modelled_ns) {
  return modelled_ns / 20 + 20'000 + kSchedulingSlackNs;
}

}  // namespace crystal::test
