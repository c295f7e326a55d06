#!/usr/bin/env bash
# GPU check of the plugin's P2P agent kernel alone (device machine; no NCCL run): builds
# p2p_agent_check (p2p_agent_check.cu) and prints, for each channel count, how long the agent
# takes to answer R's stand-in (a credit after a send, a receive tail after a consumed slot)
# beside a bare copying kernel's round trip, with credits due at once or 150 ns / 1 us
# after the send, and with a CPU thread busy on the table. Log in $OUT/agent.log.
# Usage: tests/gpu/plugin/run_agent.sh [CHANNELS ...]   (default: 1 16 28 44)
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${OUT:-/tmp/crystal-gpu-agent}
mkdir -p "$out"
. tests/gpu/plugin/build_checks.sh
build_checks agent p2p_agent_check
CUDA_MODULE_LOADING=EAGER timeout 120 "$build/p2p_agent_check" "$@" 2>&1 | tee "$out/agent.log"
exit "${PIPESTATUS[0]}"
