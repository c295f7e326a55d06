// The one registry of CRYSTAL_* environment knobs the plugin reads: name, default, doc.
// docs/plugin.md's table is checked against it by tests/plugin/params_test.cc.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace crystal::plugin {

struct Param {
  const char* name;
  const char* default_value;
  const char* doc;
};

[[nodiscard]] std::span<const Param> allParams() noexcept;

// Value from the environment, else the registered default. Throws InputError for a name
// that is not registered (a programming error caught by tests) or, for the typed getters,
// a value that does not parse (message names the variable and the value).
[[nodiscard]] std::string paramString(std::string_view name);
[[nodiscard]] std::int64_t paramInt(std::string_view name);
// paramInt, which must lie in [lo, hi] (InputError naming the variable otherwise).
[[nodiscard]] std::int64_t paramIntIn(std::string_view name, std::int64_t lo, std::int64_t hi);
[[nodiscard]] bool paramBool(std::string_view name);

}  // namespace crystal::plugin
