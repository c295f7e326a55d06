// Interposer side of the control channel (include/crystal/control/protocol.h): one
// connection per process to CRYSTAL_HOST, HELLO on connect, then request -> reply. Every
// call is bounded by the timeout given at construction; any failure (host absent, host gone,
// timeout, refusal) throws crystal::ProtocolError whose text is what the user should read.
#pragma once

#include <cstdint>
#include <string>

#include "crystal/control/protocol.h"
#include "crystal/control/socket_io.h"

namespace crystal::interpose {

class ControlClient {
 public:
  // Connects (retrying while the host is still starting) and says HELLO. Throws.
  ControlClient(std::string address, double timeout_s, const control::Hello& hello);

  [[nodiscard]] const std::string& address() const { return address_; }
  [[nodiscard]] std::uint64_t emulationId() const { return emulation_id_; }

  [[nodiscard]] control::UniqueId getUniqueId();
  void commInit(const control::CommInit& req);
  void commSplit(const control::CommSplit& req);
  [[nodiscard]] control::PoolPlace blockPool(const control::BlockPool& req);
  [[nodiscard]] control::Writes getWrites(const control::GetWrites& req);
  void note(const control::Note& n);

 private:
  // Sends one request and returns the reply; ERROR replies become ProtocolError.
  [[nodiscard]] control::Message call(const control::Message& req);
  template <typename Reply>
  [[nodiscard]] Reply ask(const control::Message& req);

  std::string address_;
  double timeout_s_;
  control::Fd fd_;
  std::uint64_t emulation_id_ = 0;
};

}  // namespace crystal::interpose
