// TCPStore request parsing: every command of PyTorch 2.11 round-trips through the client
// encoders; cut-short requests ask for more; unknown commands and oversized fields fail.
#include "wire.h"

#include <gtest/gtest.h>

namespace crystal::store {
namespace {

std::span<const std::byte> asBytes(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

Request parseWhole(const std::string& msg) {
  const ParseResult r = parseRequest(asBytes(msg));
  EXPECT_EQ(r.status, ParseStatus::Complete) << r.error;
  EXPECT_EQ(r.consumed, msg.size());
  // Every strict prefix is incomplete, never an error and never a request.
  for (std::size_t n = 0; n < msg.size(); ++n) {
    const ParseResult p = parseRequest(asBytes(msg.substr(0, n)));
    EXPECT_EQ(p.status, ParseStatus::NeedMore) << "prefix " << n;
    EXPECT_EQ(p.consumed, 0u);
  }
  return r.request;
}

TEST(StoreWire, ValidateIsCommandZeroWithMagicLittleEndian) {
  const std::string m = client::validate();
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m, std::string("\x00\xce\xf7\x85\x3c", 5));
  const Request r = parseWhole(m);
  EXPECT_EQ(r.command, Command::Validate);
  EXPECT_EQ(r.word, kValidationMagic);
}

TEST(StoreWire, PingCarriesNonce) {
  const Request r = parseWhole(client::ping(4242));
  EXPECT_EQ(r.command, Command::Ping);
  EXPECT_EQ(r.word, 4242u);
}

TEST(StoreWire, KeyIsLengthPrefixedU64) {
  const std::string m = client::get("init/");
  EXPECT_EQ(m, std::string("\x03\x05\0\0\0\0\0\0\0init/", 14));
  const Request r = parseWhole(m);
  EXPECT_EQ(r.command, Command::Get);
  ASSERT_EQ(r.keys.size(), 1u);
  EXPECT_EQ(r.keys[0], "init/");
}

TEST(StoreWire, EveryCommandRoundTrips) {
  const std::string bin("\x00\x01\xff", 3);
  Request r = parseWhole(client::set("k", bin));
  EXPECT_EQ(r.command, Command::Set);
  EXPECT_EQ(r.values.at(0), bin);
  r = parseWhole(client::compareSet("k", "", "new"));
  EXPECT_EQ(r.command, Command::CompareSet);
  EXPECT_EQ(r.values, (std::vector<std::string>{"", "new"}));
  r = parseWhole(client::add("c", -7));
  EXPECT_EQ(r.command, Command::Add);
  EXPECT_EQ(r.delta, -7);
  r = parseWhole(client::check({"a", "b"}));
  EXPECT_EQ(r.command, Command::Check);
  EXPECT_EQ(r.keys, (std::vector<std::string>{"a", "b"}));
  r = parseWhole(client::wait({"a"}));
  EXPECT_EQ(r.command, Command::Wait);
  EXPECT_EQ(parseWhole(client::getNumKeys()).command, Command::GetNumKeys);
  EXPECT_EQ(parseWhole(client::deleteKey("a")).command, Command::DeleteKey);
  r = parseWhole(client::append("a", "xy"));
  EXPECT_EQ(r.command, Command::Append);
  EXPECT_EQ(r.values.at(0), "xy");
  r = parseWhole(client::multiGet({"a", "b", "c"}));
  EXPECT_EQ(r.command, Command::MultiGet);
  EXPECT_EQ(r.keys.size(), 3u);
  r = parseWhole(client::multiSet({{"a", "1"}, {"b", "2"}}));
  EXPECT_EQ(r.command, Command::MultiSet);
  EXPECT_EQ(r.keys, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r.values, (std::vector<std::string>{"1", "2"}));
  EXPECT_EQ(parseWhole(client::cancelWait()).command, Command::CancelWait);
  EXPECT_EQ(parseWhole(client::queuePush("q", "v")).command, Command::QueuePush);
  EXPECT_EQ(parseWhole(client::queuePop("q")).command, Command::QueuePop);
  EXPECT_EQ(parseWhole(client::queueLen("q")).command, Command::QueueLen);
  EXPECT_EQ(parseWhole(client::listKeys()).command, Command::ListKeys);
}

TEST(StoreWire, PipelinedRequestsParseOneAtATime) {
  const std::string a = client::validate(), b = client::ping(7), c = client::add("init/", 1);
  const std::string all = a + b + c;
  ParseResult r = parseRequest(asBytes(all));
  ASSERT_EQ(r.status, ParseStatus::Complete);
  EXPECT_EQ(r.consumed, a.size());
  r = parseRequest(asBytes(all.substr(a.size())));
  ASSERT_EQ(r.status, ParseStatus::Complete);
  EXPECT_EQ(r.request.command, Command::Ping);
  EXPECT_EQ(r.consumed, b.size());
}

TEST(StoreWire, UnknownCommandIsInvalid) {
  const ParseResult r = parseRequest(asBytes(std::string("\x12", 1)));
  EXPECT_EQ(r.status, ParseStatus::Invalid);
  EXPECT_NE(r.error.find("unknown TCPStore command byte 18"), std::string::npos) << r.error;
}

TEST(StoreWire, OversizedFieldsAreInvalidBeforeTheirBytesArrive) {
  Limits small{.max_key_bytes = 4, .max_value_bytes = 8, .max_keys = 2};
  ParseResult r = parseRequest(asBytes(client::get("toolong")), small);
  EXPECT_EQ(r.status, ParseStatus::Invalid);
  EXPECT_NE(r.error.find("GET: key of 7 bytes exceeds the limit of 4"), std::string::npos)
      << r.error;
  // Only the length has arrived: still refused (a huge length is never buffered).
  std::string head = client::set("k", std::string(100, 'x')).substr(0, 1 + 8 + 1 + 8);
  r = parseRequest(asBytes(head), small);
  EXPECT_EQ(r.status, ParseStatus::Invalid);
  r = parseRequest(asBytes(client::wait({"a", "b", "c"})), small);
  EXPECT_EQ(r.status, ParseStatus::Invalid);
  EXPECT_NE(r.error.find("3 keys"), std::string::npos) << r.error;
}

}  // namespace
}  // namespace crystal::store
