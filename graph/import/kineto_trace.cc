// PyTorch profiler (Kineto) Chrome-trace JSON of one rank -> RecordedRank.
//
// What the trace gives and how it maps (docs/record.md has the table):
// * GPU activity (cat "kernel", "gpu_memcpy", "gpu_memset") on CUDA stream args.stream.
//   A kernel carrying "Collective name" (PyTorch copies record_param_comms metadata onto
//   NCCL kernels) is a collective, send or recv; any other is a Compute op of its duration.
// * Order: the CPU launch time (the cuda_runtime event of the same args.correlation), so
//   ops come out in the order the program issued them, as a graph stream lists them.
// * Stream dependencies: each cuda_sync "Stream Wait Event" becomes a Record on
//   args.wait_on_stream at the time of the cudaEventRecord it names
//   (wait_on_cuda_event_record_corr_id) and a Wait on args.stream.
// * "[memory]" instant events on CUDA devices: Alloc (Bytes > 0) / Free (Bytes < 0). The
//   bytes already allocated before the first of them ("Total Allocated" less "Bytes") become
//   one Alloc at the start, so the stream's running memory is the allocator's total.
// * "ProfilerStep#N" ranges: an IterationMark each. "nccl:coalesced" CPU ranges: the
//   communication launched inside them forms one NCCL group.
#include <fmt/core.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "crystal/base/error.h"
#include "crystal/graph/import.h"

namespace crystal::graph {
namespace {

using nlohmann::json;

struct Item {
  double key = 0;            // CPU issue time, microseconds
  std::size_t seq = 0;       // file order, breaks ties
  std::int64_t stream = -1;  // trace stream id; -1 = the compute stream (memory, iterations)
  Op op;
  std::string name;       // op name
  std::size_t event = 0;  // index in traceEvents
};

class Reader {
 public:
  Reader(const json& doc, const std::string& source) : doc_(doc), source_(source) {}

  RecordedRank read() {
    if (!doc_.is_object() || !doc_.contains("traceEvents") || !doc_["traceEvents"].is_array())
      throw InputError(fmt::format("{}: not a Kineto trace: no 'traceEvents' array", source_));
    rec_.source = source_;
    rec_.rank = readRank();
    const json& events = doc_["traceEvents"];
    indexRuntime(events);
    for (std::size_t i = 0; i < events.size(); ++i) readEvent(events[i], i);
    if (unattributed_waits_ > 0)
      note(fmt::format("{} Stream Wait Event(s) on an event Kineto could not attribute "
                       "(wait_on_cuda_event_record_corr_id and wait_on_stream -1, first at "
                       "traceEvents[{}]): no dependency taken for them",
                       unattributed_waits_, first_unattributed_));
    emit();
    return std::move(rec_);
  }

 private:
  [[noreturn]] void fail(std::size_t event, const std::string& what) const {
    throw InputError(fmt::format("{}: traceEvents[{}]: {}", source_, event, what));
  }

  std::int32_t readRank() const {
    const auto it = doc_.find("distributedInfo");
    if (it != doc_.end() && it->is_object() && it->contains("rank")) {
      const json& r = (*it)["rank"];
      std::int64_t v = -1;
      if (r.is_number_integer())
        v = r.get<std::int64_t>();
      else if (r.is_string())
        v = parseInt(r.get<std::string>()).value_or(-1);
      if (v >= 0 && v <= INT32_MAX) return static_cast<std::int32_t>(v);
      throw InputError(fmt::format("{}: 'distributedInfo.rank' is not a rank number", source_));
    }
    throw InputError(
        fmt::format("{}: no 'distributedInfo.rank': the trace does not say which "
                    "rank recorded it (profile a torch.distributed program)",
                    source_));
  }

  static std::optional<std::int64_t> parseInt(std::string_view s) {
    while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
    std::int64_t v = 0;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || p != s.data() + s.size()) return std::nullopt;
    return v;
  }

  // Field readers: a present field of the wrong type is an error naming the event.
  static const json* field(const json& obj, const char* name) {
    if (!obj.is_object()) return nullptr;
    const auto it = obj.find(name);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }
  double number(const json& e, std::size_t i, const char* name) const {
    const json* v = field(e, name);
    if (v == nullptr || !v->is_number()) fail(i, fmt::format("'{}' missing or not a number", name));
    return v->get<double>();
  }
  std::int64_t integer(const json& obj, std::size_t i, const char* name) const {
    const json* v = field(obj, name);
    if (v != nullptr && v->is_number_integer()) return v->get<std::int64_t>();
    if (v != nullptr && v->is_string())
      if (auto p = parseInt(v->get<std::string>())) return *p;
    fail(i, fmt::format("'args.{}' missing or not an integer", name));
  }
  static std::string text(const json& obj, const char* name) {
    const json* v = field(obj, name);
    if (v == nullptr || !v->is_string()) return {};
    std::string s = v->get<std::string>();
    if (s.size() >= 2 && s.front() == '"' && s.back() == '"') s = s.substr(1, s.size() - 2);
    return s;
  }

