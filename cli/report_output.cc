// The report's outputs (cli/emulate_report.h): the table, report.json, timeline.json.
#include <fmt/core.h>

#include <algorithm>
#include <map>
#include <set>

#include "cli/emulate_report.h"

namespace crystal::cli::report {

namespace {

using nlohmann::json;

json summaryJson(const std::optional<Summary>& s) {
  if (!s) return nullptr;
  return {{"n", s->n}, {"mean", s->mean}, {"p50", s->p50}, {"min", s->min}, {"max", s->max}};
}

template <typename T>
json orNull(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

const RankPrediction* predictionOf(const Prediction& p, int rank) {
  for (const RankPrediction& r : p.ranks)
    if (r.rank == rank) return &r;
  return nullptr;
}

// (measured - predicted) / predicted in percent.
std::optional<double> differencePct(double measured, double predicted) {
  if (!(predicted > 0)) return std::nullopt;
  return 100.0 * (measured - predicted) / predicted;
}

std::string gib(std::uint64_t b) {
  return fmt::format("{:.2f} GiB", static_cast<double>(b) / (1ull << 30));
}

std::string msOr(const std::optional<double>& v) { return v ? fmt::format("{:.3f}", *v) : "-"; }

std::string pctOr(const std::optional<double>& v) { return v ? fmt::format("{:+.1f}%", *v) : "-"; }

std::string steadyRule(const StepPlan& plan) {
  std::string s =
      fmt::format("steady state = steps after the first {} (warm-up, --warmup)", plan.warmup);
  if (plan.profiled_count == 1)
    s += fmt::format(", without the profiled step {}", plan.profiled_first);
  else if (plan.profiled_count > 1)
    s += fmt::format(", without the profiled steps {}..{}", plan.profiled_first,
                     plan.profiled_first + plan.profiled_count - 1);
  return s;
}

}  // namespace

json reportJson(const std::string& config_path, std::span<const RankReport> ranks,
                const Prediction& prediction, const StepPlan& plan, int exit_code,
                std::span<const std::string> not_faithful) {
  json out = {{"format", "crystal-emulate-report-1"},
              {"config", config_path},
              {"exit_code", exit_code},
              {"not_faithful", json(std::vector<std::string>(not_faithful.begin(),
                                                             not_faithful.end()))},
              {"warmup_steps", plan.warmup},
              {"profiled_steps", json::array()},
              {"steady_state", steadyRule(plan)},
              {"ranks", json::array()}};
  for (int i = 0; i < plan.profiled_count; ++i)
    out["profiled_steps"].push_back(plan.profiled_first + i);
  for (const RankReport& r : ranks) {
    json j = {
        {"rank", r.rank},
        {"iterations_from", r.iterations_from.empty() ? json(nullptr) : json(r.iterations_from)},
        {"steps", r.steps},
        {"steady_steps", r.steady_steps},
        {"iteration_ms", summaryJson(r.iteration_ms)},
        {"gpu_ms", summaryJson(r.gpu_ms)},
        {"exposed_comm_ms", orNull(r.exposed_comm_ms)},
        {"nccl_kernel_ms", orNull(r.nccl_kernel_ms)},
        {"peak_memory_allocated", orNull(r.peak_allocated)},
        {"peak_memory_reserved", orNull(r.peak_reserved)},
        {"nccl_calls", r.nccl_calls},
        {"notes", r.notes},
        {"predicted", nullptr}};
    if (const RankPrediction* p = predictionOf(prediction, r.rank)) {
      json pj = {{"class", p->rank_class},
                 {"iteration_ms", p->iteration_ms},
                 {"peak_memory", p->peak_memory},
                 {"iteration_diff_pct", nullptr},
                 {"peak_memory_diff_pct", nullptr}};
      if (r.iteration_ms)
        pj["iteration_diff_pct"] = orNull(differencePct(r.iteration_ms->mean, p->iteration_ms));
      if (r.peak_allocated)
        pj["peak_memory_diff_pct"] = orNull(differencePct(static_cast<double>(*r.peak_allocated),
                                                          static_cast<double>(p->peak_memory)));
      j["predicted"] = std::move(pj);
    }
    out["ranks"].push_back(std::move(j));
  }
  out["prediction_error"] = prediction.error.empty() ? json(nullptr) : json(prediction.error);
  out["virtual_peers_in_timeline"] = prediction.virtual_peers;
  return out;
}

std::string reportTable(std::span<const RankReport> ranks, const Prediction& prediction,
                        const StepPlan& plan) {
  std::string s = fmt::format("crystal emulate: report ({}; times in ms)\n", steadyRule(plan));
  s += fmt::format(
      "{:>6} {:>6} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10} | {:>9} {:>8} {:>10} {:>8}\n",
      "rank", "steps", "steady", "iter mean", "p50", "min", "max", "exp. comm", "peak alloc",
      "peak resv", "sim iter", "diff", "sim peak", "diff");
  for (const RankReport& r : ranks) {
    const auto& it = r.iteration_ms;
    const RankPrediction* p = predictionOf(prediction, r.rank);
    s += fmt::format(
        "{:>6} {:>6} {:>6} {:>9} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10} | {:>9} {:>8} {:>10} "
        "{:>8}\n",
        r.rank, r.steps, r.steady_steps.size(), it ? fmt::format("{:.3f}", it->mean) : "-",
        it ? fmt::format("{:.3f}", it->p50) : "-", it ? fmt::format("{:.3f}", it->min) : "-",
        it ? fmt::format("{:.3f}", it->max) : "-", msOr(r.exposed_comm_ms),
        r.peak_allocated ? gib(*r.peak_allocated) : "-",
        r.peak_reserved ? gib(*r.peak_reserved) : "-",
        p ? fmt::format("{:.3f}", p->iteration_ms) : "-",
        p && it ? pctOr(differencePct(it->mean, p->iteration_ms)) : "-",
        p ? gib(p->peak_memory) : "-",
        p && r.peak_allocated ? pctOr(differencePct(static_cast<double>(*r.peak_allocated),
                                                    static_cast<double>(p->peak_memory)))
                              : "-");
    for (const std::string& n : r.notes) s += fmt::format("       rank {}: {}\n", r.rank, n);
  }
  if (!prediction.error.empty()) s += fmt::format("       no prediction: {}\n", prediction.error);
  return s;
}

json timelineJson(std::span<const RankInputs> inputs, std::span<const RankReport> ranks,
                  const Prediction& prediction, const StepPlan& plan) {
  // Predicted processes keep the replay's pid (= global rank); measured ones get pids past
  // any world size so both can show the same rank.
  constexpr std::int64_t kMeasuredPid = 1'000'000'000;
  json events = json::array();
  std::map<int, const RankReport*> report_of;
  for (const RankReport& r : ranks) report_of[r.rank] = &r;
  for (const RankInputs& in : inputs) {
    const std::int64_t pid = kMeasuredPid + in.rank;
    auto meta = [&](const char* what, int tid, const std::string& name) {
      json e = {{"name", what}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", name}}}};
      if (tid >= 0) e["tid"] = tid;
      events.push_back(std::move(e));
    };
    meta("process_name", -1, fmt::format("rank {} (real, measured)", in.rank));
    events.push_back({{"name", "process_sort_index"},
                      {"ph", "M"},
                      {"pid", pid},
                      {"args", {{"sort_index", -1}}}});
    // Steps: measured durations laid end to end from 0 (pyrun has no start times).
    double step_start_ms = 0;
    double profiled_start_ms = -1;
    const RankReport* rep = report_of.contains(in.rank) ? report_of[in.rank] : nullptr;
    if (in.pyrun) {
      meta("thread_name", 0, "steps (host time, end to end)");
      for (std::size_t i = 0; i < in.pyrun->steps.size(); ++i) {
        const graph::PyRunStep& st = in.pyrun->steps[i];
        const double host_ms = st.host_ms.value_or(0);
        const bool steady =
            rep != nullptr && std::find(rep->steady_steps.begin(), rep->steady_steps.end(), i) !=
                                  rep->steady_steps.end();
        if (static_cast<int>(i) == plan.profiled_first && plan.profiled_count > 0)
          profiled_start_ms = step_start_ms;
        events.push_back({{"name", fmt::format("step {}", i)},
                          {"cat", "step"},
                          {"ph", "X"},
                          {"pid", pid},
                          {"tid", 0},
                          {"ts", step_start_ms * 1e3},
                          {"dur", host_ms * 1e3},
                          {"args",
                           {{"gpu_ms", orNull(st.gpu_ms)},
                            {"host_ms", orNull(st.host_ms)},
                            {"steady", steady}}}});
        step_start_ms += host_ms;
      }
    }
    // NCCL calls: host enqueue spans, relative to the rank's first call.
    if (in.nccl && !in.nccl->calls.empty()) {
      meta("thread_name", 1, "NCCL calls (host enqueue, from the first call)");
      const std::int64_t t0 = in.nccl->calls.front().t0_ns;
      for (const NcclCall& c : in.nccl->calls)
        events.push_back({{"name", c.func},
                          {"cat", "nccl"},
                          {"ph", "X"},
                          {"pid", pid},
                          {"tid", 1},
                          {"ts", static_cast<double>(c.t0_ns - t0) / 1e3},
                          {"dur", static_cast<double>(c.t1_ns - c.t0_ns) / 1e3},
                          {"args", {{"comm", c.comm}, {"count", c.count}, {"dtype", c.dtype}}}});
    }
    // GPU kernels of the profiled step(s): the trace's first kernel at the profiled step's
    // start on the steps track (0 without one).
    if (in.kineto && !in.kineto->kernels.empty()) {
      meta("thread_name", 2, "GPU compute kernels (profiled step)");
      meta("thread_name", 3, "GPU NCCL kernels (profiled step)");
      double first = in.kineto->kernels.front().start_us;
      for (const KernelSpan& k : in.kineto->kernels) first = std::min(first, k.start_us);
      const double origin_us = std::max(profiled_start_ms, 0.0) * 1e3;
      for (const KernelSpan& k : in.kineto->kernels)
        events.push_back({{"name", k.nccl ? "nccl kernel" : "kernel"},
                          {"cat", "gpu"},
                          {"ph", "X"},
                          {"pid", pid},
                          {"tid", k.nccl ? 3 : 2},
                          {"ts", origin_us + k.start_us - first},
                          {"dur", k.end_us - k.start_us}});
    }
  }
  // The replay's processes, renamed to say what they are.
  if (prediction.trace.is_object() && prediction.trace.contains("traceEvents")) {
    std::set<int> real;
    for (const RankInputs& in : inputs) real.insert(in.rank);
    for (json e : prediction.trace["traceEvents"]) {
      if (e.value("name", "") == "process_name" && e.value("ph", "") == "M") {
        const int rank = e.value("pid", -1);
        e["args"]["name"] =
            fmt::format("rank {} ({}, predicted)", rank, real.contains(rank) ? "real" : "virtual");
      }
      events.push_back(std::move(e));
    }
  }
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
}

}  // namespace crystal::cli::report
