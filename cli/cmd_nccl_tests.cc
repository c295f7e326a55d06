// `crystal nccl-tests CONFIG [--json FILE] [emulate options] -- all_reduce_perf ...`: runs an
// unmodified NCCL-tests binary under `crystal emulate`, passes its output through, then
// prints CrystalLLM's table of the same run for the target's N ranks (the program computes
// busbw for its own k). `--from LOG` restates a saved output instead of running anything.
// docs/nccl-tests.md.
#include <fmt/core.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/command.h"
#include "cli/options.h"
#include "cli/sweep_commands.h"
#include "crystal/base/error.h"
#include "crystal/config/config.h"
#include "crystal/sweep/nccl_tests_table.h"
#include "crystal/sweep/sweep_report.h"
#include "crystal/sweep/target_table.h"

namespace crystal::cli {
namespace {

constexpr std::string_view kUsage =
    "usage: crystal nccl-tests CONFIG [--json FILE] [EMULATE OPTIONS] -- NCCL_TESTS_CMD...\n"
    "       crystal nccl-tests CONFIG [--json FILE] --from LOG [--op OP]\n"
    "  Runs an NCCL-tests binary (all_reduce_perf, ...) under `crystal emulate CONFIG`,\n"
    "  prints its output, then the same sizes and times with algbw/busbw for the target's\n"
    "  job.world_size ranks. With emulation.map_comms the program runs on len(real_ranks)\n"
    "  ranks and each of its communicators is the target's (docs/nccl-tests.md).\n"
    "  --json FILE   the target table as JSON (out-of-place and in-place rows)\n"
    "  --from LOG    read a saved NCCL-tests output instead of running CMD\n"
    "  --op OP       the test, when neither the output nor CMD names it\n"
    "  other options before -- go to `crystal emulate` (--listen, --split, --plugin, ...)\n";

// Set in the `crystal emulate` child this command starts, so it does not hand back to us.
constexpr const char* kEnvInner = "CRYSTAL_NCCL_TESTS_INNER";

volatile sig_atomic_t g_emulate_pid = 0;
void forwardSignal(int sig) {
  if (g_emulate_pid > 0) ::kill(g_emulate_pid, sig);
}

std::string readFile(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw InputError(fmt::format("nccl-tests: cannot read --from '{}'", path));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The op of an NCCL-tests binary named anywhere in CMD (it may follow mpirun and its
// options); accepts NCCL-tests' NAME_SUFFIX builds (all_reduce_perf_mpi).
std::optional<sweep::TestOp> opInCommand(const std::vector<std::string>& cmd) {
  for (const std::string& word : cmd) {
    const std::string base = word.substr(word.rfind('/') + 1);
    for (const sweep::TestOp op : sweep::kAllTestOps)
      if (base.rfind(sweep::binaryName(op), 0) == 0) return op;
  }
  return std::nullopt;
}

// Runs `crystal emulate ARGS -- CMD` with its stdout on a pipe that is copied to ours as it
// comes (so the user sees progress) and kept. Returns the exit code; `out` the text.
int runEmulateTee(const std::vector<std::string>& emulate_args, std::string& out) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  std::fflush(stdout);
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::setenv(kEnvInner, "1", 1);  // that `crystal emulate` runs CMD itself
    ::dup2(fds[1], STDOUT_FILENO);
    ::close(fds[0]);
    ::close(fds[1]);
    std::vector<char*> argv;
    for (const auto& a : emulate_args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv("/proc/self/exe", argv.data());
    std::fprintf(stderr, "crystal nccl-tests: cannot re-run crystal: %s\n", std::strerror(errno));
    ::_exit(127);
  }
  ::close(fds[1]);
  g_emulate_pid = pid;
  struct sigaction sa {};
  sa.sa_handler = forwardSignal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  char buf[65536];
  while (true) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
    std::fwrite(buf, 1, static_cast<std::size_t>(n), stdout);
    std::fflush(stdout);
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  g_emulate_pid = 0;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

int runNcclTests(std::span<const std::string> args) {
  std::string json_path, from;
  std::optional<sweep::TestOp> op;
  const ParsedOptions parsed =
      OptionParser("nccl-tests", std::string(kUsage))
          .value("--json", [&](const std::string& v) { json_path = v; })
          .value("--from", [&](const std::string& v) { from = v; })
          .value("--op",
                 [&](const std::string& v) {
                   op = sweep::parseTestOp(v);
                   if (!op)
                     throw InputError("nccl-tests: --op '" + v + "' is not an NCCL-tests op");
                 })
          .forwardUnknown()  // emulate's options (--listen, --split, ...) and their values
          .commandAfterDashes()
          .maxPositional(1)
          .parse(args);
  if (parsed.help) {
    fmt::print("{}", kUsage);
    return 0;
  }
  const std::string config_path = parsed.positional.empty() ? "" : parsed.positional.front();
  const std::vector<std::string>& emulate_opts = parsed.forwarded;
  const std::vector<std::string>& cmd = parsed.command;
  if (config_path.empty() || (cmd.empty() == from.empty()))
    throw InputError("nccl-tests: CONFIG and either -- CMD... or --from LOG are required\n" +
                     std::string(kUsage));
  const Config config = loadConfig(config_path);

  std::string text;
  int code = 0;
  std::string source = from;
  if (!from.empty()) {
    text = readFile(from);
  } else {
    std::vector<std::string> emulate_args{"crystal", "emulate", config_path};
    emulate_args.insert(emulate_args.end(), emulate_opts.begin(), emulate_opts.end());
    emulate_args.emplace_back("--");
    emulate_args.insert(emulate_args.end(), cmd.begin(), cmd.end());
    code = runEmulateTee(emulate_args, text);
    source = cmd[0] + " (stdout)";
  }

  const sweep::NcclTestsOutput out = sweep::parseNcclTestsOutput(text, source);
  if (!out.test_name.empty() && !op) op = sweep::parseTestOp(out.test_name);
  if (!op) op = opInCommand(cmd);
  if (!op)
    throw InputError(
        fmt::format("nccl-tests: {} names no NCCL-tests op ('# Collective test "
                    "starting' line missing); give --op",
                    source));
  if (out.rows.empty()) {
    fmt::print(stderr, "crystal nccl-tests: {} printed no result rows\n", source);
    return code != 0 ? code : kExitBadInput;
  }
  const int target = config.job.world_size;
  const int k = !config.emulation.map_comms ? target
                : out.nranks > 0            ? out.nranks
                                            : static_cast<int>(config.emulation.real_ranks.size());
  const auto rows = sweep::targetRows(out, *op, k, target, false, source);
  const auto in_place = sweep::targetRows(out, *op, k, target, true, source);
  fmt::print(
      "\n# crystal nccl-tests: the run above on the target: {} ranks ({} real, {}), "
      "out-of-place\n",
      target, k, config.emulation.map_comms ? "emulation.map_comms" : "no mapping");
  fmt::print("{}", sweep::formatSweepTable(rows.empty() ? in_place : rows, target,
                                           sweep::RowSource::Emulated));
  if (!json_path.empty()) {
    nlohmann::json j = sweep::sweepJson(rows, target, sweep::RowSource::Emulated);
    nlohmann::json in_place_json = sweep::sweepJson(in_place, target, sweep::RowSource::Emulated);
    for (auto& r : in_place_json["results"]) j["results"].push_back(std::move(r));
    j["program_ranks"] = k;
    j["program"] = out.test_name;
    std::ofstream f(json_path);
    if (!f) throw InputError(fmt::format("nccl-tests: cannot write '{}'", json_path));
    f << j.dump(1) << '\n';
    if (!f) throw InputError(fmt::format("nccl-tests: failed writing '{}'", json_path));
  }
  return code;
}

}  // namespace

int emulateNcclTests(std::span<const std::string> args) {
  const char* inner = std::getenv(kEnvInner);
  if (inner != nullptr && *inner != '\0') return -1;
  std::vector<std::string> cmd;
  for (std::size_t i = 1; i < args.size(); ++i)
    if (args[i] == "--") {
      cmd.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
      break;
    }
  if (!opInCommand(cmd)) return -1;
  std::vector<std::string> as_nccl_tests(args.begin(), args.end());
  as_nccl_tests[0] = "nccl-tests";
  return runNcclTests(as_nccl_tests);
}

CRYSTAL_COMMAND("nccl-tests",
                "run an NCCL-tests binary under emulation; its table for the target's ranks",
                runNcclTests);

}  // namespace crystal::cli
