// planLaunch: one process per real rank for `python …` and `torchrun …` (bypassed), the
// command as given otherwise. Facts about torchrun's options and its workers' environment
// come from PyTorch 2.11's torch/distributed/run.py and elastic agent (docs/store.md).
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "crystal/base/error.h"
#include "crystal/store/launch.h"

namespace crystal::store {

namespace {

namespace fs = std::filesystem;

std::string baseName(const std::string& path) { return fs::path(path).filename().string(); }

bool isPython(const std::string& argv0) { return baseName(argv0).starts_with("python"); }

// torchrun options (run.py get_args_parser): those that take no value; every other known
// option takes one (as "--opt value" or "--opt=value").
const std::set<std::string, std::less<>> kTorchrunFlags = {
    "--standalone", "-m", "--module", "--no-python", "--no_python", "--run-path", "--run_path"};
const std::set<std::string, std::less<>> kTorchrunValued = {"--nnodes",
                                                            "--nproc-per-node",
                                                            "--nproc_per_node",
                                                            "--rdzv-backend",
                                                            "--rdzv_backend",
                                                            "--rdzv-endpoint",
                                                            "--rdzv_endpoint",
                                                            "--rdzv-id",
                                                            "--rdzv_id",
                                                            "--rdzv-conf",
                                                            "--rdzv_conf",
                                                            "--max-restarts",
                                                            "--max_restarts",
                                                            "--monitor-interval",
                                                            "--monitor_interval",
                                                            "--start-method",
                                                            "--start_method",
                                                            "--event-log-handler",
                                                            "--event_log_handler",
                                                            "--role",
                                                            "--log-dir",
                                                            "--log_dir",
                                                            "-r",
                                                            "--redirects",
                                                            "-t",
                                                            "--tee",
                                                            "--local-ranks-filter",
                                                            "--local_ranks_filter",
                                                            "--node-rank",
                                                            "--node_rank",
                                                            "--master-addr",
                                                            "--master_addr",
                                                            "--master-port",
                                                            "--master_port",
                                                            "--local-addr",
                                                            "--local_addr",
                                                            "--logs-specs",
                                                            "--logs_specs",
                                                            "--numa-binding",
                                                            "--numa_binding",
                                                            "--signals-to-handle",
                                                            "--signals_to_handle"};

struct TorchrunArgs {
  bool module = false, no_python = false;
  std::string role = "default", run_id = "none", max_restarts = "0";
  std::optional<int> nnodes, nproc;
  std::vector<std::string> program;  // script (or module) and its arguments
};

std::string canonicalOption(std::string_view o) {
  std::string s(o);
  if (s.starts_with("--")) std::replace(s.begin() + 2, s.end(), '_', '-');
  return s;
}

std::optional<int> positive(const std::string& v) {
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (end == v.c_str() || *end != '\0' || n < 1 || n > 1'000'000) return std::nullopt;
  return static_cast<int>(n);
}

TorchrunArgs parseTorchrun(const std::vector<std::string>& cmd, std::size_t first) {
  TorchrunArgs t;
  std::size_t i = first;
  for (; i < cmd.size(); ++i) {
    std::string a = cmd[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a.empty() || a[0] != '-') break;  // the training script
    std::optional<std::string> value;
    if (const auto eq = a.find('='); eq != std::string::npos && a.starts_with("--")) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
    }
    if (kTorchrunFlags.count(a) != 0) {
      if (value) throw InputError("torchrun option " + a + " takes no value");
      const std::string c = canonicalOption(a);
      if (c == "-m" || c == "--module") t.module = true;
      if (c == "--no-python") t.no_python = true;
      continue;
    }
    if (kTorchrunValued.count(a) == 0)
      throw InputError("torchrun option '" + a +
                       "' is not one of PyTorch 2.11's torchrun options (crystal emulate reads "
                       "them to start the script itself; docs/store.md)");
    if (!value) {
      if (i + 1 >= cmd.size()) throw InputError("torchrun option " + a + " needs a value");
      value = cmd[++i];
    }
    const std::string c = canonicalOption(a);
    if (c == "--nnodes") {
      t.nnodes = positive(value->substr(value->rfind(':') + 1));
    } else if (c == "--nproc-per-node") {
      t.nproc = positive(*value);
    } else if (c == "--role") {
      t.role = *value;
    } else if (c == "--rdzv-id") {
      t.run_id = *value;
    } else if (c == "--max-restarts") {
      t.max_restarts = *value;
    }
  }
  if (i >= cmd.size()) throw InputError("torchrun: no training script after the options");
  t.program.assign(cmd.begin() + static_cast<std::ptrdiff_t>(i), cmd.end());
  return t;
}

// The interpreter torchrun itself runs under (its "#!" line), so workers get the same
// Python torchrun would have used (sys.executable); python3 if that cannot be read.
std::string torchrunPython(const std::string& torchrun) {
  fs::path p = torchrun;
  if (p.filename() == p) {
    const char* path = std::getenv("PATH");
    std::string dirs = path != nullptr ? path : "";
    std::size_t s = 0;
    while (s <= dirs.size()) {
      const std::size_t e = std::min(dirs.find(':', s), dirs.size());
      const fs::path cand = fs::path(dirs.substr(s, e - s)) / torchrun;
      std::error_code ec;
      if (fs::is_regular_file(cand, ec)) {
        p = cand;
        break;
      }
      s = e + 1;
    }
  }
  std::ifstream in(p);
  std::string line;
  if (std::getline(in, line) && line.starts_with("#!")) {
    line = line.substr(2);
    const auto b = line.find_first_not_of(' ');
    const auto e = line.find(' ', b);
    if (b != std::string::npos) {
      std::string interp = line.substr(b, e == std::string::npos ? e : e - b);
      if (isPython(interp)) return interp;
    }
  }
  return "python3";
}

std::string lookup(const LaunchInputs& in, const std::string& name) {
  if (in.getenv) return in.getenv(name).value_or("");
  const char* v = std::getenv(name.c_str());
  return v != nullptr ? v : "";
}

}  // namespace

