#include "wire.h"

#include <fmt/core.h>

#include <array>
#include <cstring>

namespace crystal::store {

std::string_view commandName(Command c) noexcept {
  static constexpr std::array<std::string_view, kLastCommand + 1> kNames = {
      "VALIDATE",    "SET",        "COMPARE_SET", "GET",       "ADD",       "CHECK",
      "WAIT",        "GETNUMKEYS", "DELETE_KEY",  "APPEND",    "MULTI_GET", "MULTI_SET",
      "CANCEL_WAIT", "PING",       "QUEUE_PUSH",  "QUEUE_POP", "QUEUE_LEN", "LIST_KEYS"};
  const auto i = static_cast<std::size_t>(c);
  return i < kNames.size() ? kNames[i] : std::string_view("?");
}

namespace {

// Reads fields off the front of the buffer; any read past the end marks the request short.
class Reader {
 public:
  Reader(std::span<const std::byte> b, const Limits& limits) : b_(b), limits_(limits) {}

  template <typename T>
  bool value(T& out) {
    if (b_.size() - pos_ < sizeof(T)) return short_ = true, false;
    std::memcpy(&out, b_.data() + pos_, sizeof(T));  // little-endian host, like PyTorch
    pos_ += sizeof(T);
    return true;
  }
  bool bytes(std::string& out, std::uint64_t max, const char* what) {
    std::uint64_t len = 0;
    if (!value(len)) return false;
    if (len > max) {
      error_ = fmt::format("{} of {} bytes exceeds the limit of {}", what, len, max);
      return false;
    }
    if (b_.size() - pos_ < len) return short_ = true, false;
    out.assign(reinterpret_cast<const char*>(b_.data() + pos_), len);
    pos_ += len;
    return true;
  }
  bool key(std::string& out) { return bytes(out, limits_.max_key_bytes, "key"); }
  bool val(std::string& out) { return bytes(out, limits_.max_value_bytes, "value"); }
  bool count(std::uint64_t& n) {
    if (!value(n)) return false;
    if (n > limits_.max_keys) {
      error_ = fmt::format("{} keys in one request exceed the limit of {}", n, limits_.max_keys);
      return false;
    }
    return true;
  }
  [[nodiscard]] std::size_t pos() const { return pos_; }
  [[nodiscard]] bool isShort() const { return short_; }
  [[nodiscard]] const std::string& error() const { return error_; }