  // cuda_runtime launch/record/wait calls by correlation id: their CPU time orders the ops.
  void indexRuntime(const json& events) {
    for (std::size_t i = 0; i < events.size(); ++i) {
      const json& e = events[i];
      const std::string cat = text(e, "cat");
      if (cat != "cuda_runtime" && cat != "cuda_driver") continue;
      const json* args = field(e, "args");
      const json* corr = args ? field(*args, "correlation") : nullptr;
      if (corr == nullptr || !corr->is_number_integer()) continue;
      runtime_ts_[corr->get<std::int64_t>()] = number(e, i, "ts");
    }
  }

  double launchTime(const json& e, std::size_t i) const {
    const json* args = field(e, "args");
    const json* corr = args ? field(*args, "correlation") : nullptr;
    if (corr != nullptr && corr->is_number_integer())
      if (auto it = runtime_ts_.find(corr->get<std::int64_t>()); it != runtime_ts_.end())
        return it->second;
    return number(e, i, "ts");
  }

  void add(double key, std::int64_t stream, const Op& op, std::string name, std::size_t event) {
    items_.push_back(Item{key, items_.size(), stream, op, std::move(name), event});
  }

  void readEvent(const json& e, std::size_t i) {
    if (!e.is_object()) fail(i, "not an object");
    const std::string ph = text(e, "ph"), cat = text(e, "cat"), name = text(e, "name");
    const json* args = field(e, "args");
    if (ph == "X" && (cat == "kernel" || cat == "gpu_memcpy" || cat == "gpu_memset")) {
      if (args == nullptr) fail(i, fmt::format("GPU event '{}' without args", name));
      const std::int64_t stream = integer(*args, i, "stream");
      if (field(*args, "Collective name") != nullptr) return readComm(e, *args, i, stream);
      Op op;
      op.kind = OpKind::Compute;
      op.duration_us = number(e, i, "dur");
      if (!(op.duration_us >= 0)) fail(i, "negative duration");
      add(launchTime(e, i), stream, op, name, i);
    } else if (ph == "X" && cat == "cuda_sync" &&
               (name == "Stream Wait Event" ||
                text(args ? *args : json{}, "cuda_sync_kind") == "Stream Wait Event")) {
      if (args == nullptr) fail(i, "Stream Wait Event without args");
      const std::int64_t waiter = integer(*args, i, "stream");
      const std::int64_t producer = integer(*args, i, "wait_on_stream");
      const std::int64_t rec_corr = integer(*args, i, "wait_on_cuda_event_record_corr_id");
      if (rec_corr == -1 && producer == -1) {
        // CUPTI did not tie the event to a record (seen with PyTorch 2.11 on the H200 for
        // ProcessGroupNCCL's events): there is no producer to wait for. Counted in a note.
        if (unattributed_waits_++ == 0) first_unattributed_ = i;
        return;
      }
      const auto rec = runtime_ts_.find(rec_corr);
      if (rec == runtime_ts_.end())
        fail(i, fmt::format("Stream Wait Event on the cudaEventRecord with correlation {}, which "
                            "the trace does not hold (trace window cut a dependency?)",
                            rec_corr));
      Op r, w;
      r.kind = OpKind::Record;
      w.kind = OpKind::Wait;
      r.tag = w.tag = next_event_++;
      add(rec->second, producer, r, "", i);
      add(launchTime(e, i), waiter, w, "", i);
    } else if (ph == "i" && name == "[memory]") {
      if (args == nullptr) fail(i, "[memory] event without args");
      // c10::DeviceType: 0 CPU, 1 CUDA.
      if (integer(*args, i, "Device Type") != 1) return;
      const std::int64_t bytes = integer(*args, i, "Bytes");
      if (bytes == 0) return;
      Op op;
      op.kind = bytes > 0 ? OpKind::Alloc : OpKind::Free;
      op.bytes = bytes > 0 ? static_cast<std::uint64_t>(bytes)
                           : static_cast<std::uint64_t>(-(bytes + 1)) + 1;
      const double ts = number(e, i, "ts");
      add(ts, -1, op, "", i);
      // The allocator's total after this event, less this event: what the program held
      // before it. Kept for the earliest event (the memory held when the window opened).
      if (field(*args, "Total Allocated") != nullptr && (!held_ || ts < held_->ts)) {
        const std::int64_t total = integer(*args, i, "Total Allocated");
        if (total < 0 || (bytes > 0 && total < bytes))
          fail(i, fmt::format("'Total Allocated' {} is below this allocation's {} bytes", total,
                              bytes));
        held_ = Held{ts, static_cast<std::uint64_t>(total - bytes), i};
      }
    } else if (ph == "X" && name.starts_with("ProfilerStep#")) {
      Op op;
      op.kind = OpKind::IterationMark;
      op.tag = iterations_++;
      add(number(e, i, "ts"), -1, op, "", i);
    } else if (ph == "X" && name == "nccl:coalesced") {
      const double ts = number(e, i, "ts");
      groups_.push_back({ts, ts + number(e, i, "dur"), i});
    }
  }

