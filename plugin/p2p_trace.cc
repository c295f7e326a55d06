#include "p2p_trace.h"

#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>

#include "crystal/base/error.h"
#include "crystal/model/nccl_model.h"
#include "params.h"

namespace crystal::plugin {

std::unique_ptr<P2pTrace> P2pTrace::fromEnv(std::uint64_t comm_hash) {
  const std::string prefix = paramString("CRYSTAL_P2P_TRACE");
  if (prefix.empty()) return nullptr;
  const std::int64_t rows = paramInt("CRYSTAL_P2P_TRACE_MAX");
  if (rows <= 0 || rows > (std::int64_t{1} << 28))
    throw InputError(fmt::format("CRYSTAL_P2P_TRACE_MAX={}: must be in 1..{}", rows,
                                 std::int64_t{1} << 28));
  return std::make_unique<P2pTrace>(fmt::format("{}.{}.{:x}.csv", prefix, ::getpid(), comm_hash),
                                    static_cast<std::size_t>(rows));
}

P2pTrace::P2pTrace(std::string path, std::size_t capacity)
    : path_(std::move(path)), rows_(capacity) {}

void P2pTrace::addConn(bool send, int ordinal) { conns_.emplace_back(send, ordinal); }

std::size_t P2pTrace::write() const {
  std::FILE* f = std::fopen(path_.c_str(), "w");
  if (!f) {
    std::fprintf(stderr, "crystal: cannot write the P2P pacing trace %s\n", path_.c_str());
    return 0;
  }
  const bool mapped = offset_ != std::numeric_limits<live::TimeNs>::max();
  std::fputs("t_ns,kind,conn,dir,ordinal,value,due_ns,gpu_ns,func\n", f);
  const std::size_t n = std::min(n_, rows_.size());
  for (std::size_t i = 0; i < n; ++i) {
    const P2pTraceRow& r = rows_[i];
    char dir = '-';
    int ordinal = -1;
    if (r.conn >= 0 && static_cast<std::size_t>(r.conn) < conns_.size()) {
      dir = conns_[static_cast<std::size_t>(r.conn)].first ? 's' : 'r';
      ordinal = conns_[static_cast<std::size_t>(r.conn)].second;
    }
    const long long gpu =
        r.gpu != 0 && mapped ? static_cast<long long>(static_cast<live::TimeNs>(r.gpu) + offset_)
                             : -1;
    const std::string func =
        r.func >= 0 ? std::string(model::toString(static_cast<model::Func>(r.func))) : "-";
    std::fprintf(f, "%lld,%c,%d,%c,%d,%llu,%lld,%lld,%s\n", static_cast<long long>(r.t), r.kind,
                 r.conn, dir, ordinal, static_cast<unsigned long long>(r.value),
                 static_cast<long long>(r.due), gpu, func.c_str());
  }
  if (std::fclose(f) != 0) {
    std::fprintf(stderr, "crystal: cannot write the P2P pacing trace %s\n", path_.c_str());
    return 0;
  }
  if (n_ > rows_.size())
    std::fprintf(stderr,
                 "crystal: P2P pacing trace %s kept %zu rows, dropped %zu (raise "
                 "CRYSTAL_P2P_TRACE_MAX)\n",
                 path_.c_str(), n, n_ - rows_.size());
  return n;
}

}  // namespace crystal::plugin
