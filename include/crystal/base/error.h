// Error types shared by every module.
//
// Inside the project, bad input and internal failures are exceptions; they never cross the
// NCCL ABI (plugin entry points catch everything and map it through plugin/errors) nor
// escape the CLI (which maps InputError to exit code 2).
#pragma once

#include <stdexcept>
#include <string>

namespace crystal {

// Bad user input: a YAML/graph/env value that cannot be used. The message names the file,
// field, offset or rank concerned, so the user can fix it without a debugger.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A protocol peer (a real rank, the host, NCCL) did something the emulation cannot follow:
// unexpected message, unsupported NCCL version, timeout.
class ProtocolError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Exit code the CLI returns for InputError (documented in README).
inline constexpr int kExitBadInput = 2;

}  // namespace crystal
