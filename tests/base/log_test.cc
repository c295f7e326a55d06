#include "crystal/base/log.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {
std::vector<std::string> gLines;
void captureSink(crystal::log::Level, std::string_view, int, std::string_view msg) {
  gLines.emplace_back(msg);
}
}  // namespace

TEST(Log, RoutesThroughSinkAndFiltersByLevel) {
  gLines.clear();
  crystal::log::setSink(&captureSink);
  crystal::log::setLevel(crystal::log::Level::Info);
  CRYSTAL_INFO("rank {} of {}", 3, 8);
  CRYSTAL_DEBUG("dropped {}", 1);
  CRYSTAL_ERROR("bad {}", "thing");
  crystal::log::setSink(nullptr);
  crystal::log::setLevel(crystal::log::Level::Warn);
  ASSERT_EQ(gLines.size(), 2u);
  EXPECT_EQ(gLines[0], "rank 3 of 8");
  EXPECT_EQ(gLines[1], "bad thing");
}
