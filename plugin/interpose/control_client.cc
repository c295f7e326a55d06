#include "plugin/interpose/control_client.h"

#include <thread>

#include "crystal/base/error.h"
#include "crystal/control/codec.h"

namespace crystal::interpose {

using namespace crystal::control;

ControlClient::ControlClient(std::string address, double timeout_s, const Hello& hello)
    : address_(std::move(address)), timeout_s_(timeout_s) {
  const sockaddr_in sa = parseHostPort(address_, "CRYSTAL_HOST");
  const Deadline dl(timeout_s_);
  // The host may still be starting (a batch script that launches both at once): retry a
  // refused connection until the deadline, then report the last reason.
  int err = 0;
  for (auto backoff = std::chrono::milliseconds(10);;) {
    fd_ = tryConnect(sa, dl, err);
    if (fd_.valid()) break;
    if (dl.expired() || dl.remainingMs() < 1)
      throw ProtocolError("cannot reach the emulation host at CRYSTAL_HOST=" + address_ +
                          " within " + std::to_string(timeout_s_) + " s (CRYSTAL_TIMEOUT): " +
                          std::strerror(err) + "; is `crystal host` running?");
    std::this_thread::sleep_for(
        std::min<std::chrono::milliseconds>(backoff, std::chrono::milliseconds(dl.remainingMs())));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(200));
  }
  const Message reply = call(hello);
  if (const auto* ok = std::get_if<HelloOk>(&reply)) {
    emulation_id_ = ok->emulation_id;
    return;
  }
  throw ProtocolError(std::string("emulation host answered HELLO with ") +
                      typeName(typeOfMessage(reply)));
}

Message ControlClient::call(const Message& req) {
  const Deadline dl(timeout_s_);
  const char* what = typeName(typeOfMessage(req));
  try {
    sendAll(fd_.get(), encode(req), dl);
    std::uint8_t head[kHeaderSize];
    recvAll(fd_.get(), head, dl);
    const Header h = decodeHeader(head);
    std::vector<std::uint8_t> payload(h.length);
    recvAll(fd_.get(), payload, dl);
    Message reply = decodePayload(h.type, payload);
    if (const auto* e = std::get_if<Error>(&reply))
      throw ProtocolError(std::string("emulation host refused ") + what + ": " + e->text);
    return reply;
  } catch (const ProtocolError& e) {
    // Any failure leaves the stream in an unknown state: drop it.
    fd_.reset();
    const std::string text = e.what();
    if (text.rfind("emulation host refused", 0) == 0) throw;
    throw ProtocolError(std::string(what) + " to the emulation host at " + address_ +
                        " failed: " + text);
  }
}

// One request whose only good answer is a `Reply`; any other becomes ProtocolError.
template <typename Reply>
Reply ControlClient::ask(const Message& req) {
  if (!fd_.valid()) throw ProtocolError("connection to the emulation host was lost earlier");
  Message reply = call(req);
  if (auto* r = std::get_if<Reply>(&reply)) return std::move(*r);
  throw ProtocolError(std::string("emulation host answered ") + typeName(typeOfMessage(req)) +
                      " with " + typeName(typeOfMessage(reply)));
}

UniqueId ControlClient::getUniqueId() { return ask<UniqueIdReply>(GetUniqueId{}).id; }
void ControlClient::commInit(const CommInit& req) { (void)ask<Ok>(req); }
void ControlClient::commSplit(const CommSplit& req) { (void)ask<Ok>(req); }
PoolPlace ControlClient::blockPool(const BlockPool& req) { return ask<PoolPlace>(req); }
Writes ControlClient::getWrites(const GetWrites& req) { return ask<Writes>(req); }
void ControlClient::note(const Note& n) { (void)ask<Ok>(n); }

}  // namespace crystal::interpose
