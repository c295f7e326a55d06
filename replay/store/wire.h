// PyTorch 2.11 TCPStore wire protocol, server side: request parsing and reply encoding.
// Facts (docs/store.md §Wire): plain TCP, little-endian, no message length; a request is a
// u8 command (c10d::detail::QueryType) plus that command's fields; strings and values are
// u64 length + bytes; replies carry no type byte (the client knows what it asked).
// No sockets here: the parser works on whatever bytes have arrived so far.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace crystal::store {

// QueryType of PyTorch 2.11 (torch/csrc/distributed/c10d/TCPStoreBackend.hpp).
enum class Command : std::uint8_t {
  Validate = 0,
  Set = 1,
  CompareSet = 2,
  Get = 3,
  Add = 4,
  Check = 5,
  Wait = 6,
  GetNumKeys = 7,
  DeleteKey = 8,
  Append = 9,
  MultiGet = 10,
  MultiSet = 11,
  CancelWait = 12,
  Ping = 13,
  QueuePush = 14,
  QueuePop = 15,
  QueueLen = 16,
  ListKeys = 17,
};
inline constexpr std::uint8_t kLastCommand = 17;
[[nodiscard]] std::string_view commandName(Command c) noexcept;

inline constexpr std::uint32_t kValidationMagic = 0x3C85F7CE;
// Reply codes (CheckResponseType, WaitResponseType).
inline constexpr std::uint8_t kCheckReady = 0, kCheckNotReady = 1;
inline constexpr std::uint8_t kStopWaiting = 0, kWaitCanceled = 1;

// The libuv server's bounds (MAX_STRING_LEN, MAX_PAYLOAD_LEN, MAX_KEY_COUNT): beyond them a
// request is refused rather than buffered without end.
struct Limits {
  std::uint64_t max_key_bytes = 8 * 1024;
  std::uint64_t max_value_bytes = 8ull * 1024 * 1024;
  std::uint64_t max_keys = 128 * 1024;
};

// One parsed request. Keys and values are byte strings (values may hold any byte).
struct Request {
  Command command = Command::Validate;
  std::vector<std::string> keys;    // every command that names keys
  std::vector<std::string> values;  // SET/APPEND/QUEUE_PUSH: 1; COMPARE_SET: expected, desired;
                                    // MULTI_SET: one per key
  std::int64_t delta = 0;           // ADD
  std::uint32_t word = 0;           // VALIDATE magic, PING nonce
};

enum class ParseStatus { Complete, NeedMore, Invalid };

struct ParseResult {
  ParseStatus status = ParseStatus::NeedMore;
  std::size_t consumed = 0;  // bytes of the request when Complete
  Request request;
  std::string error;  // Invalid: what is wrong, one line
};

// Parses the first request in `bytes`. NeedMore when it is cut short (nothing consumed);
// Invalid for an unknown command byte or a length beyond `limits`.
[[nodiscard]] ParseResult parseRequest(std::span<const std::byte> bytes, const Limits& limits = {});

// Reply encoders (append to `out`).
void putU8(std::string& out, std::uint8_t v);
void putU32(std::string& out, std::uint32_t v);
void putI64(std::string& out, std::int64_t v);
void putBytes(std::string& out, std::string_view v);  // u64 length + bytes

// Request encoders: what PyTorch's client sends. Used by the tests' hand-built sequences
// and by anything that talks to a TCPStore as a client.
namespace client {
[[nodiscard]] std::string validate(std::uint32_t magic = kValidationMagic);
[[nodiscard]] std::string ping(std::uint32_t nonce);
[[nodiscard]] std::string set(std::string_view key, std::string_view value);
[[nodiscard]] std::string compareSet(std::string_view key, std::string_view expected,
                                     std::string_view desired);
[[nodiscard]] std::string get(std::string_view key);
[[nodiscard]] std::string add(std::string_view key, std::int64_t delta);
[[nodiscard]] std::string check(const std::vector<std::string>& keys);
[[nodiscard]] std::string wait(const std::vector<std::string>& keys);
[[nodiscard]] std::string getNumKeys();
[[nodiscard]] std::string deleteKey(std::string_view key);
[[nodiscard]] std::string append(std::string_view key, std::string_view value);
[[nodiscard]] std::string multiGet(const std::vector<std::string>& keys);
[[nodiscard]] std::string multiSet(const std::vector<std::pair<std::string, std::string>>& kv);
[[nodiscard]] std::string cancelWait();
[[nodiscard]] std::string queuePush(std::string_view key, std::string_view value);
[[nodiscard]] std::string queuePop(std::string_view key);
[[nodiscard]] std::string queueLen(std::string_view key);
[[nodiscard]] std::string listKeys();
}  // namespace client

}  // namespace crystal::store
