#include "plugin/profiler/recorder.h"

#include <fmt/core.h>
#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <deque>
#include <filesystem>
#include <iterator>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "crystal/base/thread_name.h"
#include "plugin/profiler/proxy_ops.h"

namespace crystal::profiler {
namespace {

using namespace crystal::nccl;

std::int64_t nowNs() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

std::string quoted(const char* s) {
  std::string out = "\"";
  for (const char* p = s == nullptr ? "" : s; *p != '\0'; ++p) {
    const auto c = static_cast<unsigned char>(*p);
    if (c == '"' || c == '\\')
      out += '\\', out += static_cast<char>(c);
    else if (c < 0x20)
      out += fmt::format("\\u{:04x}", c);
    else
      out += static_cast<char>(c);
  }
  return out + "\"";
}

// What the writer formats of NCCL's descriptor: the fields the record's event types use (72
// bytes of its 112). Its strings (function, datatype, algorithm, protocol names) are NCCL's
// static names, so they outlive the descriptor.
struct Described {
  const char* func = nullptr;
  const char* dtype = nullptr;
  const char* algo = nullptr;
  const char* proto = nullptr;
  std::uint64_t count = 0;
  std::uint64_t seq = 0;   // coll: NCCL's sequence number
  void* stream = nullptr;  // the API events'
  std::int32_t where = 0;  // coll, coll_api: root; p2p: peer; group_api: depth
  std::int32_t channels = 0;
  std::uint32_t type = 0;
  bool graph = false;  // the API events: under CUDA-graph capture
};

// The members NCCL's call and task descriptors (collApi, p2pApi, coll, p2p) share by name.
template <typename Call>
void describeCall(Described& o, const Call& c) {
  o.func = c.func;
  o.count = c.count;
  o.dtype = c.datatype;
}

Described describe(const ncclProfilerEventDescr_v5_t& d) {
  Described o;
  o.type = static_cast<std::uint32_t>(d.type);
  switch (d.type) {
    case ncclProfileGroupApi:
      o.where = d.groupApi.groupDepth;
      o.graph = d.groupApi.graphCaptured;
      break;
    case ncclProfileCollApi:
      describeCall(o, d.collApi);
      o.where = d.collApi.root;
      o.stream = d.collApi.stream;
      o.graph = d.collApi.graphCaptured;
      break;
    case ncclProfileP2pApi:
      describeCall(o, d.p2pApi);
      o.stream = d.p2pApi.stream;
      o.graph = d.p2pApi.graphCaptured;
      break;
    case ncclProfileColl:
      describeCall(o, d.coll);
      o.seq = d.coll.seqNumber;
      o.where = static_cast<std::int32_t>(d.coll.root);
      o.algo = d.coll.algo;
      o.proto = d.coll.proto;
      o.channels = d.coll.nChannels;
      break;
    case ncclProfileP2p:
      describeCall(o, d.p2p);
      o.where = d.p2p.peer;
      o.channels = d.p2p.nChannels;
      break;
    default:
      break;
  }
  return o;
}

void describeTo(fmt::memory_buffer& out, const Described& d);

// One stopped event, as the writer formats it: two cache lines. The writer thread reads each
// queued event and the enqueuing thread writes the slot again after the next swap, so every
// line of it crosses between the two cores twice. With the whole descriptor and a string
// (3-4 lines a slot) an event written cost 219 ns and a program call at level api 174; in
// two lines, 178 and 131 (profiler_bench, medians of 5, the 2-core box, 2026-12-04).
struct alignas(64) Stopped {
  Described d;
  std::uint64_t comm = 0;
  std::uint64_t id = 0;
  std::int64_t parent = -1;
  std::int64_t t0 = 0, t1 = 0;
};
static_assert(sizeof(Stopped) == 128);

// For the queue: held for a push_back or a swap, nanoseconds; a mutex's futex wake-ups cost
// the enqueuing thread more than that (the profiler bench, 2026-12-04).
class SpinLock {
 public:
  void lock() noexcept {
    while (flag_.test_and_set(std::memory_order_acquire))
      while (flag_.test(std::memory_order_relaxed)) {
      }
  }
  void unlock() noexcept { flag_.clear(std::memory_order_release); }

