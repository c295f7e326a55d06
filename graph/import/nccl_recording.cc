// parseNcclRecording: a CRYSTAL_RECORD file (plugin/profiler/recorder.cc) -> RecordedRank.
//
// Ops are the API calls (coll_api, p2p_api) in the order NCCL saw them. A p2p call's peer
// is on the task NCCL made of it (p2p event): tasks are matched to calls first-in first-out
// per (communicator, func, count, datatype). Calls whose parent is one group_api event form
// one group. CUDA streams become graph streams in order of first use.
#include <fmt/core.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "crystal/base/error.h"
#include "crystal/graph/import.h"

namespace crystal::graph {
namespace {

using nlohmann::json;

struct Call {
  std::uint64_t id = 0;
  std::int64_t parent = -1;
  std::size_t line = 0;
  bool p2p = false;
  std::string comm, func, dtype, stream;
  std::uint64_t count = 0;
  std::int32_t root = -1;
  std::int32_t peer = -1;
};

class Reader {
 public:
  explicit Reader(const std::string& source) : source_(source) {}

  RecordedRank read(std::string_view text) {
    rec_.source = source_;
    std::size_t line_no = 0;
    bool header = false;
    while (!text.empty()) {
      const auto nl = text.find('\n');
      const std::string_view line = text.substr(0, nl);
      text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
      ++line_no;
      if (line.empty()) continue;
      json j;
      try {
        j = json::parse(line);
      } catch (const json::exception& e) {  // a syntax error, a number out of range (1e999)
        fail(line_no, fmt::format("not JSON: {}", e.what()));
      }
      if (!j.is_object()) fail(line_no, "not a JSON object");
      if (!header) {
        readHeader(j, line_no);
        header = true;
      } else if (j.contains("ev")) {
        readEvent(j, line_no);
      } else if (j.contains("comm")) {
        readComm(j, line_no);
      } else {
        fail(line_no, "neither a communicator nor an event");
      }
    }
    if (!header) throw InputError(fmt::format("{}: empty recording", source_));
    build();
    return std::move(rec_);
  }

 private:
  [[noreturn]] void fail(std::size_t line, const std::string& what) const {
    throw InputError(fmt::format("{}:{}: {}", source_, line, what));
  }

  std::string str(const json& j, std::size_t line, const char* k) const {
    const auto it = j.find(k);
    if (it == j.end() || !it->is_string())
      fail(line, fmt::format("'{}' missing or not a string", k));
    return it->get<std::string>();
  }
  std::int64_t num(const json& j, std::size_t line, const char* k) const {
    const auto it = j.find(k);
    if (it == j.end() || !it->is_number_integer())
      fail(line, fmt::format("'{}' missing or not an integer", k));
    return it->get<std::int64_t>();
  }

  void readHeader(const json& j, std::size_t line) {
    if (!j.contains("crystal_record") || j["crystal_record"] != 1)
      fail(line, "not a crystal record file (first line lacks \"crystal_record\":1)");
    const json& r = j.contains("rank") ? j["rank"] : json();
    std::int64_t rank = -1;
    if (r.is_number_integer())
      rank = r.get<std::int64_t>();
    else if (r.is_string()) {
      try {
        std::size_t used = 0;
        rank = std::stoll(r.get<std::string>(), &used);
        if (used != r.get<std::string>().size()) rank = -1;
      } catch (const std::exception&) {
        rank = -1;
      }
    }
    if (rank < 0 || rank > INT32_MAX)
      fail(line,
           "the recording does not say its global rank: run the program with RANK or "
           "CRYSTAL_RANK set");
    rec_.rank = static_cast<std::int32_t>(rank);
  }

  void readComm(const json& j, std::size_t line) {
    RecordedComm c;
    c.key = str(j, line, "comm");
    c.name = j.contains("name") && j["name"].is_string() ? j["name"].get<std::string>() : "";
    const auto n = num(j, line, "nranks"), r = num(j, line, "rank");
    if (n < 1 || n > INT32_MAX || r < 0 || r >= n)
      fail(line, fmt::format("rank {} of {} ranks", r, n));
    c.size = static_cast<std::int32_t>(n);
    c.rank = static_cast<std::int32_t>(r);
    if (comm_index_.contains(c.key))
      fail(line, fmt::format("communicator {} initialised twice", c.key));
    comm_index_[c.key] = static_cast<std::int32_t>(rec_.comms.size());
    rec_.comms.push_back(std::move(c));
  }

