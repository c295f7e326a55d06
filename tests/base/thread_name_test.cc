#include "crystal/base/thread_name.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <thread>

#include <sys/syscall.h>
#include <unistd.h>

namespace {

// What /proc says of the calling thread: the name other tools (top -H, ps -L) read.
std::string procName() {
  std::ifstream f("/proc/self/task/" + std::to_string(::syscall(SYS_gettid)) + "/comm");
  std::string s;
  std::getline(f, s);
  return s;
}

TEST(ThreadName, NamesTheCallingThreadOnly) {
  const std::string main_before = crystal::thisThreadName();
  std::string seen, in_proc;
  std::thread([&] {
    crystal::nameThisThread("crystal pacer");
    seen = crystal::thisThreadName();
    in_proc = procName();
  }).join();
  EXPECT_EQ(seen, "crystal pacer");
  EXPECT_EQ(in_proc, "crystal pacer");
  EXPECT_EQ(crystal::thisThreadName(), main_before);
}

TEST(ThreadName, LongNamesAreCutAtFifteenBytes) {
  std::string seen;
  std::thread([&] {
    crystal::nameThisThread("crystal-a-very-long-thread-name");
    seen = crystal::thisThreadName();
  }).join();
  EXPECT_EQ(seen, "crystal-a-very-");
  EXPECT_EQ(seen.size(), 15u);
}

TEST(ThreadName, EmptyNameIsAccepted) {
  std::string seen = "unset";
  std::thread([&] {
    crystal::nameThisThread("");
    seen = crystal::thisThreadName();
  }).join();
  EXPECT_EQ(seen, "");
}

}  // namespace
