// When this rank's emulation stops being faithful (its times no longer the target's, e.g. the
// P2P pacing of a comm stopped and its virtual GPUs run free), the user must hear of it
// whatever NCCL_DEBUG says: one line on stderr, and a note to the emulation host for
// `crystal emulate`'s report through the sink the interposer installs (control NOTE).
#pragma once

#include <string>

namespace crystal::plugin {

using FidelitySink = void (*)(const std::string& text) noexcept;
// The interposer's, at load (nullptr: stderr only, e.g. the plugin without the interposer).
void setFidelitySink(FidelitySink sink) noexcept;
// "crystal: <text>" on stderr, then `text` to the sink. Never throws; may block for as long as
// the sink does (a host call, bounded by CRYSTAL_TIMEOUT).
void reportNotFaithful(const std::string& text) noexcept;

}  // namespace crystal::plugin
