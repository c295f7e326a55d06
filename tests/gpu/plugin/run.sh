#!/usr/bin/env bash
# GPU check of the crystal NCCL plugin (device machine): build the plugin and the NCCL test
# program there, run two ranks on the one GPU with distinct NCCL_HOSTID through
# NCCL_NET_PLUGIN=crystal, print per-size timing beside the model, keep the logs in $OUT.
# Usage: tests/gpu/plugin/run.sh [MAX_BYTES]   (default 1 GiB)
# BASELINE=1 also runs the same program over NCCL's own Socket transport (no plugin), to
# tell what the one shared GPU and loopback cost from what the plugin costs.
set -euo pipefail
cd "$(dirname "$0")/../../.."
max=${1:-1073741824}
out=${OUT:-/tmp/crystal-gpu-plugin}
mkdir -p "$out"
. tests/gpu/plugin/build_checks.sh
build_checks plugin crystal_nccl_plugin nccl_crystal_check
echo "NCCL_ROOT=$nccl_root"
plugin_dir=$(dirname "$(find "$build" -name libnccl-net-crystal.so | head -1)")
export LD_LIBRARY_PATH="$plugin_dir:$nccl_root/lib:${LD_LIBRARY_PATH:-}"
export NCCL_NET_PLUGIN=crystal NCCL_NET=crystal NCCL_IB_DISABLE=1 NCCL_DEBUG=INFO \
       NCCL_DEBUG_SUBSYS=INIT,NET,TUNING NCCL_RAS_ENABLE=0 NCCL_NVLS_ENABLE=0
# run_pair TAG: both ranks with the environment in effect; logs in $out/TAG_rank{0,1}.log.
run_pair() {
  local tag=$1 idf
  idf=$(mktemp -u /tmp/crystal-ncclid.XXXXXX)
  NCCL_HOSTID=h0 "$build/nccl_crystal_check" 0 "$idf" "$max" >"$out/${tag}_rank0.log" 2>&1 &
  local p0=$!
  NCCL_HOSTID=h1 "$build/nccl_crystal_check" 1 "$idf" "$max" >"$out/${tag}_rank1.log" 2>&1 &
  local p1=$! rc=0
  wait $p0 || rc=$?
  wait $p1 || rc=$((rc ? rc : $?))
  return $rc
}
rc=0
run_pair crystal || rc=$?
echo "--- NCCL lines about the network and tuner (rank 0)"
grep -E "NET/Plugin|crystal:|Using network|TUNER/Plugin: Using|-> Algo" "$out/crystal_rank0.log" | sort -u | head -40 || true
echo "--- results over crystal (rank 0)"
grep -vE "NCCL (INFO|WARN)" "$out/crystal_rank0.log" | tail -60
tail -1 "$out/crystal_rank1.log"
if [ "${BASELINE:-0}" = 1 ]; then
  brc=0
  NCCL_NET_PLUGIN=none NCCL_NET=Socket NCCL_TUNER_PLUGIN=none run_pair socket || brc=$?
  echo "--- baseline: same program over NCCL's Socket transport, no plugin (rank 0)"
  grep -E "Using network" "$out/socket_rank0.log" | head -1 || true
  grep -vE "NCCL (INFO|WARN)" "$out/socket_rank0.log" | tail -60
  echo "baseline exit code $brc"
fi
echo "exit code $rc"
exit $rc
