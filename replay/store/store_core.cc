#include "store_core.h"

#include <fmt/core.h>

#include <algorithm>
#include <charconv>
#include <set>

namespace crystal::store {

namespace {
std::string keyList(const std::vector<std::string>& keys) {
  std::string s;
  for (const auto& k : keys) s += (s.empty() ? "'" : ", '") + k + "'";
  return s;
}
}  // namespace

StoreCore::StoreCore(VirtualRanks virtual_ranks, MintFn mint, CoreOptions options)
    : virt_(std::move(virtual_ranks)), mint_(std::move(mint)), options_(options) {
  for (auto& [k, v] : virt_.initialKeys()) kv_[k] = v;
}

void StoreCore::open(ConnId conn, Clock::time_point) { conns_[conn] = Conn{}; }

void StoreCore::nameProcess(std::uint32_t pid, int rank) { rank_of_pid_[pid] = rank; }

std::string StoreCore::who(ConnId conn) const {
  const auto it = conns_.find(conn);
  if (it == conns_.end() || it->second.pid == 0) return fmt::format("connection #{}", conn);
  const auto r = rank_of_pid_.find(it->second.pid);
  if (r == rank_of_pid_.end()) return fmt::format("process {}", it->second.pid);
  return fmt::format("rank {} (pid {})", r->second, it->second.pid);
}

void StoreCore::fail(ConnId conn, const std::string& why, Effects& out) {
  out.errors.push_back(fmt::format("store: {}: {}; connection closed", who(conn), why));
  out.closes.push_back(conn);
  closed(conn);
}

void StoreCore::malformed(ConnId conn, const std::string& why, Effects& out) {
  fail(conn, why, out);
}

void StoreCore::closed(ConnId conn) {
  clearWait(conn);
  conns_.erase(conn);
}

bool StoreCore::present(const std::string& key) const {
  if (kv_.count(key) != 0) return true;
  const auto q = queues_.find(key);
  return q != queues_.end() && !q->second.empty();
}

std::optional<std::string> StoreCore::value(const std::string& key) const {
  const auto it = kv_.find(key);
  if (it == kv_.end()) return std::nullopt;
  return it->second;
}

std::size_t StoreCore::waitingConnections() const {
  return static_cast<std::size_t>(
      std::count_if(conns_.begin(), conns_.end(), [](const auto& c) { return c.second.waiting; }));
}

void StoreCore::stopWaiting(ConnId conn, Effects& out) {
  auto& c = conns_.at(conn);
  c.waiting = false;
  c.awaited = 0;
  c.wait_keys.clear();
  std::string r;
  putU8(r, kStopWaiting);
  out.replies.emplace_back(conn, std::move(r));
}

void StoreCore::wakeAll(const std::string& key, Effects& out) {
  const auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  const std::vector<ConnId> list = std::move(it->second);
  waiters_.erase(it);
  for (ConnId w : list) {
    auto c = conns_.find(w);
    if (c == conns_.end() || !c->second.waiting) continue;
    if (--c->second.awaited == 0) stopWaiting(w, out);
  }
}

// A queue push releases one waiter (libuv: wakeupOneWaitingClient).
void StoreCore::wakeOne(const std::string& key, Effects& out) {
  const auto it = waiters_.find(key);
  if (it == waiters_.end()) return;
  auto& list = it->second;
  for (auto w = list.begin(); w != list.end(); ++w) {
    auto c = conns_.find(*w);
    if (c == conns_.end() || !c->second.waiting) continue;
    const ConnId id = *w;
    list.erase(w);
    if (--c->second.awaited == 0) stopWaiting(id, out);
    break;
  }
  if (list.empty()) waiters_.erase(it);
}

void StoreCore::clearWait(ConnId conn) {
  const auto c = conns_.find(conn);
  if (c == conns_.end() || !c->second.waiting) return;
  for (const auto& k : c->second.wait_keys) {
    const auto it = waiters_.find(k);
    if (it == waiters_.end()) continue;
    std::erase(it->second, conn);
    if (it->second.empty()) waiters_.erase(it);
  }
  c->second.waiting = false;
  c->second.awaited = 0;
  c->second.wait_keys.clear();
}

void StoreCore::setKey(const std::string& key, std::string value, Effects& out) {
  kv_[key] = std::move(value);
  wakeAll(key, out);
}

std::size_t StoreCore::processesWaitingOn(const std::string& key) const {
  const auto it = waiters_.find(key);
  if (it == waiters_.end()) return 0;
  std::set<std::uint64_t> procs;  // pid, or the connection for one that never pinged
  for (ConnId w : it->second) {
    const auto c = conns_.find(w);
    if (c == conns_.end()) continue;
    procs.insert(c->second.pid != 0 ? c->second.pid : (1ull << 32) + w);
  }
  return procs.size();
}

// A key a real rank waits for is written here when a virtual rank is its writer: known from
// the key (the default group's id root, a p2p pair's low rank), or proven because every real
// process is blocked waiting for it (so none of them will write it).
void StoreCore::answerForVirtualRanks(const std::vector<std::string>& missing, Effects& out) {
  for (const auto& key : missing) {
    if (present(key)) continue;
    const KeyClass kc = virt_.classify(key);
    if (kc.role == KeyRole::None) continue;
    if (kc.writer >= 0 && virt_.isReal(kc.writer)) continue;
    if (kc.writer < 0 &&
        processesWaitingOn(key) < static_cast<std::size_t>(std::max(1, virt_.realCount())))
      continue;
    std::string value;
    if (kc.role == KeyRole::UniqueId) {
      value = mint_();
      out.notes.push_back(fmt::format("store: virtual rank {} wrote {} ('{}')",
                                      kc.writer >= 0 ? std::to_string(kc.writer) : "(first member)",
                                      kc.what, key));
    } else {
      value = "1";
      out.notes.push_back(
          fmt::format("store: a virtual rank released the {} ('{}')", kc.what, key));
    }
    minted_[key] = true;
    setKey(key, std::move(value), out);
  }
}

void StoreCore::beginWait(ConnId conn, const std::vector<std::string>& keys, Clock::time_point now,
                          Effects& out) {
  auto& c = conns_.at(conn);
  if (c.waiting) return fail(conn, "a second WAIT while the first is pending", out);
  if (std::all_of(keys.begin(), keys.end(), [&](const auto& k) { return present(k); })) {
    std::string r;
    putU8(r, kStopWaiting);
    out.replies.emplace_back(conn, std::move(r));
    return;
  }
  std::vector<std::string> missing;
  for (const auto& k : keys)
    if (kv_.count(k) == 0) {
      waiters_[k].push_back(conn);
      missing.push_back(k);
    }
  c.waiting = true;
  c.awaited = missing.size();
  c.wait_keys = missing;
  c.wait_since = now;
  answerForVirtualRanks(missing, out);
}

void StoreCore::request(ConnId conn, const Request& req, Clock::time_point now, Effects& out) {
  auto it = conns_.find(conn);
  if (it == conns_.end()) return;
  Conn& c = it->second;
  std::string r;
  auto reply = [&] { out.replies.emplace_back(conn, std::move(r)); };
  if (!c.validated) {
    if (req.command != Command::Validate)
      return fail(conn,
                  fmt::format("first TCPStore command {} is not VALIDATE: not a PyTorch 2.11 "
                              "TCPStore client",
                              commandName(req.command)),
                  out);
    if (req.word != kValidationMagic)
      return fail(conn,
                  fmt::format("VALIDATE magic 0x{:08X} is not PyTorch's 0x{:08X}: a TCPStore "
                              "protocol this store does not speak",
                              req.word, kValidationMagic),
                  out);
    c.validated = true;
    return;
  }
  if (c.waiting && req.command != Command::CancelWait)
    return fail(conn,
                fmt::format("{} while a WAIT for {} is pending (one request at a time per "
                            "connection)",
                            commandName(req.command), keyList(c.wait_keys)),
                out);
  const auto& k = req.keys;
  switch (req.command) {
    case Command::Validate:
      return fail(conn, "VALIDATE twice", out);
    case Command::Ping:
      c.pid = req.word;
      putU32(r, req.word);
      return reply();
    case Command::Set:
      if (minted_.count(k[0]) != 0)
        out.errors.push_back(fmt::format(
            "store: {} overwrote '{}', which a virtual rank had written: the store took its "
            "writer for virtual, so ranks may now disagree on it",
            who(conn), k[0]));
      return setKey(k[0], req.values[0], out);
    case Command::CompareSet: {
      const auto& expected = req.values[0];
      const auto& desired = req.values[1];
      const auto cur = kv_.find(k[0]);
      if (cur == kv_.end()) {
        // libuv: a missing key is created only when `expected` is empty; otherwise the
        // reply is `expected` and nothing is stored.
        if (expected.empty()) {
          putBytes(r, desired);
          reply();
          return setKey(k[0], desired, out);
        }
        putBytes(r, expected);
        reply();
        return wakeAll(k[0], out);
      }
      if (cur->second == expected) cur->second = desired;
      putBytes(r, cur->second);
      reply();
      return wakeAll(k[0], out);
    }
    case Command::Get: {
      const auto v = kv_.find(k[0]);
      putBytes(r, v == kv_.end() ? std::string_view() : std::string_view(v->second));
      return reply();
    }
    case Command::Add: {
      std::int64_t base = 0;
      if (const auto v = kv_.find(k[0]); v != kv_.end()) {
        const auto& s = v->second;
        const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), base);
        if (ec != std::errc() || p != s.data() + s.size())
          return fail(conn, fmt::format("ADD on '{}', whose value is not a decimal integer", k[0]),
                      out);
      } else if (const auto seed = virt_.virtualAdds(k[0])) {
        base = *seed;
        out.notes.push_back(fmt::format("store: {} virtual ranks added to '{}'", *seed, k[0]));
      }
      const std::int64_t sum = base + req.delta;
      putI64(r, sum);
      reply();
      return setKey(k[0], std::to_string(sum), out);
    }
    case Command::Check: {
      const bool ready =
          std::all_of(k.begin(), k.end(), [&](const auto& key) { return present(key); });
      putU8(r, ready ? kCheckReady : kCheckNotReady);
      return reply();
    }
    case Command::Wait:
      return beginWait(conn, k, now, out);
    case Command::GetNumKeys:
      putI64(r, static_cast<std::int64_t>(kv_.size()));
      return reply();
    case Command::DeleteKey:
      putI64(r, static_cast<std::int64_t>(kv_.erase(k[0])));
      return reply();
    case Command::Append:
      kv_[k[0]] += req.values[0];
      return wakeAll(k[0], out);
    case Command::MultiGet:
      for (const auto& key : k) {
        const auto v = kv_.find(key);
        putBytes(r, v == kv_.end() ? std::string_view() : std::string_view(v->second));
      }
      return reply();
    case Command::MultiSet:
      for (std::size_t i = 0; i < k.size(); ++i) setKey(k[i], req.values[i], out);
      return;
    case Command::CancelWait:
      clearWait(conn);
      putU8(r, kWaitCanceled);
      return reply();
    case Command::QueuePush:
      queues_[k[0]].push_back(req.values[0]);
      return wakeOne(k[0], out);
    case Command::QueuePop: {
      auto& q = queues_[k[0]];
      putI64(r, static_cast<std::int64_t>(q.size()));
      if (!q.empty()) {
        putBytes(r, q.front());
        q.pop_front();
      }
      return reply();
    }
    case Command::QueueLen: {
      const auto q = queues_.find(k[0]);
      putI64(r, q == queues_.end() ? 0 : static_cast<std::int64_t>(q->second.size()));
      return reply();
    }
    case Command::ListKeys: {
      std::vector<std::string> keys;
      keys.reserve(kv_.size());
      for (const auto& [key, v] : kv_) keys.push_back(key);
      std::sort(keys.begin(), keys.end());
      putI64(r, static_cast<std::int64_t>(keys.size()));
      for (const auto& key : keys) putBytes(r, key);
      return reply();
    }
  }
}

void StoreCore::tick(Clock::time_point now, Effects& out) {
  std::vector<ConnId> late;
  for (const auto& [id, c] : conns_)
    if (c.waiting && now - c.wait_since >= options_.wait_timeout) late.push_back(id);
  for (ConnId id : late) {
    const auto& c = conns_.at(id);
    std::string why;
    for (const auto& key : c.wait_keys) {
      if (present(key)) continue;
      const KeyClass kc = virt_.classify(key);
      std::string reason;
      if (kc.role == KeyRole::None)
        reason =
            "no virtual rank of PyTorch 2.11 writes this key (docs/store.md lists those it "
            "does); a real rank that should write it has not";
      else if (kc.writer >= 0)
        reason = fmt::format("its writer, rank {}, is real and has not written it", kc.writer);
      else
        reason = fmt::format(
            "{}: its writer is not known from the key and not every real process waits for it "
            "(create process groups eagerly: init_process_group(device_id=...))",
            kc.what);
      why += fmt::format("{}'{}' ({})", why.empty() ? "" : "; ", key, reason);
    }
    const auto secs = std::chrono::duration<double>(options_.wait_timeout).count();
    fail(id, fmt::format("waited {:.0f} s for {}", secs, why), out);
  }
}

}  // namespace crystal::store