  static std::optional<DType> dtypeOf(std::string_view s) {
    // c10::toString(ScalarType) names.
    static const std::pair<std::string_view, DType> kNames[] = {
        {"Float", DType::Float32},
        {"Half", DType::Float16},
        {"BFloat16", DType::BFloat16},
        {"Double", DType::Float64},
        {"Int", DType::Int32},
        {"Long", DType::Int64},
        {"Char", DType::Int8},
        {"Byte", DType::Uint8},
        {"Bool", DType::Uint8},
        {"UInt32", DType::Uint32},
        {"UInt64", DType::Uint64},
        {"Float8_e4m3fn", DType::Float8e4m3},
        {"Float8_e5m2", DType::Float8e5m2}};
    for (const auto& [n, t] : kNames)
      if (n == s) return t;
    return std::nullopt;
  }

  std::int32_t commIndex(const json& args, std::size_t i) {
    std::string key = text(args, "Process Group Name");
    const std::string desc = text(args, "Process Group Description");
    if (key.empty()) key = desc;
    if (key.empty())
      fail(i, "collective without 'Process Group Name' or 'Process Group Description'");
    const std::int64_t size = integer(args, i, "Group size");
    if (size < 1 || size > INT32_MAX) fail(i, fmt::format("'Group size' {} out of range", size));
    RecordedComm c;
    c.key = key;
    c.name = desc;
    c.size = static_cast<std::int32_t>(size);
    c.ranks = groupRanks(args, i);
    if (!c.ranks.empty()) {
      if (static_cast<std::int64_t>(c.ranks.size()) != size)
        fail(i, fmt::format("'Process Group Ranks' lists {} ranks, 'Group size' is {}",
                            c.ranks.size(), size));
      const auto me = std::find(c.ranks.begin(), c.ranks.end(), rec_.rank);
      if (me == c.ranks.end())
        fail(i, fmt::format("'Process Group Ranks' does not hold this trace's rank {}", rec_.rank));
      c.rank = static_cast<std::int32_t>(me - c.ranks.begin());
    }
    for (std::size_t k = 0; k < rec_.comms.size(); ++k) {
      if (rec_.comms[k].key != key) continue;
      if (!(rec_.comms[k] == c))
        fail(i, fmt::format("process group '{}' changes size or members within the trace", key));
      return static_cast<std::int32_t>(k);
    }
    rec_.comms.push_back(std::move(c));
    return static_cast<std::int32_t>(rec_.comms.size() - 1);
  }

  // "[0, 1, 2]" (PyTorch writes it as a string) or a JSON array. PyTorch shortens long lists
  // to "[a, b, ..., z]": then the members are unknown and matching falls back to size.
  std::vector<std::int32_t> groupRanks(const json& args, std::size_t i) const {
    const json* v = field(args, "Process Group Ranks");
    std::vector<std::int32_t> out;
    if (v == nullptr) return out;
    if (v->is_array()) {
      for (const auto& r : *v) {
        if (!r.is_number_integer()) fail(i, "'Process Group Ranks' holds a non-integer");
        out.push_back(r.get<std::int32_t>());
      }
      return out;
    }
    std::string s = text(args, "Process Group Ranks");
    if (s.find("...") != std::string::npos) return {};
    if (s.size() < 2 || s.front() != '[' || s.back() != ']')
      fail(i, fmt::format("'Process Group Ranks' = '{}' is not a list", s));
    std::string_view body(s.data() + 1, s.size() - 2);
    while (!body.empty()) {
      const auto comma = body.find(',');
      const auto n = parseInt(body.substr(0, comma));
      if (!n || *n < 0 || *n > INT32_MAX)
        fail(i, fmt::format("'Process Group Ranks' = '{}' holds a non-rank", s));
      out.push_back(static_cast<std::int32_t>(*n));
      if (comma == std::string_view::npos) break;
      body.remove_prefix(comma + 1);
    }
    return out;
  }