 private:
  std::atomic_flag flag_ = ATOMIC_FLAG_INIT;
};

// The process's recording file, opened by the first communicator that records. NCCL calls
// the profiler on the threads that enqueue its work (ncclSend, ncclGroupEnd: one event per
// call and per task), so a stop only queues the event; a writer thread formats and writes
// (the JSON on the enqueuing thread cost the real rank ~1 us an event, 2026-12-04).
class RecordFile {
 public:
  bool open(ncclDebugLogger_t log) {
    std::lock_guard io(io_mu_);
    if (file_ != nullptr) return true;
    const char* where = std::getenv("CRYSTAL_RECORD");
    if (where == nullptr || *where == '\0') return false;
    std::string path = where;
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec))
      path += fmt::format("/crystal-record.{}.jsonl", ::getpid());
    else if (const auto at = path.find("%p"); at != std::string::npos)
      path.replace(at, 2, std::to_string(::getpid()));
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (f == nullptr) {
      if (log != nullptr)
        log(NCCL_LOG_WARN, kSubsysInit, __FILE__, __LINE__,
            "crystal record: cannot write CRYSTAL_RECORD file %s; not recording", path.c_str());
      return false;
    }
    // The rank in the target: launchers export it (torchrun: RANK). CRYSTAL_RECORD and
    // CRYSTAL_RANK are registered (name, doc) in plugin/params.cc with the other knobs.
    const char* rank = std::getenv("CRYSTAL_RANK");
    if (rank == nullptr) rank = std::getenv("RANK");
    std::fprintf(f, "{\"crystal_record\":1,\"rank\":%s,\"pid\":%d}\n",
                 rank != nullptr && *rank != '\0' ? quoted(rank).c_str() : "null", ::getpid());
    std::fflush(f);
    file_ = f;
    {
      std::lock_guard lock(q_mu_);
      q_.reserve(kQueued);
    }
    out_.reserve(kQueued);
    // Detached and never stopped: the file lives until exit (proxy threads may report late).
    try {
      std::thread([this] {
        nameThisThread("crystal record");
        writeLoop();
      }).detach();
    } catch (const std::system_error&) {
      // No writer: the queue is written when it fills and at each finalize.
    }
    return true;
  }
  // A line written as is (a communicator's, rare), after the events queued before it.
  void line(const std::string& s) {
    std::lock_guard io(io_mu_);
    drain();
    if (file_ == nullptr) return;
    std::fwrite(s.data(), 1, s.size(), file_);
    std::fputc('\n', file_);
  }
  void event(const Stopped& e) {
    bool full = false;
    {
      std::lock_guard lock(q_mu_);
      q_.push_back(e);
      full = q_.size() >= kQueued;
    }
    // The writer fell behind: this thread writes the batch (memory stays bounded, nothing is
    // lost; the cost lands here only while events come faster than they are written).
    if (full) {
      std::lock_guard io(io_mu_);
      drain();
    }
  }

  // Writes what is queued, now (a communicator's finalize).
  void flush() {
    std::lock_guard io(io_mu_);
    drain();
    if (file_ != nullptr) std::fflush(file_);
  }

 private:
  static constexpr std::size_t kQueued = 1 << 14;  // ~2 ms of a busy enqueuing thread
  // Under io_mu_. Never throws (finalize and NCCL's threads call it): a batch that cannot be
  // formatted (allocation) is dropped and recording goes on.
  void drain() noexcept {
    try {
      write();
    } catch (...) {
      out_.clear();
      buf_.clear();
    }
  }
  void write() {
    {
      std::lock_guard lock(q_mu_);
      out_.swap(q_);
    }
    if (file_ == nullptr) {
      out_.clear();
      return;
    }
    buf_.clear();
    for (const Stopped& e : out_) {
      buf_.push_back('{');
      describeTo(buf_, e.d);
      fmt::format_to(std::back_inserter(buf_),
                     ",\"comm\":\"{:016x}\",\"id\":{},\"parent\":{},\"t0\":{},\"t1\":{}}}\n",
                     e.comm, e.id, e.parent, e.t0, e.t1);
    }
    std::fwrite(buf_.data(), 1, buf_.size(), file_);
    out_.clear();
  }
  void writeLoop() {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      std::lock_guard io(io_mu_);
      drain();
    }
  }

  std::mutex io_mu_;  // the file and out_
  std::FILE* file_ = nullptr;
  std::vector<Stopped> out_;
  fmt::memory_buffer buf_;  // out_'s text
  SpinLock q_mu_;           // q_: held for a push or a swap
  std::vector<Stopped> q_;
};

