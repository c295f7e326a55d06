// `crystal`: front end. Dispatches to the registered sub-commands and turns exceptions into
// exit codes: InputError -> 2 (bad input, message names file/field), anything else -> 1.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <map>
#include <string>
#include <vector>

#include <fmt/core.h>

#include "cli/command.h"
#include "crystal/base/error.h"

namespace crystal::cli {
namespace {
std::map<std::string_view, Command>& registry() {
  static std::map<std::string_view, Command> r;
  return r;
}

void usage(std::FILE* to) {
  fmt::print(to, "usage: crystal <command> [args...]\n\ncommands:\n");
  for (const auto& [name, c] : registry()) fmt::print(to, "  {:<10} {}\n", name, c.summary);
  fmt::print(to, "\n`crystal <command> --help` describes one command. Exit codes: 0 ok, "
                 "1 failure, 2 bad input.\n");
}
}  // namespace

bool registerCommand(const Command& c) { return registry().emplace(c.name, c).second; }

}  // namespace crystal::cli

int main(int argc, char** argv) {
  using namespace crystal::cli;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    usage(args.empty() ? stderr : stdout);
    return args.empty() ? crystal::kExitBadInput : 0;
  }
  auto it = registry().find(args[0]);
  if (it == registry().end()) {
    fmt::print(stderr, "crystal: unknown command '{}'\n", args[0]);
    usage(stderr);
    return crystal::kExitBadInput;
  }
  try {
    return it->second.run(args);
  } catch (const crystal::InputError& e) {
    fmt::print(stderr, "crystal: error: {}\n", e.what());
    return crystal::kExitBadInput;
  } catch (const std::exception& e) {
    fmt::print(stderr, "crystal: internal error: {}\n", e.what());
    return 1;
  }
}
