// Test child for `crystal emulate -- python3 ...`: built as "python3-fake-rank" so the
// launcher treats it as a Python rank. It does what PyTorch 2.11 does at
// init_process_group(env://) with the environment it was given: connect to
// MASTER_ADDR:MASTER_PORT, VALIDATE, PING, ADD "init/" 1, then rank 0 SETs the world's
// ncclUniqueId key and the others WAIT + GET it. Prints one line:
//   rank=R world=W local_rank=L agent_store=... init=N id=<hex of bytes 0..15> len=N
// FAKE_RANK_WAIT=KEY makes it WAIT for KEY instead; if the store closes the connection it
// prints "closed" and exits 3 (PyTorch would raise there).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "wire.h"

namespace {

using namespace crystal::store;

std::string env(const char* n) {
  const char* v = std::getenv(n);
  return v != nullptr ? v : "";
}

int connectStore() {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<std::uint16_t>(std::atoi(env("MASTER_PORT").c_str())));
  if (inet_pton(AF_INET, env("MASTER_ADDR").c_str(), &sa.sin_addr) != 1) return -1;
  for (int attempt = 0; attempt < 50; ++attempt) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0) return fd;
    ::close(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return -1;
}

bool sendAll(int fd, const std::string& b) {
  return ::send(fd, b.data(), b.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(b.size());
}
bool recvAll(int fd, void* out, std::size_t n) {
  auto* p = static_cast<char*>(out);
  while (n > 0) {
    const ssize_t got = ::recv(fd, p, n, 0);
    if (got <= 0) return false;
    p += got;
    n -= static_cast<std::size_t>(got);
  }
  return true;
}

}  // namespace

int main() {
  const int rank = std::atoi(env("RANK").c_str());
  const int fd = connectStore();
  if (fd < 0) {
    std::printf("rank=%d cannot connect to %s:%s\n", rank, env("MASTER_ADDR").c_str(),
                env("MASTER_PORT").c_str());
    return 2;
  }
  const std::uint32_t pid = static_cast<std::uint32_t>(::getpid());
  std::uint32_t echo = 0;
  std::int64_t init = 0;
  if (!sendAll(fd, client::validate() + client::ping(pid)) || !recvAll(fd, &echo, 4) ||
      echo != pid || !sendAll(fd, client::add("init/", 1)) || !recvAll(fd, &init, 8))
    return 4;
  if (const std::string key = env("FAKE_RANK_WAIT"); !key.empty()) {
    std::uint8_t r = 0;
    if (!sendAll(fd, client::wait({key})) || !recvAll(fd, &r, 1)) {
      std::printf("rank=%d closed\n", rank);
      return 3;
    }
    std::printf("rank=%d released\n", rank);
    return 0;
  }
  const std::string key = "/default_pg/0//cuda//0";
  std::string id;
  if (rank == 0) {
    id.assign(128, '\0');
    std::memcpy(id.data(), "rank0-id", 8);
    if (!sendAll(fd, client::set(key, id))) return 4;
  } else {
    std::uint8_t r = 0;
    std::uint64_t len = 0;
    if (!sendAll(fd, client::wait({key})) || !recvAll(fd, &r, 1) ||
        !sendAll(fd, client::get(key)) || !recvAll(fd, &len, 8) || len > 4096)
      return 4;
    id.resize(len);
    if (!recvAll(fd, id.data(), len)) return 4;
  }
  std::string hex;
  for (std::size_t i = 0; i < 16 && i < id.size(); ++i) {
    char b[3];
    std::snprintf(b, sizeof b, "%02x", static_cast<unsigned char>(id[i]));
    hex += b;
  }
  std::printf("rank=%d world=%s local_rank=%s agent_store=%s init=%lld id=%s len=%zu\n", rank,
              env("WORLD_SIZE").c_str(), env("LOCAL_RANK").c_str(),
              env("TORCHELASTIC_USE_AGENT_STORE").c_str(), static_cast<long long>(init),
              hex.c_str(), id.size());
  std::fflush(stdout);
  ::close(fd);
  return 0;
}