  void readComm(const json& e, const json& args, std::size_t i, std::int64_t stream) {
    std::string coll = text(args, "Collective name");
    std::transform(coll.begin(), coll.end(), coll.begin(),
                   [](unsigned char ch) { return std::tolower(ch); });
    const std::string dt = text(args, "dtype");
    const auto dtype = dtypeOf(dt);
    if (!dtype) fail(i, fmt::format("'dtype' '{}' is not a type NCCL moves", dt));
    const auto in = integer(args, i, "In msg nelems"), out = integer(args, i, "Out msg nelems");
    if (in < 0 || out < 0) fail(i, "negative 'In/Out msg nelems'");
    const auto e_size = static_cast<std::uint64_t>(dtypeSize(*dtype));
    Op op;
    op.kind = OpKind::Collective;
    op.dtype = *dtype;
    op.comm = commIndex(args, i);
    op.bytes = static_cast<std::uint64_t>(in) * e_size;
    auto is = [&](std::initializer_list<std::string_view> names) {
      return std::find(names.begin(), names.end(), coll) != names.end();
    };
    if (is({"allreduce", "all_reduce", "allreduce_coalesced", "barrier"})) {
      op.coll = CollKind::AllReduce;
    } else if (is({"allgather", "all_gather", "_allgather_base", "all_gather_into_tensor",
                   "allgather_into_tensor_coalesced", "allgather_coalesced"})) {
      op.coll = CollKind::AllGather;
      op.bytes = static_cast<std::uint64_t>(out) * e_size;
    } else if (is({"reduce_scatter", "_reduce_scatter_base", "reduce_scatter_tensor",
                   "reduce_scatter_tensor_coalesced"})) {
      op.coll = CollKind::ReduceScatter;
    } else if (is({"broadcast", "reduce"})) {
      op.coll = coll == "broadcast" ? CollKind::Broadcast : CollKind::Reduce;
      op.peer = 0;
      note(fmt::format("{} at traceEvents[{}]: Kineto does not record the root; taken as 0", coll,
                       i));
    } else if (is({"all_to_all", "alltoall", "alltoall_base", "all_to_all_single"})) {
      const std::string split = text(args, "In split size");
      op.coll = splitsEqual(split) ? CollKind::AllToAll : CollKind::AllToAllv;
    } else if (is({"send", "recv"})) {
      op.kind = coll == "send" ? OpKind::Send : OpKind::Recv;
      const std::int64_t peer = integer(args, i, coll == "send" ? "Dst Rank" : "Src Rank");
      if (peer < 0 || peer > INT32_MAX) fail(i, fmt::format("peer rank {} out of range", peer));
      op.peer = static_cast<std::int32_t>(peer);
      if (coll == "recv" && out > 0) op.bytes = static_cast<std::uint64_t>(out) * e_size;
    } else {
      fail(i, fmt::format("'Collective name' '{}' is not a collective the graph knows", coll));
    }
    add(launchTime(e, i), stream, op, coll, i);
  }

  static bool splitsEqual(const std::string& list) {
    // "[]" or "[4, 4, 4]": equal; the list may be shortened with "...".
    std::string_view s = list;
    std::string_view first;
    while (!s.empty()) {
      const auto comma = s.find(',');
      std::string_view v = s.substr(0, comma);
      while (!v.empty() && (v.front() == ' ' || v.front() == '[')) v.remove_prefix(1);
      while (!v.empty() && (v.back() == ' ' || v.back() == ']')) v.remove_suffix(1);
      if (!v.empty()) {
        if (first.empty())
          first = v;
        else if (v != first)
          return false;
      }
      if (comma == std::string_view::npos) break;
      s.remove_prefix(comma + 1);
    }
    return true;
  }

  void note(std::string s) {
    if (rec_.notes.size() < 20) rec_.notes.push_back(std::move(s));
  }

