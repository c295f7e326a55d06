#include "shm_segment.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/core.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>

namespace crystal::plugin {

namespace {

std::size_t pageRounded(std::size_t bytes) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

std::string errnoText(const char* call, int err) {
  return fmt::format("{}: {}", call, std::strerror(err));
}

}  // namespace

void ShmSegment::sweepStale() {
  DIR* dir = ::opendir("/dev/shm");
  if (!dir) return;
  while (const dirent* e = ::readdir(dir)) {
    int pid = 0;
    char rest[32] = {};
    if (std::sscanf(e->d_name, "crystal-%d-%16[0-9a-f]", &pid, rest) != 2 || pid <= 0 ||
        std::strlen(rest) != 16)
      continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;
    (void)::shm_unlink(fmt::format("/{}", e->d_name).c_str());
  }
  ::closedir(dir);
}

ShmSegment::~ShmSegment() {
  if (data_) (void)::munmap(data_, size_);
  unlink();
}

void ShmSegment::unlink() noexcept {
  if (!linked_) return;
  linked_ = false;
  (void)::shm_unlink(name_.c_str());  // ENOENT: the receiver already did
}

std::unique_ptr<ShmSegment> ShmSegment::create(std::size_t bytes, std::string* why) {
  static std::once_flag swept;
  std::call_once(swept, &ShmSegment::sweepStale);
  const std::size_t size = pageRounded(bytes == 0 ? 1 : bytes);
  std::uint64_t nonce = 0;
  if (::getrandom(&nonce, sizeof nonce, 0) != static_cast<ssize_t>(sizeof nonce)) {
    *why = errnoText("getrandom", errno);
    return nullptr;
  }
  std::string name = fmt::format("/crystal-{}-{:016x}", ::getpid(), nonce);
  const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    *why = errnoText("shm_open", errno);
    return nullptr;
  }
  const int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(size));  // returns the error
  void* p = rc == 0 ? ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
  const int map_err = errno;
  ::close(fd);
  if (rc != 0 || p == MAP_FAILED) {
    *why = rc != 0 ? errnoText("posix_fallocate", rc) : errnoText("mmap", map_err);
    (void)::shm_unlink(name.c_str());
    return nullptr;
  }
  return std::unique_ptr<ShmSegment>(
      new ShmSegment(std::move(name), static_cast<std::byte*>(p), size, /*owner=*/true));
}

std::unique_ptr<ShmSegment> ShmSegment::open(const std::string& name, std::size_t bytes,
                                             std::string* why) {
  // Only names create() makes: open() unlinks what it maps, and a corrupt or hostile peer
  // must not make this process map or remove another program's segment.
  int pid = 0, end = 0;
  char hex[17] = {};
  if (std::sscanf(name.c_str(), "/crystal-%d-%16[0-9a-f]%n", &pid, hex, &end) != 2 || pid <= 0 ||
      std::strlen(hex) != 16 || static_cast<std::size_t>(end) != name.size()) {
    *why = fmt::format("'{}' is not a crystal shared-memory name", name);
    return nullptr;
  }
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) {
    *why = errnoText("shm_open", errno);
    return nullptr;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) < bytes || bytes == 0) {
    *why = fmt::format("segment {} holds {} bytes, the offer said {}", name,
                       static_cast<long long>(st.st_size), bytes);
    ::close(fd);
    return nullptr;
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int map_err = errno;
  ::close(fd);
  if (p == MAP_FAILED) {
    *why = errnoText("mmap", map_err);
    return nullptr;
  }
  (void)::shm_unlink(name.c_str());  // both sides hold it now; nothing to leave behind
  return std::unique_ptr<ShmSegment>(
      new ShmSegment(name, static_cast<std::byte*>(p), size, /*owner=*/false));
}

}  // namespace crystal::plugin
