// A PyTorch 2.11-compatible TCPStore server that also plays the job's virtual ranks
// (docs/store.md). `crystal emulate` / `crystal host` run it at the MASTER_ADDR:MASTER_PORT
// the real ranks get; every real rank, rank 0 included, is its client
// (TORCHELASTIC_USE_AGENT_STORE=True), so the job needs no process of its rank 0.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace crystal::store {

struct StoreServerOptions {
  std::string listen = "127.0.0.1:0";  // IPv4 HOST:PORT; port 0 = any free port
  int world_size = 0;                  // WORLD_SIZE of the target job
  std::vector<int> real_ranks;         // global ranks that run for real
  int ranks_per_root = 128;            // TORCH_NCCL_RANKS_PER_ROOT of the real ranks
  // A real rank's WAIT that nothing answers fails after this long (error line + closed
  // connection, so the rank's PyTorch raises instead of hanging).
  std::chrono::milliseconds wait_timeout{60000};
  // A fresh ncclUniqueId (128 bytes) whose bootstrap root is the emulation host; used when a
  // virtual rank is the writer of a process group's id.
  std::function<std::string()> mint_unique_id;
};

class StoreServer {
 public:
  // Binds and starts serving on its own thread. Throws InputError on a bad address/job.
  explicit StoreServer(StoreServerOptions options);
  ~StoreServer();  // stops the thread, closes every connection
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  [[nodiscard]] std::string host() const;    // MASTER_ADDR
  [[nodiscard]] std::uint16_t port() const;  // MASTER_PORT
  // Lets messages say "rank 3 (pid 1234)" for a process the launcher started.
  void nameProcess(std::uint32_t pid, int rank);
  [[nodiscard]] std::size_t errorCount() const;
  [[nodiscard]] std::vector<std::string> errors() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace crystal::store
