#include "plugin/interpose/host_session.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>

#include "crystal/base/error.h"
#include "crystal/base/log.h"
#include "crystal/control/comm_hash.h"
#include "crystal/control/graph_file.h"
#include "plugin/interpose/control_client.h"

namespace crystal::interpose {

namespace {

struct Session {
  std::mutex mu;
  std::unique_ptr<ControlClient> client;
  pid_t client_pid = 0;  // a forked child must not share its parent's stream
  std::map<NcclComm, CommRecord> comms;
};

Session& session() {
  static Session* s = new Session;  // never destroyed: NCCL may call us during exit
  return *s;
}

double timeoutSeconds() {
  const char* t = std::getenv(kEnvTimeout);
  if (t == nullptr || *t == '\0') return kDefaultTimeoutS;
  char* end = nullptr;
  const double v = std::strtod(t, &end);
  if (*end != '\0' || !(v > 0))
    throw InputError(std::string(kEnvTimeout) + "='" + t + "' is not a positive number of seconds");
  return v;
}

// The client for the current CRYSTAL_HOST, connecting (and saying HELLO) if needed.
// Caller holds the session lock.
ControlClient& client(Session& s, const std::string& address) {
  if (!s.client || s.client->address() != address || s.client_pid != ::getpid()) {
    s.client.reset();  // in a forked child this closes only the child's copy of the socket
    control::Hello hello;
    hello.pid = static_cast<std::uint32_t>(::getpid());
    hello.nccl_version = realNcclVersion();
    const char* hostid = std::getenv("NCCL_HOSTID");
    hello.hostid = hostid != nullptr ? hostid : "";
    s.client = std::make_unique<ControlClient>(address, timeoutSeconds(), hello);
    s.client_pid = ::getpid();
  }
  return *s.client;
}

// Runs `fn(client)` under the session lock; maps exceptions to NCCL codes. A failed call
// drops the connection so the next one starts clean.
template <typename Fn>
int withHost(const char* caller, Fn&& fn) noexcept {
  auto addr = hostAddress();
  if (!addr) return reportError(caller, "CRYSTAL_HOST is not set", kNcclInvalidUsage);
  Session& s = session();
  std::lock_guard lock(s.mu);
  try {
    fn(client(s, *addr));
    return kNcclSuccess;
  } catch (const InputError& e) {
    s.client.reset();
    return reportError(caller, e.what(), kNcclInvalidUsage);
  } catch (const ProtocolError& e) {
    s.client.reset();
    const std::string text = e.what();
    // A refusal is the user's to fix (version, layout); anything else is the host's absence.
    const bool refused = text.find("emulation host refused") != std::string::npos;
    return reportError(caller, text, refused ? kNcclInvalidUsage : kNcclRemoteError);
  } catch (const std::exception& e) {
    s.client.reset();
    return reportError(caller, e.what(), kNcclSystemError);
  }
}

}  // namespace

std::optional<std::string> hostAddress() {
  const char* h = std::getenv(kEnvHost);
  if (h == nullptr || *h == '\0') return std::nullopt;
  return std::string(h);
}

void applyEmulationEnv() noexcept {
  applyGraphFile();
  const char* prefix = std::getenv(kEnvHostIdPrefix);
  if (prefix == nullptr || *prefix == '\0') return;
  const std::string want = std::string(prefix) + "-" + std::to_string(::getpid());
  const char* have = std::getenv("NCCL_HOSTID");
  if (have == nullptr || want != have) ::setenv("NCCL_HOSTID", want.c_str(), 1);
}

void applyGraphFile() noexcept {
  const char* dir = std::getenv(control::kEnvGraphDir);
  if (dir == nullptr || *dir == '\0') return;
  const std::string path = control::graphFile(dir, static_cast<std::uint32_t>(::getpid()));
  const char* have = std::getenv("NCCL_GRAPH_FILE");
  if (have != nullptr && path == have) return;  // done before in this process
  if (have != nullptr && *have != '\0') {
    // The caller's own graph wins; the host's would not be read (its P2P pacing then follows
    // whatever ring NCCL built, from the neighbours the host reports).
    static std::atomic<bool> said{false};
    if (!said.exchange(true))
      CRYSTAL_WARN("NCCL_GRAPH_FILE={} is set: the emulated node's rings and trees are NCCL's "
                   "from it, not the host's ({})",
                   have, path);
    return;
  }
  // Until the host writes it for a comm, a graph NCCL reads as "search as usual".
  if (std::FILE* f = std::fopen(path.c_str(), "w")) {
    std::fputs(control::kNoGraphs, f);
    if (std::fclose(f) == 0) {
      ::setenv("NCCL_GRAPH_FILE", path.c_str(), 1);
      return;
    }
  }
  CRYSTAL_WARN("cannot write {} ({}): NCCL searches the emulated node's graphs itself", path,
               std::strerror(errno));
}

int reportError(const char* caller, const std::string& text, int code) noexcept {
  CRYSTAL_ERROR("{}: {} (returning NCCL error {})", caller, text, code);
  return code;
}

int hostUniqueId(NcclUniqueId* out, const char* caller) noexcept {
  if (out == nullptr) return reportError(caller, "uniqueId is NULL", kNcclInvalidUsage);
  return withHost(caller, [&](ControlClient& c) {
    const control::UniqueId id = c.getUniqueId();
    std::memcpy(out->internal, id.data(), id.size());
  });
}

void hostNote(const std::string& text) noexcept {
  if (!hostAddress()) return;  // not emulating: the stderr line was all there is to say
  control::Note note;
  note.text = text.substr(0, control::kMaxErrorText);
  (void)withHost("NOTE to the emulation host", [&](ControlClient& c) { c.note(note); });
}

int hostBlockPool(const control::BlockPool& pool, control::PoolPlace& place,
                  const char* caller) noexcept {
  return withHost(caller, [&](ControlClient& c) { place = c.blockPool(pool); });
}

int hostCommInit(const NcclUniqueId& id, int nranks, int rank, int n_ids, std::uint64_t& hash,
                 const char* caller) noexcept {
  control::CommInit req;
  std::memcpy(req.id.data(), id.internal, req.id.size());
  req.nranks = nranks;
  req.rank = rank;
  req.n_ids = n_ids;
  req.comm_hash = hash = control::commHashOfId(req.id);
  return withHost(caller, [&](ControlClient& c) { c.commInit(req); });
}

int hostCommSplit(NcclComm parent, int color, int key, CommRecord& parent_after,
                  std::uint64_t& child_hash, const char* caller) noexcept {
  control::CommSplit req;
  {
    Session& s = session();
    std::lock_guard lock(s.mu);
    auto it = s.comms.find(parent);
    if (it == s.comms.end())
      return reportError(caller,
                         "the parent communicator was not created through ncclCommInitRank* or "
                         "ncclCommSplit in this process, so the emulation host cannot place "
                         "its virtual ranks",
                         kNcclInvalidUsage);
    // NCCL counts every split call of a parent, NOCOLOR ones included (init.cc).
    parent_after = it->second;
    parent_after.splits = ++it->second.splits;
  }
  req.parent_hash = parent_after.hash;
  req.split_seq = parent_after.splits;
  req.color = color;
  req.key = key;
  req.parent_rank = parent_after.rank;
  req.parent_nranks = parent_after.nranks;
  req.child_hash = child_hash =
      color == kNcclSplitNoColor
          ? 0
          : control::commHashOfSplit(parent_after.hash, static_cast<int>(parent_after.splits),
                                     color);
  const int rc = withHost(caller, [&](ControlClient& c) { c.commSplit(req); });
  if (rc != kNcclSuccess) uncountSplit(parent);
  return rc;
}

void uncountSplit(NcclComm parent) noexcept {
  Session& s = session();
  std::lock_guard lock(s.mu);
  if (auto it = s.comms.find(parent); it != s.comms.end() && it->second.splits > 0)
    --it->second.splits;
}

void rememberComm(NcclComm comm, const CommRecord& rec) noexcept {
  if (comm == nullptr) return;
  Session& s = session();
  std::lock_guard lock(s.mu);
  s.comms[comm] = rec;
}

void forgetComm(NcclComm comm) noexcept {
  Session& s = session();
  std::lock_guard lock(s.mu);
  s.comms.erase(comm);
}

std::optional<CommRecord> findComm(NcclComm comm) noexcept {
  Session& s = session();
  std::lock_guard lock(s.mu);
  if (auto it = s.comms.find(comm); it != s.comms.end()) return it->second;
  return std::nullopt;
}

}  // namespace crystal::interpose
