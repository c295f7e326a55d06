// The option loop every `crystal` sub-command that runs a program shares: `--help`/`-h`,
// `--name VALUE` options, flags, positional arguments and `-- CMD...`. One place for the
// messages ("emulate: --gpus needs a value", "emulate: unknown option '--x'" + usage).
#pragma once

#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace crystal::cli {

struct ParsedOptions {
  bool help = false;                    // --help / -h seen: print the usage, run nothing
  std::vector<std::string> positional;  // in order, before --
  std::vector<std::string> command;     // everything after the first --
  // With forwardUnknown(): unknown options, each followed by its value if it had one.
  std::vector<std::string> forwarded;
};

class OptionParser {
 public:
  // `command` prefixes every message ("emulate"); `usage` follows the unknown-option one.
  OptionParser(std::string command, std::string usage);

  // `--name VALUE`: `set` gets VALUE (it may throw InputError to reject it).
  OptionParser& value(const std::string& name, std::function<void(const std::string&)> set);
  // `--name` alone.
  OptionParser& flag(const std::string& name, std::function<void()> set);
  // Unknown options are not an error but collected in ParsedOptions::forwarded, with the
  // next word as their value unless it starts with "--" (for a command that hands options
  // on to another one, e.g. nccl-tests -> emulate).
  OptionParser& forwardUnknown();
  // Accept `-- CMD...` (ParsedOptions::command); without this a -- is an error.
  OptionParser& commandAfterDashes();
  // At most `n` positional arguments (default: unlimited); the next one is an error (that
  // says to put the command after --, where there is one).
  OptionParser& maxPositional(std::size_t n);

  // `args[0]` is the sub-command's name. Throws InputError on a bad option, a missing
  // value or too many positionals. Stops at the first -- or --help.
  [[nodiscard]] ParsedOptions parse(std::span<const std::string> args) const;

 private:
  std::string command_;
  std::string usage_;
  std::map<std::string, std::function<void(const std::string&)>, std::less<>> values_;
  std::map<std::string, std::function<void()>, std::less<>> flags_;
  bool forward_unknown_ = false;
  bool command_allowed_ = false;
  std::size_t max_positional_ = static_cast<std::size_t>(-1);
};

// Number checks for option values, with the message "<command>: <flag> '<v>' is not ...".
[[nodiscard]] double positiveNumber(std::string_view command, std::string_view flag,
                                    const std::string& v);
[[nodiscard]] int intInRange(std::string_view command, std::string_view flag, const std::string& v,
                             int lo, int hi);

}  // namespace crystal::cli