 private:
  std::span<const std::byte> b_;
  const Limits& limits_;
  std::size_t pos_ = 0;
  bool short_ = false;
  std::string error_;
};

// Fills `r` from the fields after the command byte; false if short or over a limit.
bool readFields(Reader& in, Request& r) {
  auto keys = [&](bool with_values) {
    std::uint64_t n = 0;
    if (!in.count(n)) return false;
    for (std::uint64_t i = 0; i < n; ++i) {
      std::string k;
      if (!in.key(k)) return false;
      r.keys.push_back(std::move(k));
      if (with_values) {
        std::string v;
        if (!in.val(v)) return false;
        r.values.push_back(std::move(v));
      }
    }
    return true;
  };
  auto key = [&] {
    std::string k;
    if (!in.key(k)) return false;
    r.keys.push_back(std::move(k));
    return true;
  };
  auto val = [&] {
    std::string v;
    if (!in.val(v)) return false;
    r.values.push_back(std::move(v));
    return true;
  };
  switch (r.command) {
    case Command::Validate:
    case Command::Ping:
      return in.value(r.word);
    case Command::Set:
    case Command::Append:
    case Command::QueuePush:
      return key() && val();
    case Command::CompareSet:
      return key() && val() && val();
    case Command::Get:
    case Command::DeleteKey:
    case Command::QueuePop:
    case Command::QueueLen:
      return key();
    case Command::Add:
      return key() && in.value(r.delta);
    case Command::Check:
    case Command::Wait:
    case Command::MultiGet:
      return keys(false);
    case Command::MultiSet:
      return keys(true);
    case Command::GetNumKeys:
    case Command::CancelWait:
    case Command::ListKeys:
      return true;
  }
  return false;
}

}  // namespace

ParseResult parseRequest(std::span<const std::byte> bytes, const Limits& limits) {
  ParseResult res;
  if (bytes.empty()) return res;
  const auto code = static_cast<std::uint8_t>(bytes[0]);
  if (code > kLastCommand) {
    res.status = ParseStatus::Invalid;
    res.error = fmt::format(
        "unknown TCPStore command byte {} (PyTorch 2.11 knows 0..{}; another PyTorch version?)",
        code, kLastCommand);
    return res;
  }
  res.request.command = static_cast<Command>(code);
  Reader in(bytes.subspan(1), limits);
  if (readFields(in, res.request)) {
    res.status = ParseStatus::Complete;
    res.consumed = 1 + in.pos();
    return res;
  }
  if (!in.error().empty()) {
    res.status = ParseStatus::Invalid;
    res.error = fmt::format("{}: {}", commandName(res.request.command), in.error());
    return res;
  }
  res.request = {};
  return res;  // NeedMore
}

void putU8(std::string& out, std::uint8_t v) { out.push_back(static_cast<char>(v)); }
void putU32(std::string& out, std::uint32_t v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
void putI64(std::string& out, std::int64_t v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
void putBytes(std::string& out, std::string_view v) {
  const std::uint64_t n = v.size();
  out.append(reinterpret_cast<const char*>(&n), sizeof n);
  out.append(v);
}

namespace client {
namespace {
std::string head(Command c) { return std::string(1, static_cast<char>(c)); }
std::string keyList(Command c, const std::vector<std::string>& keys) {
  std::string m = head(c);
  const std::uint64_t n = keys.size();
  m.append(reinterpret_cast<const char*>(&n), sizeof n);
  for (const auto& k : keys) putBytes(m, k);
  return m;
}
std::string oneKey(Command c, std::string_view key) {
  std::string m = head(c);
  putBytes(m, key);
  return m;
}
}  // namespace

std::string validate(std::uint32_t magic) {
  std::string m = head(Command::Validate);
  putU32(m, magic);
  return m;
}
std::string ping(std::uint32_t nonce) {
  std::string m = head(Command::Ping);
  putU32(m, nonce);
  return m;
}
std::string set(std::string_view key, std::string_view value) {
  std::string m = oneKey(Command::Set, key);
  putBytes(m, value);
  return m;
}
std::string compareSet(std::string_view key, std::string_view expected, std::string_view desired) {
  std::string m = oneKey(Command::CompareSet, key);
  putBytes(m, expected);
  putBytes(m, desired);
  return m;
}
std::string get(std::string_view key) { return oneKey(Command::Get, key); }
std::string add(std::string_view key, std::int64_t delta) {
  std::string m = oneKey(Command::Add, key);
  putI64(m, delta);
  return m;
}
std::string check(const std::vector<std::string>& keys) { return keyList(Command::Check, keys); }
std::string wait(const std::vector<std::string>& keys) { return keyList(Command::Wait, keys); }
std::string getNumKeys() { return head(Command::GetNumKeys); }
std::string deleteKey(std::string_view key) { return oneKey(Command::DeleteKey, key); }
std::string append(std::string_view key, std::string_view value) {
  std::string m = oneKey(Command::Append, key);
  putBytes(m, value);
  return m;
}
std::string multiGet(const std::vector<std::string>& keys) {
  return keyList(Command::MultiGet, keys);
}
std::string multiSet(const std::vector<std::pair<std::string, std::string>>& kv) {
  std::string m = head(Command::MultiSet);
  const std::uint64_t n = kv.size();
  m.append(reinterpret_cast<const char*>(&n), sizeof n);
  for (const auto& [k, v] : kv) {
    putBytes(m, k);
    putBytes(m, v);
  }
  return m;
}
std::string cancelWait() { return head(Command::CancelWait); }
std::string queuePush(std::string_view key, std::string_view value) {
  std::string m = oneKey(Command::QueuePush, key);
  putBytes(m, value);
  return m;
}
std::string queuePop(std::string_view key) { return oneKey(Command::QueuePop, key); }
std::string queueLen(std::string_view key) { return oneKey(Command::QueueLen, key); }
std::string listKeys() { return head(Command::ListKeys); }
}  // namespace client

}  // namespace crystal::store
