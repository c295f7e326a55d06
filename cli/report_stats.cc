// What the report computes from one real rank's inputs (cli/emulate_report.h): steady-state
// iteration statistics, exposed communication, iterations of a program without marks.
#include <fmt/core.h>

#include <algorithm>
#include <map>

#include "cli/emulate_report.h"

namespace crystal::cli::report {

namespace {
// Longest iteration (in NCCL calls) looked for: keeps findPeriod O(calls x 4096).
constexpr std::size_t kMaxPeriod = 4096;
}  // namespace

std::optional<Summary> summarize(std::span<const double> values) {
  if (values.empty()) return std::nullopt;
  std::vector<double> v(values.begin(), values.end());
  std::sort(v.begin(), v.end());
  Summary s;
  s.n = v.size();
  double sum = 0;
  for (const double x : v) sum += x;
  s.mean = sum / static_cast<double>(v.size());
  const std::size_t mid = v.size() / 2;
  s.p50 = v.size() % 2 == 1 ? v[mid] : (v[mid - 1] + v[mid]) / 2;
  s.min = v.front();
  s.max = v.back();
  return s;
}

namespace {

// Sorted, disjoint union of `spans` (empty ones dropped).
std::vector<Interval> merged(std::vector<Interval> spans) {
  std::erase_if(spans, [](const Interval& i) { return !(i.end > i.begin); });
  std::sort(spans.begin(), spans.end(),
            [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
  std::vector<Interval> out;
  for (const Interval& i : spans) {
    if (!out.empty() && i.begin <= out.back().end)
      out.back().end = std::max(out.back().end, i.end);
    else
      out.push_back(i);
  }
  return out;
}

}  // namespace

double coveredTime(std::vector<Interval> spans) {
  double t = 0;
  for (const Interval& i : merged(std::move(spans))) t += i.end - i.begin;
  return t;
}

double exposedTime(std::vector<Interval> comm, std::vector<Interval> compute) {
  const std::vector<Interval> c = merged(std::move(comm));
  const std::vector<Interval> k = merged(std::move(compute));
  double exposed = 0;
  std::size_t j = 0;  // first compute interval that may still overlap
  for (const Interval& i : c) {
    double covered = 0;
    while (j < k.size() && k[j].end <= i.begin) ++j;
    for (std::size_t m = j; m < k.size() && k[m].begin < i.end; ++m)
      covered += std::min(i.end, k[m].end) - std::max(i.begin, k[m].begin);
    exposed += (i.end - i.begin) - covered;
  }
  return exposed;
}

std::optional<Period> findPeriod(std::span<const std::string> keys) {
  // Calls as small integers: the scans below compare O(n x periods) pairs.
  std::map<std::string_view, std::uint32_t> ids;
  std::vector<std::uint32_t> v;
  v.reserve(keys.size());
  for (const std::string& k : keys)
    v.push_back(ids.emplace(k, static_cast<std::uint32_t>(ids.size())).first->second);
  const std::size_t n = v.size();
  const std::size_t max_period = std::min<std::size_t>(n / 3, kMaxPeriod);
  for (std::size_t p = 1; p <= max_period; ++p) {
    // The longest run of calls equal to the call p later: calls [s, s + run + p) repeat
    // with period p (a prologue and an epilogue of other calls may surround it).
    std::size_t best_start = 0, best_run = 0, run = 0;
    for (std::size_t i = 0; i + p < n; ++i) {
      run = v[i] == v[i + p] ? run + 1 : 0;
      if (run > best_run) {
        best_run = run;
        best_start = i + 1 - run;
      }
    }
    const std::size_t repeats = (best_run + p) / p;
    if (best_run == 0 || repeats < 3 || repeats * p * 2 < n) continue;
    return Period{best_start, p, repeats};
  }
  return std::nullopt;
}

namespace {

std::string callKey(const NcclCall& c) {
  return fmt::format("{}|{}|{}|{}", c.comm, c.func, c.count, c.dtype);
}

// Iterations of a program without marks: the starts of the repetitions of its NCCL calls.
void iterationsFromNccl(const NcclRecordTimes& rec, const StepPlan& plan, RankReport& out) {
  std::vector<std::string> keys;
  keys.reserve(rec.calls.size());
  for (const NcclCall& c : rec.calls) keys.push_back(callKey(c));
  const auto period = findPeriod(keys);
  if (!period) {
    out.notes.push_back(fmt::format(
        "no iteration marks: no pyrun file, and the {} NCCL calls of {} do not repeat with a "
        "period (3+ times over half the calls)",
        rec.calls.size(), rec.source));
    return;
  }
  out.iterations_from = "nccl-period";
  // Repetition k runs from its first call's start to the next repetition's first call.
  std::vector<double> times;
  for (std::size_t k = 0; k + 1 < period->repeats; ++k) {
    const auto a = rec.calls[period->offset + k * period->length].t0_ns;
    const auto b = rec.calls[period->offset + (k + 1) * period->length].t0_ns;
    times.push_back(static_cast<double>(b - a) / 1e6);
  }
  out.steps = times.size();
  std::vector<double> steady;
  for (std::size_t k = static_cast<std::size_t>(plan.warmup); k < times.size(); ++k) {
    out.steady_steps.push_back(k);
    steady.push_back(times[k]);
  }
  out.iteration_ms = summarize(steady);
  out.notes.push_back(fmt::format(
      "iterations from the NCCL calls: a unit of {} calls repeats {} times from call {} of "
      "{}; iteration time = between the host enqueue of each unit's first call",
      period->length, period->repeats, period->offset, rec.calls.size()));
}

void exposedFromKineto(const KinetoKernels& k, const StepPlan& plan, RankReport& out) {
  // A trace whose kernels all have zero length (seen on the H200 when the program ran its
  // own torch.profiler beside crystal_site's window) measures nothing: say so, print no 0.
  if (!k.kernels.empty() &&
      std::all_of(k.kernels.begin(), k.kernels.end(),
                  [](const KernelSpan& s) { return s.end_us <= s.start_us; })) {
    out.notes.push_back(fmt::format(
        "exposed communication not measured: all {} GPU kernels of {} have zero duration "
        "(did the program run its own profiler over the traced step?)",
        k.kernels.size(), k.source));
    return;
  }
  std::vector<Interval> nccl, other;
  for (const KernelSpan& s : k.kernels) (s.nccl ? nccl : other).push_back({s.start_us, s.end_us});
  // Steps in the trace: its ProfilerStep ranges if it has them, else the profiled steps.
  const int steps = k.profiler_steps > 0 ? k.profiler_steps : std::max(plan.profiled_count, 1);
  out.nccl_kernel_ms = coveredTime(nccl) / 1e3 / steps;
  out.exposed_comm_ms = exposedTime(nccl, other) / 1e3 / steps;
}

}  // namespace

RankReport analyzeRank(const RankInputs& in, const StepPlan& plan) {
  RankReport out;
  out.rank = in.rank;
  out.notes = in.notes;
  if (in.nccl) out.nccl_calls = in.nccl->calls.size();
  if (in.pyrun) {
    const graph::PyRun& p = *in.pyrun;
    out.iterations_from = "pyrun";
    out.steps = p.steps.size();
    out.peak_allocated = p.max_memory_allocated;
    out.peak_reserved = p.max_memory_reserved;
    std::vector<double> host, gpu;
    std::size_t untimed = 0;
    for (std::size_t i = static_cast<std::size_t>(plan.warmup); i < p.steps.size(); ++i) {
      const bool profiled = plan.profiled_count > 0 &&
                            i >= static_cast<std::size_t>(plan.profiled_first) &&
                            i < static_cast<std::size_t>(plan.profiled_first + plan.profiled_count);
      if (profiled) continue;
      if (!p.steps[i].host_ms) {
        ++untimed;
        continue;
      }
      out.steady_steps.push_back(i);
      host.push_back(*p.steps[i].host_ms);
      if (p.steps[i].gpu_ms) gpu.push_back(*p.steps[i].gpu_ms);
    }
    out.iteration_ms = summarize(host);
    out.gpu_ms = summarize(gpu);
    if (untimed > 0)
      out.notes.push_back(
          fmt::format("{}: {} steady step(s) without a host time left out", p.source, untimed));
    if (!out.iteration_ms)
      out.notes.push_back(fmt::format(
          "{}: {} steps, none in steady state (first {} dropped as warm-up{})", p.source,
          p.steps.size(), plan.warmup, plan.profiled_count > 0 ? ", profiled ones too" : ""));
  } else if (in.nccl) {
    iterationsFromNccl(*in.nccl, plan, out);
  } else {
    out.notes.push_back("no iteration marks: neither a pyrun nor an NCCL record file");
  }
  if (in.kineto) {
    exposedFromKineto(*in.kineto, plan, out);
  } else {
    out.notes.push_back(
        "exposed communication not measured: no Kineto trace (GPU kernel times); the NCCL "
        "record holds host enqueue times only");
  }
  return out;
}

}  // namespace crystal::cli::report
