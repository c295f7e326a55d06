// thread_faults.h on the CPU: a named thread that first-touches a known number of fresh pages
// shows at least that many minor faults, under its name, first in the summary.
#include "thread_faults.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <thread>

namespace {

constexpr size_t kPages = 512;

// Touches kPages fresh pages (no huge pages, so each touch is one fault).
void touchFreshPages() {
  pthread_setname_np(pthread_self(), "toucher (x)");  // a space and ')' inside the name
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* p =
      mmap(nullptr, kPages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  madvise(p, kPages * page, MADV_NOHUGEPAGE);
  auto* bytes = static_cast<volatile char*>(p);
  for (size_t i = 0; i < kPages; ++i) bytes[i * page] = 1;
  munmap(p, kPages * page);
}

TEST(ThreadFaults, ReadsThisThreadUnderItsName) {
  const auto now = gpu_check::minorFaultsByThread();
  const auto self = now.find(static_cast<int>(gettid()));
  ASSERT_NE(self, now.end());
  EXPECT_GT(self->second.minor, 0);  // loading the test binary touched pages
  char name[16] = {};
  pthread_getname_np(pthread_self(), name, sizeof name);
  EXPECT_EQ(self->second.name, name);
}

TEST(ThreadFaults, AThreadsFirstTouchesAreCountedAndNamed) {
  const auto before = gpu_check::minorFaultsByThread();
  std::map<int, gpu_check::ThreadFaults> during;
  std::thread t([&] {
    touchFreshPages();
    during = gpu_check::minorFaultsByThread();  // the thread is still alive here
  });
  t.join();
  long toucher = -1;
  for (const auto& [tid, f] : during)
    if (f.name == "toucher (x)") toucher = f.minor;
  EXPECT_GE(toucher, static_cast<long>(kPages));
  const std::string text = gpu_check::faultsBetween(before, during);
  EXPECT_EQ(text.find(" (toucher (x) "), text.find(' ')) << text;  // first, with most faults
  EXPECT_GE(std::atol(text.c_str()), static_cast<long>(kPages)) << text;
}

TEST(ThreadFaults, BetweenCountsOnlyGrowthAndNewThreads) {
  const std::map<int, gpu_check::ThreadFaults> before = {
      {1, {"main", 100}}, {2, {"idle", 7}}, {3, {"gone", 50}}};
  const std::map<int, gpu_check::ThreadFaults> after = {
      {1, {"main", 130}}, {2, {"idle", 7}}, {4, {"born", 200}}};
  EXPECT_EQ(gpu_check::faultsBetween(before, after), "230 (born 200, main 30)");
  EXPECT_EQ(gpu_check::faultsBetween(before, after, 1), "230 (born 200, ...)");
  EXPECT_EQ(gpu_check::faultsBetween(after, after), "0");
}

}  // namespace
