// The env knob registry is the single source of the docs table in docs/plugin.md.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "crystal/base/error.h"
#include "params.h"

namespace crystal::plugin {
namespace {

TEST(PluginParams, DocsTableMatchesRegistry) {
  std::ifstream f(CRYSTAL_DOCS_PLUGIN_MD);
  ASSERT_TRUE(f) << CRYSTAL_DOCS_PLUGIN_MD;
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string doc = ss.str();
  // Rows look like: | `CRYSTAL_X` | `default` | doc |   (parsed by hand: std::regex trips
  // -Wmaybe-uninitialized under the sanitizer build of libstdc++ 12).
  std::set<std::string> documented;
  std::istringstream lines(doc);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("| `CRYSTAL_", 0) != 0) continue;
    const auto n0 = line.find('`') + 1, n1 = line.find('`', n0);
    const auto d0 = line.find('`', n1 + 1) + 1, d1 = line.find('`', d0);
    ASSERT_NE(d1, std::string::npos) << line;
    const std::string name = line.substr(n0, n1 - n0), def = line.substr(d0, d1 - d0);
    documented.insert(name);
    bool found = false;
    for (const Param& p : allParams())
      if (name == p.name) {
        found = true;
        EXPECT_EQ(def, p.default_value) << name << ": docs default differs";
      }
    EXPECT_TRUE(found) << name << " is documented but not registered";
  }
  for (const Param& p : allParams()) EXPECT_TRUE(documented.count(p.name)) << p.name;
}

TEST(PluginParams, TypedGettersValidate) {
  setenv("CRYSTAL_MAX_RECVS", "4", 1);
  EXPECT_EQ(paramInt("CRYSTAL_MAX_RECVS"), 4);
  setenv("CRYSTAL_MAX_RECVS", "4x", 1);
  EXPECT_THROW((void)paramInt("CRYSTAL_MAX_RECVS"), InputError);
  unsetenv("CRYSTAL_MAX_RECVS");
  EXPECT_EQ(paramInt("CRYSTAL_MAX_RECVS"), 8);
  setenv("CRYSTAL_TUNER", "2", 1);
  EXPECT_THROW((void)paramBool("CRYSTAL_TUNER"), InputError);
  unsetenv("CRYSTAL_TUNER");
  EXPECT_TRUE(paramBool("CRYSTAL_TUNER"));
  EXPECT_THROW((void)paramString("CRYSTAL_NOPE"), InputError);
}

}  // namespace
}  // namespace crystal::plugin
