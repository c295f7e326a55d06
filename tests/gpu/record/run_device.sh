#!/usr/bin/env bash
# GPU proof of `crystal record` on a PyTorch program (docs/record.md, issue 7), run on the
# GPU machine from the repository root:
#   tests/gpu/record/run_device.sh
# Builds crystal + libnccl-net-crystal.so (build-device/), then records
# tests/gpu/pytorch/train_gpt.py (a 4-layer GPT, TP8 x DP8, unmodified) as rank 0 of a
# 64-rank job: `crystal record gpt64.yaml -o graph.json --json -- crystal emulate gpt64.yaml
# -- python3 train_gpt.py`. python/crystal_site (injected through PYTHONPATH) traces
# iteration 2 with torch.profiler and writes rank0.pyrun.json; crystal record builds the
# 64-rank graph from the trace and the allocator's peak. compare.py then checks the graph's
# compute segments against the trace's kernel times (2 %) and its peak memory against
# torch.cuda.max_memory_allocated (exact). Logs and results in $OUT (default
# /tmp/record-out): summary.md, record.txt, compare.txt, graph.json, run/.
set -uo pipefail
OUT=${OUT:-/tmp/record-out}
mkdir -p "$OUT"
B=build-device
here=tests/gpu/record
NCCL_HOME=$(python3 -c 'import torch,os; print(os.path.realpath(os.path.dirname(torch.__file__)+"/../nvidia/nccl"))')

. tests/gpu/common/build.sh
build() {
  crystal_build $B "$OUT" crystal_python_site || return 1
  echo "built: $(ls $B/cli/crystal $B/plugin/libnccl-net-crystal.so $B/python/crystal_site/sitecustomize.py)"
}

export LD_LIBRARY_PATH="$NCCL_HOME/lib:${LD_LIBRARY_PATH:-}"
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
echo "# crystal record of a PyTorch step ($(date -u +%FT%TZ))" >"$OUT/summary.md"
python3 -c 'import torch; print("torch", torch.__version__, "nccl", torch.cuda.nccl.version(), torch.cuda.get_device_name())' | tee -a "$OUT/summary.md"
build || exit 1

cfg=tests/gpu/pytorch/gpt64.yaml
plugin="$PWD/$B/plugin/libnccl-net-crystal.so"
rm -rf "$OUT/run"
t0=$(date +%s%N)
CRYSTAL_PROFILE_WARMUP=2 CRYSTAL_PROFILE_STEPS=1 \
  timeout -k 5 ${RECORD_TIMEOUT:-150} $B/cli/crystal record $cfg -o "$OUT/graph.json" --json \
    --dir "$OUT/run" --plugin "$plugin" -- \
    $B/cli/crystal emulate $cfg --split stride:8,block:8 --plugin "$plugin" -- \
      python3 tests/gpu/pytorch/train_gpt.py --tp 8 >"$OUT/record.txt" 2>&1
rc=$?
wall=$(( ($(date +%s%N) - t0) / 1000000 ))
echo "record: rc=$rc wall=${wall} ms"
grep -E "^(RESULT|STEP)|pyrun|kineto|graph of|note:|crystal (record|error|emulate)|warning|Error" "$OUT/record.txt" | head -40
python3 $here/compare.py "$OUT/graph.json" "$OUT/run" 0 "$OUT/record.txt" >"$OUT/compare.txt" 2>&1
crc=$?
cat "$OUT/compare.txt"
$B/cli/crystal graph inspect "$OUT/graph.json" --rank 0 >"$OUT/inspect.txt" 2>&1
{
  echo
  echo "## record: rc=$rc, wall ${wall} ms (build excluded)"
  echo '```'
  grep -E "^RESULT|pyrun|kineto|graph of|note:" "$OUT/record.txt" | head -20
  echo '```'
  echo "## compare.py (rc=$crc)"
  echo '```'
  cat "$OUT/compare.txt"
  echo '```'
  echo "## crystal graph inspect graph.json --rank 0"
  echo '```'
  head -30 "$OUT/inspect.txt"
  echo '```'
} >>"$OUT/summary.md"
[ $rc -eq 0 ] && [ $crc -eq 0 ]