  void readEvent(const json& j, std::size_t line) {
    const std::string ev = str(j, line, "ev");
    if (ev == "group_api") {
      groups_.insert(static_cast<std::uint64_t>(num(j, line, "id")));
      return;
    }
    if (ev != "coll_api" && ev != "p2p_api" && ev != "p2p" && ev != "coll") return;
    Call c;
    c.id = static_cast<std::uint64_t>(num(j, line, "id"));
    c.parent = num(j, line, "parent");
    c.line = line;
    c.comm = str(j, line, "comm");
    if (!comm_index_.contains(c.comm))
      fail(line, fmt::format("communicator {} was never initialised", c.comm));
    c.func = str(j, line, "func");
    c.dtype = str(j, line, "dtype");
    const auto count = num(j, line, "count");
    if (count < 0) fail(line, "negative count");
    c.count = static_cast<std::uint64_t>(count);
    if (ev == "coll") return;  // the API call carries everything the graph needs
    if (ev == "p2p") {
      c.peer = static_cast<std::int32_t>(num(j, line, "peer"));
      tasks_.push_back(std::move(c));
      return;
    }
    c.p2p = ev == "p2p_api";
    c.stream = str(j, line, "stream");
    if (!c.p2p) c.root = static_cast<std::int32_t>(num(j, line, "root"));
    if (j.contains("graph") && j["graph"] == true && graph_note_++ == 0)
      rec_.notes.push_back(
          fmt::format("line {}: calls captured in CUDA graphs are recorded once "
                      "per capture, not per replay",
                      line));
    calls_.push_back(std::move(c));
  }

  static std::optional<DType> dtypeOf(std::string s) {
    if (s.starts_with("nccl")) s = s.substr(4);
    std::transform(s.begin(), s.end(), s.begin(),
                   [](unsigned char ch) { return std::tolower(ch); });
    static const std::pair<std::string_view, DType> kNames[] = {{"int8", DType::Int8},
                                                                {"char", DType::Int8},
                                                                {"uint8", DType::Uint8},
                                                                {"int32", DType::Int32},
                                                                {"int", DType::Int32},
                                                                {"uint32", DType::Uint32},
                                                                {"int64", DType::Int64},
                                                                {"uint64", DType::Uint64},
                                                                {"float16", DType::Float16},
                                                                {"half", DType::Float16},
                                                                {"float32", DType::Float32},
                                                                {"float", DType::Float32},
                                                                {"float64", DType::Float64},
                                                                {"double", DType::Float64},
                                                                {"bfloat16", DType::BFloat16},
                                                                {"float8e4m3", DType::Float8e4m3},
                                                                {"float8e5m2", DType::Float8e5m2}};
    for (const auto& [n, t] : kNames)
      if (n == s) return t;
    return std::nullopt;
  }

  static std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(),
                   [](unsigned char ch) { return std::tolower(ch); });
    return s;
  }