  // Sort by issue time; number the trace streams; wrap coalesced launches in groups.
  void emit() {
    std::sort(items_.begin(), items_.end(), [](const Item& a, const Item& b) {
      return a.key != b.key ? a.key < b.key : a.seq < b.seq;
    });
    std::vector<std::int64_t> ids;
    for (const Item& it : items_)
      if (it.stream >= 0) ids.push_back(it.stream);
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    if (ids.size() > 255)
      throw InputError(
          fmt::format("{}: {} CUDA streams; the graph holds at most 255", source_, ids.size()));
    auto streamOf = [&](std::int64_t id) {
      return id < 0 ? std::uint8_t{0}
                    : static_cast<std::uint8_t>(std::lower_bound(ids.begin(), ids.end(), id) -
                                                ids.begin());
    };
    std::map<std::string, std::uint32_t> names;
    auto groupOf = [&](const Item& it) -> std::int64_t {
      for (std::size_t g = 0; g < groups_.size(); ++g)
        if (it.key >= groups_[g].begin && it.key <= groups_[g].end)
          return static_cast<std::int64_t>(g);
      return -1;
    };
    std::int64_t open = -1;
    std::uint8_t open_stream = 0;
    std::vector<std::pair<Op, std::string>> deferred;  // memory events inside a group
    auto push = [&](Op op, std::string where) {
      rec_.ops.push_back(op);
      rec_.where.push_back(std::move(where));
    };
    auto closeGroup = [&] {
      Op end;
      end.kind = OpKind::GroupEnd;
      end.stream = open_stream;
      push(end, fmt::format("traceEvents[{}]", groups_[static_cast<std::size_t>(open)].event));
      open = -1;
      for (auto& [op, where] : deferred) push(op, std::move(where));
      deferred.clear();
    };
    for (const Item& it : items_) {
      Op op = it.op;
      op.stream = streamOf(it.stream);
      const bool comm =
          op.kind == OpKind::Collective || op.kind == OpKind::Send || op.kind == OpKind::Recv;
      const bool memory = op.kind == OpKind::Alloc || op.kind == OpKind::Free;
      if (memory && open >= 0 && groupOf(it) == open) {
        deferred.emplace_back(op, fmt::format("traceEvents[{}]", it.event));
        continue;
      }
      const std::int64_t g = comm ? groupOf(it) : -1;
      if (g != open && open >= 0) closeGroup();
      if (!comm && !memory && groupOf(it) >= 0)
        fail(it.event,
             fmt::format("{} launched inside the nccl:coalesced range at traceEvents[{}]",
                         toString(op.kind), groups_[static_cast<std::size_t>(groupOf(it))].event));
      if (g >= 0 && g != open) {
        Op begin;
        begin.kind = OpKind::GroupBegin;
        begin.stream = op.stream;
        push(begin, fmt::format("traceEvents[{}]", groups_[static_cast<std::size_t>(g)].event));
        open = g;
        open_stream = op.stream;
      }
      if (g >= 0 && op.stream != open_stream)
        fail(it.event, "communication of one nccl:coalesced range on two CUDA streams");
      if (!it.name.empty()) {
        auto [n, fresh] = names.emplace(it.name, static_cast<std::uint32_t>(rec_.strings.size()));
        if (fresh) rec_.strings.push_back(it.name);
        op.name = n->second;
      }
      push(op, fmt::format("traceEvents[{}]", it.event));
    }
    if (open >= 0) closeGroup();
    if (held_ && held_->bytes > 0) {
      Op op;
      op.kind = OpKind::Alloc;
      op.bytes = held_->bytes;
      rec_.ops.insert(rec_.ops.begin(), op);
      rec_.where.insert(rec_.where.begin(), fmt::format("traceEvents[{}]", held_->event));
      note(
          fmt::format("rank {}: {} bytes were allocated before the trace window ('Total "
                      "Allocated' less 'Bytes' at traceEvents[{}]): one Alloc at the start",
                      rec_.rank, held_->bytes, held_->event));
    }
  }

  struct Range {
    double begin, end;
    std::size_t event;
  };
  const json& doc_;
  const std::string& source_;
  RecordedRank rec_;
  std::map<std::int64_t, double> runtime_ts_;
  std::vector<Item> items_;
  std::vector<Range> groups_;
  std::uint32_t next_event_ = 0;
  std::size_t unattributed_waits_ = 0, first_unattributed_ = 0;
  std::uint32_t iterations_ = 0;
  struct Held {
    double ts;
    std::uint64_t bytes;  // allocated before the earliest memory event
    std::size_t event;
  };
  std::optional<Held> held_;
};

}  // namespace

RecordedRank parseKinetoTrace(std::string_view text, const std::string& source) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::parse_error& e) {
    throw InputError(fmt::format("{}: not JSON (byte {}): {}", source, e.byte, e.what()));
  } catch (const json::exception& e) {  // a number out of range (1e999), ...
    throw InputError(fmt::format("{}: not JSON: {}", source, e.what()));
  }
  return Reader(doc, source).read();
}

RecordedRank readKinetoTrace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot open", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  return parseKinetoTrace(ss.str(), path);
}

}  // namespace crystal::graph