RecordFile& recordFile() {
  static auto* f = new RecordFile;  // lives until exit: proxy threads and its writer use it
  return *f;
}

struct Context {
  std::string comm;  // hash, hex
  std::uint64_t hash = 0;
  bool proxy_ops = false;  // report proxy operations to the observer (proxy_ops.h)
  bool (*coll_wanted)(std::uint64_t) = nullptr;  // the observer's (nullptr: always)
  std::uint64_t written = 0;  // the event types written to the record file (none: 0)
  // Task and group events name their parents by id (record level all); the API events alone
  // have no recorded parents, and skip the bookkeeping.
  [[nodiscard]] bool parents() const { return (written & (ncclProfileColl | ncclProfileP2p)) != 0; }
};

// CRYSTAL_RECORD_EVENTS: "api" writes the program's calls only (CollApi, P2pApi: what
// `crystal emulate`'s report reads, docs/emulate.md), anything else every event type.
std::uint64_t recordedTypes() {
  const char* level = std::getenv("CRYSTAL_RECORD_EVENTS");
  if (level != nullptr && std::string_view(level) == "api")
    return ncclProfileCollApi | ncclProfileP2pApi;
  return ncclProfileGroupApi | ncclProfileCollApi | ncclProfileP2pApi | ncclProfileColl |
         ncclProfileP2p;
}

struct Event {
  std::uint64_t id = 0;
  std::int64_t parent = -1;
  std::int64_t t0 = 0;
  const Context* ctx = nullptr;
  bool write = false;    // written to the record file at its stop
  Described d;           // then: what the writer formats
  std::uint64_t op = 0;  // collectives: event id + 1 (ProxyOpStart::op)
  bool ring = false;     // collectives: NCCL's ring algorithm
  bool allgather = false;  // collectives: an all-gather
  bool rewritable = false;  // collectives: see ProxyOpStart::rewritable
  bool coll = false;
  int channels = 0;  // collectives: the channels NCCL runs it on
  int chain_root = -1;  // collectives: see ProxyOpStart::chain_root
  bool chain_reduce = false;
  std::uint64_t bytes = 0;  // collectives: count x type size (0: a type NCCL did not name)
  std::int64_t issued = 0;  // collectives: when NCCL's enqueuing thread reported it
};

// Bytes of an element of NCCL's datatype name (collectives.cc ncclDatatypeToString); 0 for
// one it does not name.
std::uint64_t typeBytes(std::string_view name) {
  static constexpr std::pair<std::string_view, std::uint64_t> kTypes[] = {
      {"ncclInt8", 1},     {"ncclInt32", 4},      {"ncclUint32", 4},    {"ncclInt64", 8},
      {"ncclUint64", 8},   {"ncclFloat16", 2},    {"ncclFloat32", 4},   {"ncclFloat64", 8},
      {"ncclBfloat16", 2}, {"ncclFloat8e4m3", 1}, {"ncclFloat8e5m2", 1}};
  for (const auto& [n, b] : kTypes)
    if (n == name) return b;
  return 0;
}

// Retired collective events (see knownColls), oldest first; guarded by g_live_mu. These
// tables are never destroyed: NCCL's proxy thread reports events until the process is gone,
// also while exit() runs static destructors.
std::deque<std::unique_ptr<Event>>& retiredColls() {
  static auto* q = new std::deque<std::unique_ptr<Event>>;
  return *q;
}

std::atomic<std::uint64_t> g_next_id{0};
// Collective events whose proxy operations may still be announced: NCCL stops a collective's
// event once the host has enqueued it, often before its proxy thread appends the
// collective's operations (ProxyOp events name the stopped event as parent). Such events are
// kept, not freed, for the last kRetiredColls collectives, so a parent pointer still names
// its collective (and no newer event can reuse its address meanwhile).
constexpr std::size_t kRetiredColls = 4096;
std::unordered_set<const void*>& knownColls() {  // live or retired; guarded by g_live_mu
  static auto* s = new std::unordered_set<const void*>;
  return *s;
}

std::mutex g_live_mu;
std::unordered_map<const void*, std::uint64_t>& liveEvents() {
  static auto* m = new std::unordered_map<const void*, std::uint64_t>;
  return *m;
}