  void build() {
    std::sort(calls_.begin(), calls_.end(),
              [](const Call& a, const Call& b) { return a.id < b.id; });
    std::sort(tasks_.begin(), tasks_.end(),
              [](const Call& a, const Call& b) { return a.id < b.id; });
    std::vector<bool> used(tasks_.size(), false);
    std::map<std::string, std::uint8_t> streams;
    std::int64_t open = -1;
    std::uint8_t open_stream = 0;
    auto push = [&](const Op& op, std::size_t line) {
      rec_.ops.push_back(op);
      rec_.where.push_back(fmt::format("line {}", line));
    };
    for (const Call& c : calls_) {
      Op op;
      op.comm = comm_index_.at(c.comm);
      const RecordedComm& comm = rec_.comms[static_cast<std::size_t>(op.comm)];
      const auto dtype = dtypeOf(c.dtype);
      if (!dtype) fail(c.line, fmt::format("datatype '{}' unknown", c.dtype));
      op.dtype = *dtype;
      const std::uint64_t bytes = c.count * dtypeSize(*dtype);
      const std::string f = lower(c.func);
      if (c.p2p) {
        if (f != "send" && f != "recv") fail(c.line, fmt::format("p2p call '{}'", c.func));
        op.kind = f == "send" ? OpKind::Send : OpKind::Recv;
        op.bytes = bytes;
        // The oldest unmatched task of the same call shape carries the peer.
        std::size_t t = 0;
        while (t < tasks_.size() &&
               (used[t] || tasks_[t].comm != c.comm || lower(tasks_[t].func) != f ||
                tasks_[t].count != c.count || tasks_[t].dtype != c.dtype))
          ++t;
        if (t == tasks_.size())
          fail(c.line,
               fmt::format("{} of {} elements has no p2p task event, so its peer is unknown",
                           c.func, c.count));
        used[t] = true;
        op.peer = tasks_[t].peer;
        if (op.peer < 0 || op.peer >= comm.size)
          fail(tasks_[t].line,
               fmt::format("peer {} outside communicator of {} ranks", op.peer, comm.size));
      } else {
        op.kind = OpKind::Collective;
        const auto n = static_cast<std::uint64_t>(comm.size);
        // NCCL counts: all-gather sendcount and reduce-scatter recvcount are per rank; the
        // graph's size is the whole buffer (nccl-tests "size").
        if (f == "allreduce")
          op.coll = CollKind::AllReduce, op.bytes = bytes;
        else if (f == "broadcast")
          op.coll = CollKind::Broadcast, op.bytes = bytes, op.peer = c.root;
        else if (f == "reduce")
          op.coll = CollKind::Reduce, op.bytes = bytes, op.peer = c.root;
        else if (f == "allgather")
          op.coll = CollKind::AllGather, op.bytes = bytes * n;
        else if (f == "reducescatter")
          op.coll = CollKind::ReduceScatter, op.bytes = bytes * n;
        else if (f == "alltoall")
          op.coll = CollKind::AllToAll, op.bytes = bytes * n;
        else
          fail(c.line, fmt::format("collective '{}' is not one the graph knows", c.func));
        if ((op.coll == CollKind::Broadcast || op.coll == CollKind::Reduce) &&
            (c.root < 0 || c.root >= comm.size))
          fail(c.line, fmt::format("root {} outside communicator of {} ranks", c.root, comm.size));
      }
      const auto [s, fresh] = streams.emplace(c.stream, static_cast<std::uint8_t>(streams.size()));
      if (fresh && streams.size() > 255) fail(c.line, "more than 255 CUDA streams");
      op.stream = s->second;
      const std::int64_t g = groups_.contains(static_cast<std::uint64_t>(c.parent)) ? c.parent : -1;
      if (open >= 0 && g != open) {
        Op end;
        end.kind = OpKind::GroupEnd;
        end.stream = open_stream;
        push(end, c.line);
        open = -1;
      }
      if (g >= 0 && open < 0) {
        Op begin;
        begin.kind = OpKind::GroupBegin;
        begin.stream = op.stream;
        push(begin, c.line);
        open = g;
        open_stream = op.stream;
      }
      if (g >= 0 && op.stream != open_stream) fail(c.line, "one NCCL group on two CUDA streams");
      push(op, c.line);
    }
    if (open >= 0) {
      Op end;
      end.kind = OpKind::GroupEnd;
      end.stream = open_stream;
      push(end, calls_.back().line);
    }
    rec_.notes.push_back(
        "an NCCL profiler recording has no compute time: the graph holds the "
        "communication and its streams only (add compute from a Kineto trace)");
  }

  const std::string& source_;
  RecordedRank rec_;
  std::map<std::string, std::int32_t> comm_index_;
  std::vector<Call> calls_, tasks_;
  std::set<std::uint64_t> groups_;
  int graph_note_ = 0;
};

}  // namespace

RecordedRank parseNcclRecording(std::string_view text, const std::string& source) {
  return Reader(source).read(text);
}

RecordedRank readNcclRecording(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot open", path));
  std::ostringstream ss;
  ss << in.rdbuf();
  return parseNcclRecording(ss.str(), path);
}

}  // namespace crystal::graph
