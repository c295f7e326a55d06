// cli/options.h: the option loop of emulate, nccl-tests and host.
#include "cli/options.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "crystal/base/error.h"

namespace crystal::cli {
namespace {

std::vector<std::string> argv(std::initializer_list<const char*> words) {
  return {words.begin(), words.end()};
}

std::string errorOf(const OptionParser& p, const std::vector<std::string>& args) {
  try {
    (void)p.parse(args);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(OptionParser, ValuesFlagsPositionalsAndCommand) {
  std::string listen;
  bool quiet = false;
  OptionParser p("emulate", "usage: ...");
  p.value("--listen", [&](const std::string& v) { listen = v; })
      .flag("--quiet", [&] { quiet = true; })
      .commandAfterDashes()
      .maxPositional(1);
  const auto r = p.parse(argv({"emulate", "cfg.yaml", "--listen", "1.2.3.4:5", "--quiet", "--",
                               "python3", "--listen", "x"}));
  EXPECT_FALSE(r.help);
  EXPECT_EQ(listen, "1.2.3.4:5");
  EXPECT_TRUE(quiet);
  EXPECT_EQ(r.positional, argv({"cfg.yaml"}));
  // Everything after -- is the command, options included.
  EXPECT_EQ(r.command, argv({"python3", "--listen", "x"}));
}

TEST(OptionParser, HelpStopsTheLoop) {
  bool seen = false;
  OptionParser p("host", "usage");
  p.flag("--x", [&] { seen = true; });
  EXPECT_TRUE(p.parse(argv({"host", "-h", "--x"})).help);
  EXPECT_TRUE(p.parse(argv({"host", "--help"})).help);
  EXPECT_FALSE(seen);
}

TEST(OptionParser, ErrorsNameTheCommandAndTheOption) {
  OptionParser p("emulate", "usage: crystal emulate");
  p.value("--gpus", [](const std::string&) {}).commandAfterDashes().maxPositional(1);
  EXPECT_EQ(errorOf(p, argv({"emulate", "--gpus"})), "emulate: --gpus needs a value");
  EXPECT_EQ(errorOf(p, argv({"emulate", "--bogus"})),
            "emulate: unknown option '--bogus'\nusage: crystal emulate");
  EXPECT_EQ(errorOf(p, argv({"emulate", "a.yaml", "prog"})),
            "emulate: unexpected 'prog' (put the command after --)");
  OptionParser host("host", "usage");
  host.maxPositional(1);
  EXPECT_EQ(errorOf(host, argv({"host", "a", "b"})), "host: unexpected 'b'");
  EXPECT_EQ(errorOf(host, argv({"host", "a", "--", "x"})),
            "host: runs no command; nothing may follow --");
}

TEST(OptionParser, ARejectedValueIsTheSettersError) {
  OptionParser p("emulate", "usage");
  p.value("--gpus", [](const std::string& v) { (void)intInRange("emulate", "--gpus", v, 1, 8); });
  EXPECT_EQ(errorOf(p, argv({"emulate", "--gpus", "9"})),
            "emulate: --gpus '9' is not an integer in [1, 8]");
}

TEST(OptionParser, ForwardsUnknownOptionsWithTheirValues) {
  std::string json;
  OptionParser p("nccl-tests", "usage");
  p.value("--json", [&](const std::string& v) { json = v; })
      .forwardUnknown()
      .commandAfterDashes()
      .maxPositional(1);
  const auto r = p.parse(argv({"nccl-tests", "--split", "block:8", "cfg", "--json", "out.json",
                               "--no-profile", "--listen", "h:1", "--", "all_reduce_perf"}));
  EXPECT_EQ(json, "out.json");
  EXPECT_EQ(r.positional, argv({"cfg"}));
  // A flag followed by an option keeps no value.
  EXPECT_EQ(r.forwarded, argv({"--split", "block:8", "--no-profile", "--listen", "h:1"}));
  EXPECT_EQ(r.command, argv({"all_reduce_perf"}));
}

TEST(OptionValues, NumbersAreCheckedWholly) {
  EXPECT_DOUBLE_EQ(positiveNumber("emulate", "--store-timeout", "2.5"), 2.5);
  for (const char* bad : {"", "0", "-1", "2s", "nan", "x"})
    EXPECT_THROW((void)positiveNumber("emulate", "--store-timeout", bad), InputError) << bad;
  EXPECT_EQ(intInRange("emulate", "--warmup", "0", 0, 10), 0);
  for (const char* bad : {"", "11", "-1", "1.5", "3x", "99999999999999999999"})
    EXPECT_THROW((void)intInRange("emulate", "--warmup", bad, 0, 10), InputError) << bad;
}

}  // namespace
}  // namespace crystal::cli