Env storeEnvironment(const LaunchInputs& in) {
  Env env = {
      {"MASTER_ADDR", in.master_addr},
      {"MASTER_PORT", std::to_string(in.master_port)},
      {"WORLD_SIZE", std::to_string(in.world_size)},
      // All ranks are clients of the emulation's store; rank 0 starts no server of its own.
      {"TORCHELASTIC_USE_AGENT_STORE", "True"},
      {"TORCH_NCCL_RANKS_PER_ROOT", std::to_string(ranksPerRoot(in))},
  };
  // PyTorch defaults that would reach virtual ranks, switched off unless the user chose.
  for (const auto& [k, v] :
       {std::pair<const char*, const char*>{"TORCH_NCCL_ENABLE_MONITORING", "0"},
        {"TORCH_NCCL_DUMP_ON_TIMEOUT", "0"},
        {"TORCH_DIST_INIT_BARRIER", "0"}})
    if (lookup(in, k).empty()) env.emplace_back(k, v);
  return env;
}

int ranksPerRoot(const LaunchInputs& in) {
  if (in.ranks_per_root > 0) return in.ranks_per_root;
  const std::string v = lookup(in, "TORCH_NCCL_RANKS_PER_ROOT");
  if (v.empty()) return std::max(in.world_size, 1);
  const auto n = positive(v);
  if (!n) throw InputError("TORCH_NCCL_RANKS_PER_ROOT='" + v + "' is not a positive integer");
  return *n;
}

int localGpuCount(const std::function<std::optional<std::string>(const std::string&)>& getenv) {
  const auto cvd = getenv ? getenv("CUDA_VISIBLE_DEVICES") : std::nullopt;
  if (cvd && !cvd->empty()) return static_cast<int>(std::count(cvd->begin(), cvd->end(), ',')) + 1;
  std::error_code ec;
  int n = 0;
  for (const auto& e : fs::directory_iterator("/proc/driver/nvidia/gpus", ec)) {
    (void)e;
    ++n;
  }
  return n > 0 ? n : 1;
}

