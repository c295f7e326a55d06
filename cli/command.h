// Sub-command registry of the `crystal` CLI. Each cli/cmd_*.cc file registers its commands
// with a static CRYSTAL_COMMAND(...) so main.cc never changes when a command is added.
#pragma once

#include <functional>
#include <span>
#include <string>
#include <string_view>

namespace crystal::cli {

// args[0] is the sub-command name itself ("graph", "simulate", ...).
using CommandFn = int (*)(std::span<const std::string> args);

struct Command {
  std::string_view name;
  std::string_view summary;  // one line for `crystal --help`
  CommandFn run;
};

bool registerCommand(const Command& c);

}  // namespace crystal::cli

#define CRYSTAL_CONCAT_INNER(a, b) a##b
#define CRYSTAL_CONCAT(a, b) CRYSTAL_CONCAT_INNER(a, b)
#define CRYSTAL_COMMAND(name, summary, fn)                                       \
  static const bool CRYSTAL_CONCAT(crystal_cmd_registered_, __LINE__) =         \
      ::crystal::cli::registerCommand(::crystal::cli::Command{name, summary, fn})
