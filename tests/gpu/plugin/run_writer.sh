#!/usr/bin/env bash
# GPU check of the plugin's GPU-writer kernel alone (device machine; no NCCL run): builds
# gpu_writer_check (gpu_writer_check.cc) and runs it once per setting of the kernel's blocks
# and chunk: exact copies, fills and releases, then its copy rate for 32 KiB-1 MiB steps beside
# the copy engines'. Logs in $OUT/writer-B-C.log; a summary on stdout.
# Usage: tests/gpu/plugin/run_writer.sh ["BLOCKS:CHUNK" ...]
#   (default: 1:65536 4:65536 8:65536 16:65536 8:32768 8:4096; 8:4096 also runs the kernel's
#   larger chunks for a batch of more than 65535)
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${OUT:-/tmp/crystal-gpu-writer}
mkdir -p "$out"
. tests/gpu/plugin/build_checks.sh
build_checks writer gpu_writer_check
settings=("$@")
[ ${#settings[@]} -gt 0 ] || settings=(1:65536 4:65536 8:65536 16:65536 8:32768 8:4096)
rc=0
for s in "${settings[@]}"; do
  b=${s%%:*} c=${s##*:} log="$out/writer-$b-$c.log"
  src=0
  CRYSTAL_GPU_WRITER_BLOCKS=$b CRYSTAL_GPU_COPY_CHUNK=$c timeout 120 "$build/gpu_writer_check" >"$log" 2>&1 || src=$?
  echo "== blocks $b chunk $c: exit $src"
  grep -E "^(rate|FAIL|PASS|writer counts)" "$log" || tail -5 "$log"
  [ $src -eq 0 ] || rc=1
done
exit $rc