// The event's own JSON members, appended to `out` (the writer's batch).
void describeTo(fmt::memory_buffer& out, const Described& d) {
  auto it = std::back_inserter(out);
  switch (d.type) {
    case ncclProfileGroupApi:
      fmt::format_to(it, "\"ev\":\"group_api\",\"depth\":{},\"graph\":{}", d.where, d.graph);
      return;
    case ncclProfileCollApi:
      fmt::format_to(it,
                     "\"ev\":\"coll_api\",\"func\":{},\"count\":{},\"dtype\":{},\"root\":{},"
                     "\"stream\":\"{}\",\"graph\":{}",
                     quoted(d.func), d.count, quoted(d.dtype), d.where, d.stream, d.graph);
      return;
    case ncclProfileP2pApi:
      fmt::format_to(it,
                     "\"ev\":\"p2p_api\",\"func\":{},\"count\":{},\"dtype\":{},\"stream\":\"{}\","
                     "\"graph\":{}",
                     quoted(d.func), d.count, quoted(d.dtype), d.stream, d.graph);
      return;
    case ncclProfileColl:
      fmt::format_to(it,
                     "\"ev\":\"coll\",\"seq\":{},\"func\":{},\"count\":{},\"dtype\":{},"
                     "\"root\":{},\"algo\":{},\"proto\":{},\"channels\":{}",
                     d.seq, quoted(d.func), d.count, quoted(d.dtype), d.where, quoted(d.algo),
                     quoted(d.proto), d.channels);
      return;
    case ncclProfileP2p:
      fmt::format_to(it,
                     "\"ev\":\"p2p\",\"func\":{},\"count\":{},\"dtype\":{},\"peer\":{},"
                     "\"channels\":{}",
                     quoted(d.func), d.count, quoted(d.dtype), d.where, d.channels);
      return;
    default:
      return;
  }
}

ncclResult_t init(void** context, std::uint64_t commId, int* mask, const char* commName, int nNodes,
                  int nranks, int rank, ncclDebugLogger_t logfn) noexcept {
  try {
    *context = nullptr;
    *mask = 0;
    const ProxyOpObserver obs = proxyOpObserver();
    const bool proxy_ops = obs.wanted != nullptr && obs.started != nullptr && obs.wanted();
    const bool record = recordFile().open(logfn);
    if (!record && !proxy_ops) return ncclSuccess;
    auto ctx = std::make_unique<Context>();
    ctx->comm = fmt::format("{:016x}", commId);
    ctx->hash = commId;
    ctx->proxy_ops = proxy_ops;
    ctx->coll_wanted = obs.coll_wanted;
    if (record) {
      ctx->written = recordedTypes();
      recordFile().line(
          fmt::format("{{\"comm\":\"{}\",\"name\":{},\"nnodes\":{},\"nranks\":{},"
                      "\"rank\":{},\"t\":{}}}",
                      ctx->comm, quoted(commName), nNodes, nranks, rank, nowNs()));
      *mask |= static_cast<int>(ctx->written);
    }
    // Proxy operations hang under their collective's event: both are needed.
    if (proxy_ops) *mask |= static_cast<int>(ncclProfileColl | ncclProfileProxyOp);
    *context = ctx.release();
  } catch (...) {
    *mask = 0;
  }
  return ncclSuccess;
}

// A proxy operation: told to the observer, no event of its own (NCCL skips stopEvent for a
// null handle).
void reportProxyOp(const Context& ctx, const ncclProfilerEventDescr_v5_t& d) {
  if (!ctx.proxy_ops) return;
  ProxyOpStart s;
  s.comm = ctx.hash;
  s.channel = d.proxyOp.channelId;
  s.peer = d.proxyOp.peer;
  s.send = d.proxyOp.isSend != 0;
  s.transfers = d.proxyOp.nSteps;
  {
    std::lock_guard lock(g_live_mu);
    // The parent is the collective's event, live or retired (knownColls, so not freed); a
    // p2p's is not there.
    if (knownColls().count(d.parentObj) != 0) {
      const auto* parent = static_cast<const Event*>(d.parentObj);
      s.op = parent->op;
      s.ring = parent->ring;
      s.allgather = parent->allgather;
      s.rewritable = parent->rewritable;
      s.channels = parent->channels;
      s.chain_root = parent->chain_root;
      s.chain_reduce = parent->chain_reduce;
      s.coll_bytes = parent->bytes;
      s.issued_ns = parent->issued;
    }
  }
  s.chunk_bytes = d.proxyOp.chunkSize;
  if (auto started = proxyOpObserver().started) started(s);
}

