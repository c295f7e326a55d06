#!/usr/bin/env bash
# GPU proof that an unmodified PyTorch 2.11 training script runs as a few real ranks of a
# large job (docs/store.md), run on the GPU machine from the repository root:
#   tests/gpu/pytorch/run_device.sh [CASE...]     (default: build r0of64 r0r32of64 r0of8192 nokey)
# CASE: build     | crystal + libnccl-net-crystal.so in build-device/
#       r0of64    | train_gpt.py as rank 0 of 64 (TP8 DP8), one process
#       r0r32of64 | as ranks 0 and 32 of 64: two processes on the one GPU
#       r0of8192  | as rank 0 of 8192 (TP8 DP1024)
#       nokey     | a script that waits for a store key no rank writes: must fail with the
#                   store's message within --store-timeout (10 s), not hang
# Each case: `crystal emulate CONFIG --run-dir $OUT/run-CASE -- python3 train_gpt.py` plus
# `crystal simulate CONFIG` for the same target. Logs go to $OUT (default /tmp/pytorch-out);
# $OUT/summary.md holds per real rank: steady-state iteration time, peak memory
# (torch.cuda.max_memory_allocated), losses, NCCL kernel time and its exposed part in one
# profiled step, beside the simulation; $OUT/trace-CASE/rank*.json are that step's Perfetto
# timelines. crystal emulate's own end-of-run report (docs/emulate.md "Report") is printed
# and kept: $OUT/run-CASE/report.json, timeline.json (Perfetto: real ranks beside virtual
# peers), rank*.pyrun.json, rank*.kineto.json, crystal-record.*.jsonl.
set -uo pipefail
OUT=${OUT:-/tmp/pytorch-out}
mkdir -p "$OUT"
B=build-device
here=tests/gpu/pytorch
NCCL_HOME=$(python3 -c 'import torch,os; print(os.path.realpath(os.path.dirname(torch.__file__)+"/../nvidia/nccl"))')

. tests/gpu/common/build.sh
build() {
  crystal_build $B "$OUT" || return 1
  echo "built: $(ls $B/cli/crystal $B/plugin/libnccl-net-crystal.so)"
}

config() {  # config NAME WORLD REAL_RANKS
  local f="$OUT/config-$1.yaml"
  sed "s/real_ranks: \[0\]/real_ranks: [$3]/" $here/gpt64.yaml |
    if [ "$2" = 8192 ]; then sed "s/nodes: 8$/nodes: 1024/; s/world_size: 64/world_size: 8192/; s/dp: 8}/dp: 1024}/"; else cat; fi >"$f"
  echo "$f"
}

run_case() {  # run_case NAME WORLD REAL_RANKS
  local name=$1 world=$2 real=$3
  local cfg; cfg=$(config "$name" "$world" "$real")
  local t0=$(date +%s%N)
  NCCL_DEBUG_FILE="$OUT/nccl-$name.%h.%p.log" TRACE_DIR="$OUT/trace-$name" \
    timeout -k 5 ${EMULATE_TIMEOUT:-150} $B/cli/crystal emulate "$cfg" --split stride:8,block:8 \
      --plugin "$PWD/$B/plugin/libnccl-net-crystal.so" --run-dir "$OUT/run-$name" -- \
      python3 $here/train_gpt.py --tp 8 >"$OUT/$name.txt" 2>&1
  local rc=$?
  local wall=$(( ($(date +%s%N) - t0) / 1000000 ))
  echo "$name: rc=$rc wall=${wall} ms"
  grep -E "^(INIT|RESULT|COMM)|crystal (emulate|error)|Error|error:" "$OUT/$name.txt" | head -20
  # crystal emulate's report: from its header line to the "wrote" line (or "no report").
  sed -n '/^crystal emulate: report/,/^crystal emulate: wrote/p; /^crystal emulate: no report/p' \
    "$OUT/$name.txt" | tee "$OUT/report-$name.txt"
  timeout 60 $B/cli/crystal simulate "$cfg" --json "$OUT/simulate-$name.json" >"$OUT/simulate-$name.txt" 2>&1
  {
    echo "## $name (world $world, real ranks [$real]): rc=$rc, wall ${wall} ms"
    echo
    echo '```'
    grep -E "^(INIT|RESULT|COMM)" "$OUT/$name.txt"
    echo '```'
    echo "Perfetto timelines of one steady step per real rank: trace-$name/rank*.json"
    echo
    echo "crystal emulate's report (run-$name/report.json, run-$name/timeline.json):"
    echo '```'
    cat "$OUT/report-$name.txt"
    echo '```'
    echo
    echo "crystal simulate (same target):"
    echo '```'
    head -30 "$OUT/simulate-$name.txt"
    echo '```'
    echo
  } >>"$OUT/summary.md"
  return $rc
}

nokey() {
  local cfg; cfg=$(config nokey 64 5)
  cat >"$OUT/nokey.py" <<'PY'
import datetime, torch.distributed as dist
dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=120))
store = dist.distributed_c10d._get_default_store()
store.get("no_rank_writes_this")  # waits; the emulation's store must fail it
PY
  local t0=$(date +%s%N)
  timeout -k 5 60 $B/cli/crystal emulate "$cfg" --store-timeout 10 \
    --plugin "$PWD/$B/plugin/libnccl-net-crystal.so" --run-dir "$OUT/run-nokey" -- python3 "$OUT/nokey.py" >"$OUT/nokey.txt" 2>&1
  local rc=$?
  local wall=$(( ($(date +%s%N) - t0) / 1000000 ))
  echo "nokey: rc=$rc wall=${wall} ms (expected: rc 1, ~10 s)"
  grep -E "crystal (error|emulate)|Error" "$OUT/nokey.txt" | head -8
  { echo "## nokey: rc=$rc, wall ${wall} ms"; echo '```'; grep -E "crystal (error|emulate)|Error" "$OUT/nokey.txt" | head -8; echo '```'; } >>"$OUT/summary.md"
  [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ] && [ $wall -lt 40000 ]
}

export NCCL_DEBUG=${NCCL_DEBUG:-INFO}
export NCCL_DEBUG_SUBSYS=${NCCL_DEBUG_SUBSYS:-INIT,NET,ENV}
export LD_LIBRARY_PATH="$NCCL_HOME/lib:${LD_LIBRARY_PATH:-}"
cases=("$@")
[ ${#cases[@]} -eq 0 ] && cases=(build r0of64 r0r32of64 r0of8192 nokey)
echo "# PyTorch under crystal emulate ($(date -u +%FT%TZ))" >"$OUT/summary.md"
python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), torch.cuda.get_device_name())' | tee -a "$OUT/summary.md"
rc_all=0
for c in "${cases[@]}"; do
  if [ "$c" != build ] && ! [ -x $B/cli/crystal ]; then build || exit 1; fi
  case "$c" in
    build)     build || exit 1; r=0 ;;
    r0of64)    run_case r0of64 64 0; r=$? ;;
    r0r32of64) run_case r0r32of64 64 "0, 32"; r=$? ;;
    r0of8192)  run_case r0of8192 8192 0; r=$? ;;
    nokey)     nokey; r=$? ;;
    *) echo "unknown case $c" >&2; exit 2 ;;
  esac
  rc_all=$(( rc_all | (r != 0) ))
done
exit $rc_all
