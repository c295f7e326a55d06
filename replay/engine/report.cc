// Tables and JSON documents of a replay. Times print in milliseconds (iteration scale) or
// microseconds (call scale); JSON carries microseconds as numbers.
#include "crystal/replay/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "names.h"

namespace crystal::replay {

using detail::algoName;
using detail::collName;
using detail::protoName;

namespace {

double ms(TimeNs t) { return static_cast<double>(t) / 1e6; }
double gib(std::uint64_t b) { return static_cast<double>(b) / static_cast<double>(1ull << 30); }

std::string bytesText(std::uint64_t b) {
  if (b >= (1ull << 30)) return fmt::format("{:.2f} GiB", gib(b));
  if (b >= (1ull << 20)) return fmt::format("{:.2f} MiB", static_cast<double>(b) / (1 << 20));
  if (b >= (1ull << 10)) return fmt::format("{:.2f} KiB", static_cast<double>(b) / (1 << 10));
  return fmt::format("{} B", b);
}

IterationStats mean(const std::vector<IterationStats>& its) {
  IterationStats m;
  if (its.empty()) return m;
  for (const auto& i : its) {
    m.time += i.time;
    m.compute += i.compute;
    m.exposed_comm += i.exposed_comm;
    m.bubble += i.bubble;
  }
  const auto n = static_cast<TimeNs>(its.size());
  return {m.time / n, m.compute / n, m.exposed_comm / n, m.bubble / n};
}

std::string_view callName(const CollectiveStat& s) {
  return s.p2p ? std::string_view("SendRecv") : collName(s.kind);
}

std::vector<const CollectiveStat*> byTotal(const ReplayResult& r) {
  std::vector<const CollectiveStat*> v;
  for (const auto& s : r.collectives) v.push_back(&s);
  std::stable_sort(v.begin(), v.end(), [](const CollectiveStat* a, const CollectiveStat* b) {
    return a->time * static_cast<TimeNs>(a->calls) > b->time * static_cast<TimeNs>(b->calls);
  });
  return v;
}

}  // namespace

std::vector<ClassSummary> summarizeClasses(const graph::Graph& g, const ReplayResult& r) {
  std::map<std::int32_t, const UnitResult*> slowest;
  for (const auto& u : r.units) {
    auto [it, fresh] = slowest.emplace(u.cls, &u);
    if (!fresh && u.end > it->second->end) it->second = &u;
  }
  std::vector<ClassSummary> out;
  for (const auto& [cls, u] : slowest)
    out.push_back(
        ClassSummary{cls, u->rank, g.classSize(cls), mean(u->iterations), u->peak_memory});
  return out;
}

std::string summaryTable(const graph::Graph& g, const ReplayResult& r) {
  std::string s =
      fmt::format("{:>6} {:>7} {:>7} {:>12} {:>12} {:>12} {:>12} {:>11}\n", "class", "rank",
                  "ranks", "iter (ms)", "compute", "exposed comm", "bubble", "peak mem");
  for (const auto& c : summarizeClasses(g, r))
    s += fmt::format("{:>6} {:>7} {:>7} {:>12.3f} {:>12.3f} {:>12.3f} {:>12.3f} {:>7.2f} GiB\n",
                     c.cls, c.rank, c.ranks, ms(c.mean.time), ms(c.mean.compute),
                     ms(c.mean.exposed_comm), ms(c.mean.bubble), gib(c.peak_memory));
  return s;
}

std::string collectiveTable(const ReplayResult& r, std::size_t top) {
  std::string s = fmt::format("{:<14} {:<8} {:>6} {:>11} {:<6} {:<6} {:>4} {:>11} {:>8} {:>11}\n",
                              "call", "comm", "ranks", "bytes", "algo", "proto", "ch", "time (us)",
                              "calls", "total (ms)");
  const auto rows = byTotal(r);
  const std::size_t n = top == 0 ? rows.size() : std::min(top, rows.size());
  for (std::size_t i = 0; i < n; ++i) {
    const CollectiveStat& c = *rows[i];
    s += fmt::format("{:<14} {:<8} {:>6} {:>11} {:<6} {:<6} {:>4} {:>11.2f} {:>8} {:>11.3f}\n",
                     callName(c), c.family, c.nranks, bytesText(c.bytes),
                     c.p2p ? "-" : algoName(c.algo), c.p2p ? "-" : protoName(c.proto), c.channels,
                     nsToUs(c.time), c.calls, ms(c.time * static_cast<TimeNs>(c.calls)));
  }
  if (n < rows.size()) s += fmt::format("({} more rows in --json)\n", rows.size() - n);
  return s;
}

nlohmann::json summaryJson(const graph::Graph& g, const ReplayResult& r) {
  nlohmann::json j;
  j["world"] = r.world;
  j["mode"] = r.mode == ReplayMode::Symmetric ? "symmetric" : "naive";
  j["events"] = r.events;
  j["model_calls"] = r.model_calls;
  j["uncoupled_ops"] = r.uncoupled_ops;
  j["wall_seconds"] = r.wall_seconds;
  auto& classes = j["classes"] = nlohmann::json::array();
  for (const auto& c : summarizeClasses(g, r)) {
    const UnitResult& u = r.unitOf(g, c.rank);
    nlohmann::json its = nlohmann::json::array();
    for (const auto& i : u.iterations)
      its.push_back({{"time_us", nsToUs(i.time)},
                     {"compute_us", nsToUs(i.compute)},
                     {"exposed_comm_us", nsToUs(i.exposed_comm)},
                     {"bubble_us", nsToUs(i.bubble)}});
    classes.push_back({{"class", c.cls},
                       {"rank", c.rank},
                       {"ranks", c.ranks},
                       {"iteration_us", nsToUs(c.mean.time)},
                       {"compute_us", nsToUs(c.mean.compute)},
                       {"exposed_comm_us", nsToUs(c.mean.exposed_comm)},
                       {"bubble_us", nsToUs(c.mean.bubble)},
                       {"peak_memory_bytes", c.peak_memory},
                       {"iterations", std::move(its)}});
  }
  auto& colls = j["collectives"] = nlohmann::json::array();
  for (const CollectiveStat* c : byTotal(r))
    colls.push_back({{"call", callName(*c)},
                     {"family", c->family},
                     {"ranks", c->nranks},
                     {"bytes", c->bytes},
                     {"algo", c->p2p ? "" : algoName(c->algo)},
                     {"proto", c->p2p ? "" : protoName(c->proto)},
                     {"channels", c->channels},
                     {"time_us", nsToUs(c->time)},
                     {"calls", c->calls}});
  return j;
}

// Compute spans are complete events ("X") on the stream's track. Communication spans are
// async events ("b"/"e"): grouped sends and receives overlap on one stream, which complete
// events on one track cannot show. The wait for peers is in args.
nlohmann::json chromeTrace(const ReplayResult& r) {
  nlohmann::json events = nlohmann::json::array();
  std::map<std::int32_t, std::map<int, bool>> tracks;
  std::uint64_t id = 0;
  for (const TraceSpan& s : r.trace) {
    tracks[s.rank][s.stream] = true;
    const std::string name = !s.name.empty() ? std::string(s.name)
                             : s.kind == graph::OpKind::Collective
                                 ? std::string(collName(s.coll))
                                 : std::string(detail::opName(s.kind));
    if (s.kind == graph::OpKind::Compute) {
      events.push_back({{"name", name},
                        {"cat", "compute"},
                        {"ph", "X"},
                        {"pid", s.rank},
                        {"tid", s.stream},
                        {"ts", nsToUs(s.start)},
                        {"dur", nsToUs(s.end - s.start)},
                        {"args", {{"iteration", s.iteration}}}});
      continue;
    }
    nlohmann::json args = {{"bytes", s.bytes},
                           {"comm", s.family},
                           {"iteration", s.iteration},
                           {"stream", s.stream},
                           {"wait_us", nsToUs(s.start - s.posted)}};
    if (s.peer >= 0) args["peer"] = s.peer;
    const std::string cat = s.kind == graph::OpKind::Collective ? "collective" : "p2p";
    ++id;
    events.push_back({{"name", name},
                      {"cat", cat},
                      {"ph", "b"},
                      {"id", id},
                      {"pid", s.rank},
                      {"tid", s.stream},
                      {"ts", nsToUs(s.posted)},
                      {"args", std::move(args)}});
    events.push_back({{"name", name},
                      {"cat", cat},
                      {"ph", "e"},
                      {"id", id},
                      {"pid", s.rank},
                      {"tid", s.stream},
                      {"ts", nsToUs(s.end)}});
  }
  for (const auto& [rank, streams] : tracks) {
    events.push_back({{"name", "process_name"},
                      {"ph", "M"},
                      {"pid", rank},
                      {"args", {{"name", fmt::format("rank {}", rank)}}}});
    for (const auto& [stream, used] : streams)
      events.push_back({{"name", "thread_name"},
                        {"ph", "M"},
                        {"pid", rank},
                        {"tid", stream},
                        {"args", {{"name", fmt::format("stream {}", stream)}}}});
  }
  return nlohmann::json{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
}

}  // namespace crystal::replay