ncclResult_t startEvent(void* context, void** handle, ncclProfilerEventDescr_v5_t* d) noexcept {
  *handle = nullptr;
  if (context == nullptr || d == nullptr) return ncclSuccess;
  try {
    const auto& ctx = *static_cast<const Context*>(context);
    if (d->type == ncclProfileProxyOp) {
      reportProxyOp(ctx, *d);
      return ncclSuccess;
    }
    // Events not written: only a collective's, which its proxy operations name as parent.
    // NCCL calls here for every task on the thread that enqueues it (ProxyOp in the mask
    // enables them), and an all-to-all is 2 x N p2p tasks: whatever this does costs the real
    // rank host time a target rank does not spend (2026-12-04: with every event formatted
    // here, a 64-rank all-to-all took 240-420 us of CPU against ~100 for NCCL alone).
    const bool write = (ctx.written & d->type) != 0;
    const bool proxy_parent = d->type == ncclProfileColl && ctx.proxy_ops &&
                              (ctx.coll_wanted == nullptr || ctx.coll_wanted(ctx.hash));
    if (!write && !proxy_parent) return ncclSuccess;
    auto ev = std::make_unique<Event>();
    ev->id = g_next_id++;
    ev->ctx = &ctx;
    if (write) {
      ev->write = true;
      ev->d = describe(*d);
      ev->t0 = nowNs();
    }
    if (d->type == ncclProfileColl) {
      ev->op = ev->id + 1;  // NCCL's seqNumber counts per collective type
      ev->ring = d->coll.algo != nullptr && std::string_view(d->coll.algo) == "RING";
      const std::string_view func = d->coll.func != nullptr ? d->coll.func : "";
      ev->allgather = func == "AllGather";
      ev->rewritable = func == "AllReduce" || func == "ReduceScatter" || func == "Reduce" ||
                       func == "Broadcast";
      ev->coll = true;
      ev->channels = d->coll.nChannels;
      if (func == "Broadcast" || func == "Reduce") {
        ev->chain_root = d->coll.root;
        ev->chain_reduce = func == "Reduce";
      }
      ev->bytes = d->coll.count * typeBytes(d->coll.datatype != nullptr ? d->coll.datatype : "");
      if (proxy_parent) ev->issued = ev->t0 != 0 ? ev->t0 : nowNs();
    }
    const bool track = write && ctx.parents();  // parents by id, for the record file only
    if (track || proxy_parent) {
      std::lock_guard lock(g_live_mu);
      if (track) {
        const auto it = liveEvents().find(d->parentObj);
        ev->parent = it == liveEvents().end() ? -1 : static_cast<std::int64_t>(it->second);
        liveEvents().emplace(ev.get(), ev->id);
      }
      if (proxy_parent) knownColls().insert(ev.get());
    }
    *handle = ev.release();
  } catch (...) {
    *handle = nullptr;
  }
  return ncclSuccess;
}

ncclResult_t stopEvent(void* handle) noexcept {
  if (handle == nullptr) return ncclSuccess;
  std::unique_ptr<Event> ev(static_cast<Event*>(handle));
  try {
    if (ev->write) {
      if (ev->ctx->parents()) {
        std::lock_guard lock(g_live_mu);
        liveEvents().erase(ev.get());
      }
      recordFile().event(Stopped{ev->d, ev->ctx->hash, ev->id, ev->parent, ev->t0, nowNs()});
    }
    if (!ev->coll) return ncclSuccess;
    std::lock_guard lock(g_live_mu);
    if (knownColls().count(ev.get()) != 0) {  // proxy operations may still name it
      retiredColls().push_back(std::move(ev));
      if (retiredColls().size() > kRetiredColls) {
        knownColls().erase(retiredColls().front().get());
        retiredColls().pop_front();
      }
    }
  } catch (...) {
  }
  return ncclSuccess;
}

ncclResult_t recordEventState(void*, ncclProfilerEventState_v5_t,
                              ncclProfilerEventStateArgs_v5_t*) noexcept {
  return ncclSuccess;
}

ncclResult_t finalize(void* context) noexcept {
  delete static_cast<Context*>(context);
  recordFile().flush();
  return ncclSuccess;
}

const ncclProfiler_v5_t kTable{"crystal", init, startEvent, stopEvent, recordEventState, finalize};

}  // namespace

const nccl::ncclProfiler_v5_t& profilerV5() { return kTable; }

}  // namespace crystal::profiler
