// The TCPStore's state machine: keys, queues, deferred WAIT replies, per-connection
// handshake, and the virtual ranks' part (virtual_ranks.h). No sockets: the server feeds it
// parsed requests and writes back what it returns, so every reply can be tested exactly.
//
// Semantics follow PyTorch 2.11's libuv server (docs/store.md §Commands). Where that server
// is lax (a wrong VALIDATE magic, a command before VALIDATE, an ADD on a non-number), this
// one closes the connection with one logged line naming the process and the key.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "virtual_ranks.h"
#include "wire.h"

namespace crystal::store {

using ConnId = std::uint64_t;
using Clock = std::chrono::steady_clock;

// What one step produced; the server sends, closes and logs it in this order.
struct Effects {
  std::vector<std::pair<ConnId, std::string>> replies;
  std::vector<ConnId> closes;
  std::vector<std::string> errors;  // one line each: a real rank will fail because of it
  std::vector<std::string> notes;   // one line each: what a virtual rank answered
};

struct CoreOptions {
  // A WAIT pending this long fails (error + close). PyTorch's own store timeout is the
  // process group's (10 min by default); this one is shorter so the reason gets logged.
  std::chrono::milliseconds wait_timeout{60000};
};

class StoreCore {
 public:
  // An ncclUniqueId (128 bytes) whose bootstrap root answers for the virtual ranks.
  using MintFn = std::function<std::string()>;

  StoreCore(VirtualRanks virtual_ranks, MintFn mint, CoreOptions options = {});

  void open(ConnId conn, Clock::time_point now);
  void request(ConnId conn, const Request& req, Clock::time_point now, Effects& out);
  // The connection sent bytes that are no TCPStore request: logged, closed.
  void malformed(ConnId conn, const std::string& why, Effects& out);
  void closed(ConnId conn);  // peer gone: drop its waits
  void tick(Clock::time_point now, Effects& out);
  // Names a process in messages (PING's nonce is the client's pid).
  void nameProcess(std::uint32_t pid, int rank);

  [[nodiscard]] std::optional<std::string> value(const std::string& key) const;
  [[nodiscard]] std::size_t waitingConnections() const;
  [[nodiscard]] const VirtualRanks& virtualRanks() const noexcept { return virt_; }

 private:
  struct Conn {
    bool validated = false;
    std::uint32_t pid = 0;  // from PING; 0 = not yet known
    bool waiting = false;
    std::size_t awaited = 0;  // keys still missing for the pending WAIT
    std::vector<std::string> wait_keys;
    Clock::time_point wait_since{};
  };

  std::string who(ConnId conn) const;
  void fail(ConnId conn, const std::string& why, Effects& out);
  void setKey(const std::string& key, std::string value, Effects& out);
  void wakeAll(const std::string& key, Effects& out);
  void wakeOne(const std::string& key, Effects& out);
  void stopWaiting(ConnId conn, Effects& out);
  void clearWait(ConnId conn);
  void beginWait(ConnId conn, const std::vector<std::string>& keys, Clock::time_point now,
                 Effects& out);
  void answerForVirtualRanks(const std::vector<std::string>& missing, Effects& out);
  [[nodiscard]] bool present(const std::string& key) const;
  [[nodiscard]] std::size_t processesWaitingOn(const std::string& key) const;

  VirtualRanks virt_;
  MintFn mint_;
  CoreOptions options_;
  std::unordered_map<std::string, std::string> kv_;
  std::unordered_map<std::string, std::deque<std::string>> queues_;
  std::unordered_map<std::string, std::vector<ConnId>> waiters_;  // key -> connections
  std::map<ConnId, Conn> conns_;
  std::unordered_map<std::uint32_t, int> rank_of_pid_;
  std::unordered_map<std::string, bool> minted_;  // keys a virtual rank wrote
};

}  // namespace crystal::store
