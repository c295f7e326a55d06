// OptionParser: see cli/options.h.
#include "cli/options.h"

#include <fmt/core.h>

#include <cerrno>
#include <cstdlib>

#include "crystal/base/error.h"

namespace crystal::cli {

OptionParser::OptionParser(std::string command, std::string usage)
    : command_(std::move(command)), usage_(std::move(usage)) {}

OptionParser& OptionParser::value(const std::string& name,
                                  std::function<void(const std::string&)> set) {
  values_[name] = std::move(set);
  return *this;
}

OptionParser& OptionParser::flag(const std::string& name, std::function<void()> set) {
  flags_[name] = std::move(set);
  return *this;
}

OptionParser& OptionParser::forwardUnknown() {
  forward_unknown_ = true;
  return *this;
}

OptionParser& OptionParser::commandAfterDashes() {
  command_allowed_ = true;
  return *this;
}

OptionParser& OptionParser::maxPositional(std::size_t n) {
  max_positional_ = n;
  return *this;
}

ParsedOptions OptionParser::parse(std::span<const std::string> args) const {
  ParsedOptions out;
  for (std::size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      if (!command_allowed_)
        throw InputError(fmt::format("{}: runs no command; nothing may follow --", command_));
      out.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
      break;
    }
    if (a == "--help" || a == "-h") {
      out.help = true;
      break;
    }
    if (const auto v = values_.find(a); v != values_.end()) {
      if (i + 1 >= args.size()) throw InputError(fmt::format("{}: {} needs a value", command_, a));
      v->second(args[++i]);
    } else if (const auto f = flags_.find(a); f != flags_.end()) {
      f->second();
    } else if (a.size() > 1 && a[0] == '-') {
      if (!forward_unknown_)
        throw InputError(fmt::format("{}: unknown option '{}'\n{}", command_, a, usage_));
      out.forwarded.push_back(a);
      if (i + 1 < args.size() && args[i + 1] != "--" && !args[i + 1].starts_with("--"))
        out.forwarded.push_back(args[++i]);
    } else if (out.positional.size() < max_positional_) {
      out.positional.push_back(a);
    } else {
      throw InputError(fmt::format("{}: unexpected '{}'{}", command_, a,
                                   command_allowed_ ? " (put the command after --)" : ""));
    }
  }
  return out;
}

double positiveNumber(std::string_view command, std::string_view flag, const std::string& v) {
  char* end = nullptr;
  errno = 0;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || end != v.c_str() + v.size() || errno != 0 || !(x > 0))
    throw InputError(fmt::format("{}: {} '{}' is not a positive number", command, flag, v));
  return x;
}

int intInRange(std::string_view command, std::string_view flag, const std::string& v, int lo,
               int hi) {
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || end != v.c_str() + v.size() || errno != 0 || n < lo || n > hi)
    throw InputError(
        fmt::format("{}: {} '{}' is not an integer in [{}, {}]", command, flag, v, lo, hi));
  return static_cast<int>(n);
}

}  // namespace crystal::cli