LaunchPlan planLaunch(const std::vector<std::string>& cmd, const LaunchInputs& in) {
  if (cmd.empty()) throw InputError("emulate: no command after --");
  if (in.real_ranks.empty()) throw InputError("emulate: emulation.real_ranks is empty");
  LaunchPlan plan;
  const Env common = storeEnvironment(in);
  const std::string exe = baseName(cmd[0]);
  const bool torchrun =
      exe == "torchrun" ||
      (isPython(cmd[0]) && cmd.size() > 2 && cmd[1] == "-m" &&
       (cmd[2] == "torch.distributed.run" || cmd[2] == "torch.distributed.launch"));
  if (!torchrun && !isPython(cmd[0])) {
    plan.kind = LaunchKind::Other;
    RankProcess p{.rank = -1, .argv = cmd, .env = common};
    if (in.real_ranks.size() == 1) {
      p.rank = in.real_ranks[0];
      p.env.emplace_back("RANK", std::to_string(p.rank));
      p.env.emplace_back("LOCAL_RANK", "0");
    }
    plan.processes.push_back(std::move(p));
    return plan;
  }

  std::vector<std::string> argv;  // per-rank command (same for every rank)
  Env extra;
  if (torchrun) {
    plan.kind = LaunchKind::Torchrun;
    const std::size_t first = exe == "torchrun" ? 1 : 3;
    const TorchrunArgs t = parseTorchrun(cmd, first);
    if (t.no_python) {
      argv = t.program;
    } else {
      argv = {exe == "torchrun" ? torchrunPython(cmd[0]) : cmd[0], "-u"};
      if (t.module) argv.push_back("-m");
      argv.insert(argv.end(), t.program.begin(), t.program.end());
    }
    const int local = in.gpus_per_node;
    if (t.nnodes && t.nproc && *t.nnodes * *t.nproc != in.world_size)
      plan.notes.push_back(fmt::format(
          "torchrun asks for {} x {} = {} workers; the emulated job has WORLD_SIZE {} (CONFIG)",
          *t.nnodes, *t.nproc, *t.nnodes * *t.nproc, in.world_size));
    plan.notes.push_back(fmt::format(
        "torchrun bypassed: its rendezvous needs the agents of all {} nodes; each real rank "
        "runs '{}' with the environment torchrun gives a worker",
        (in.world_size + local - 1) / local, fmt::join(argv, " ")));
    // What torchrun's agent sets for each worker (elastic/agent/server/local_elastic_agent.py).
    extra = {{"LOCAL_WORLD_SIZE", std::to_string(local)},
             {"GROUP_WORLD_SIZE", std::to_string((in.world_size + local - 1) / local)},
             {"ROLE_NAME", t.role},
             {"ROLE_WORLD_SIZE", std::to_string(in.world_size)},
             {"TORCHELASTIC_RESTART_COUNT", "0"},
             {"TORCHELASTIC_MAX_RESTARTS", t.max_restarts},
             {"TORCHELASTIC_RUN_ID", t.run_id}};
    if (lookup(in, "TORCH_NCCL_ASYNC_ERROR_HANDLING").empty())
      extra.emplace_back("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
    if (lookup(in, "OMP_NUM_THREADS").empty() && local > 1)
      extra.emplace_back("OMP_NUM_THREADS", "1");
  } else {
    plan.kind = LaunchKind::Python;
    argv = cmd;  // a plain launch: only what env:// reads, plus LOCAL_RANK below
  }
  const int gpus = std::max(in.local_gpus, 1);
  for (std::size_t i = 0; i < in.real_ranks.size(); ++i) {
    const int rank = in.real_ranks[i];
    RankProcess p{.rank = rank, .argv = argv, .env = common};
    p.env.emplace_back("RANK", std::to_string(rank));
    // The GPU of this machine the rank runs on (several ranks may share one).
    p.env.emplace_back("LOCAL_RANK", std::to_string(static_cast<int>(i) % gpus));
    p.env.insert(p.env.end(), extra.begin(), extra.end());
    if (plan.kind == LaunchKind::Torchrun) {
      const int local = in.gpus_per_node;
      p.env.emplace_back("GROUP_RANK", std::to_string(rank / local));
      p.env.emplace_back("ROLE_RANK", std::to_string(rank));
    }
    plan.processes.push_back(std::move(p));
  }
  return plan;
}

}  // namespace crystal::store
