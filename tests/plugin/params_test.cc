// The env knob registry is the single source of the docs table in docs/plugin.md.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <regex>
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
  // Rows look like: | `CRYSTAL_X` | `default` | doc |
  const std::regex row(R"(\|\s*`(CRYSTAL_[A-Z_]+)`\s*\|\s*`([^`]*)`\s*\|)");
  std::set<std::string> documented;
  for (auto it = std::sregex_iterator(doc.begin(), doc.end(), row); it != std::sregex_iterator();
       ++it) {
    const std::string name = (*it)[1];
    documented.insert(name);
    bool found = false;
    for (const Param& p : allParams())
      if (name == p.name) {
        found = true;
        EXPECT_EQ((*it)[2].str(), p.default_value) << name << ": docs default differs";
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
