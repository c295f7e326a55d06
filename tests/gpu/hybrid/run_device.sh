#!/usr/bin/env bash
# GPU proof of hybrid emulation, run on the GPU machine from the repository root:
#   tests/gpu/hybrid/run_device.sh CASE [hybrid_nccl options...]
# CASE: build | one (rank 0 real, 63 virtual) | two (ranks 0,1 real, verified bytes) |
#       rank5 (only rank 5 real) | split (world + 8 groups of 8, alternately) |
#       big (8192 ranks, rank 0 real) | nohost (CRYSTAL_HOST points nowhere: must fail fast) |
#       kill (the host is killed mid-collective: the real rank must fail with a clear NCCL
#       error within CRYSTAL_TIMEOUT, no hang) | unknown (a comm larger than the target, a
#       world rank the config makes virtual: init must fail at once with the host's reason) |
#       p2p (emulation.p2p_peers: P2P_N=8|64 ranks, rank P2P_RANK real; P2P_OPS: timed vs model;
#       P2P_SPLIT=G: also a split into groups of G; P2P_REAL_CHANNELS=N: real_channels) |
#       all (build, then every case above with `crystal simulate --sweep`'s prediction beside
#       each emulated time, summary in $OUT/summary.md; one device call, ~6 min) |
#       repeat (`all` RUNS times, default 3, into $OUT/run1..; $OUT/spread.md: per row the
#       median and range of the difference over the runs, and in how many it is within 2 %)
# Environment: PROTO (default Simple: NCCL_PROTO and the model's --proto; "" = NCCL's pick),
#   OPS, ITERS, WARMUP (hybrid_nccl --warmup: untimed operations before each size, default 2),
#   CRYSTAL_DATA (default none: no bytes for virtual peers; zero: GPU memsets
#   per receive, which costs the real rank time a target rank does not spend),
#   GDR (default 1: NET buffers in GPU memory, forwarded as CRYSTAL_GDR; 0 = host memory),
#   P2P (1: every case under emulation.p2p_peers; P2P_SLICE_US=X: emulation.gpu_slice_us), MPS (`two`: 1 (the default under `all`)
#   runs both processes as clients of NVIDIA MPS, see mps_start; TWO_PEER: the second real
#   rank, default 1), CRYSTAL_HOST_STATS (1: the real rank's host
#   time per operation, NCCL's and each part of the plugin's, in each log and the summary),
#   TARGET_GPU (the target's cluster.gpu.model; default: this machine's card, so the model's
#   chain kernels are the card's that runs them; hybrid64.yaml alone is an H200 cluster).
# Builds crystal + libnccl-net-crystal.so (build-device/, ignored by git) and hybrid_nccl
# against the pip NCCL 2.28.9 that PyTorch uses, then runs `crystal emulate` with
# NCCL_DEBUG=INFO. Logs and results go to $OUT (default /tmp/hybrid-out).
set -uo pipefail
case_name=${1:-one}
shift || true
OUT=${OUT:-/tmp/hybrid-out}
mkdir -p "$OUT"
B=build-device
NCCL_HOME=$(python3 -c 'import torch,os; print(os.path.realpath(os.path.dirname(torch.__file__)+"/../nvidia/nccl"))')
CUDA=${CUDA_HOME:-/usr/local/cuda}

. tests/gpu/common/build.sh
build() {
  crystal_build $B "$OUT" && nccl_program tests/gpu/hybrid/hybrid_nccl.cc $B/hybrid_nccl || return 1
  echo "built: $(ls $B/cli/crystal $B/plugin/libnccl-net-crystal.so $B/hybrid_nccl)"
}

# config with the given real ranks; P2P=1: emulation.p2p_peers (the virtual GPUs of a real
# rank's node are GPUs of its host, docs/host.md) for every case
TARGET_GPU=${TARGET_GPU-$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)}
config() {
  sed "s/real_ranks: \[0\]/real_ranks: [$1]/" tests/gpu/hybrid/hybrid64.yaml |
    if [ -n "$TARGET_GPU" ]; then sed "s/^  gpus_per_node: 8$/&\n  gpu: {model: \"$TARGET_GPU\"}/"; else cat; fi |
    if [ "$case_name" = big ]; then sed "s/nodes: 8/nodes: 1024/; s/world_size: 64/world_size: 8192/; s/dp: 8/dp: 1024/"; else cat; fi \
    >"$OUT/config-$case_name.yaml"
  [ -n "${P2P:-}" ] && echo "  p2p_peers: true" >>"$OUT/config-$case_name.yaml"
  [ -n "${P2P_SLICE_US:-}" ] && echo "  gpu_slice_us: $P2P_SLICE_US" >>"$OUT/config-$case_name.yaml"
  echo "$OUT/config-$case_name.yaml"
}

emulate() {  # emulate CONFIG SPLIT -- CMD...
  local cfg=$1 split=$2
  shift 2
  local t0=$(date +%s%N) sampler=
  # SAMPLE_THREADS=1: every thread of the run's processes (crystal emulate's and the real
  # ranks', whose command lines name hybrid_nccl) sampled every SAMPLE_EVERY_MS (100): CPU
  # share, CPUs, busy threads sharing one, run-queue wait (thread_sample.py;
  # $OUT/threads-CASE.txt, printed at the end).
  if [ "${SAMPLE_THREADS:-}" = 1 ]; then
    # NCCL names its threads ("NCCL Progress", "NCCL Service") only when asked; crystal's
    # name themselves ("crystal pacer", ...).
    export NCCL_SET_THREAD_NAME=${NCCL_SET_THREAD_NAME:-1}
    python3 tests/gpu/hybrid/thread_sample.py hybrid_nccl "$OUT/threads-$case_name.txt" \
        --every-ms "${SAMPLE_EVERY_MS:-100}" >&2 &
    sampler=$!
  fi
  # EMULATE_ARGS: more `crystal emulate` options (e.g. --no-record).
  timeout -k 5 ${EMULATE_TIMEOUT:-200} $B/cli/crystal emulate "$cfg" ${split:+--split $split} \
      --plugin "$PWD/$B/plugin/libnccl-net-crystal.so" ${EMULATE_ARGS:-} "$@"
  local rc=$?
  if [ -n "$sampler" ]; then kill -TERM "$sampler"; wait "$sampler"; fi
  echo "crystal emulate: rc=$rc wall=$(( ($(date +%s%N) - t0) / 1000000 )) ms"
  return $rc
}

# A crash report of hybrid_nccl (gpu_check.h): each frame "lib(+0xOFFSET)" named by addr2line.
resolve_crash() {  # resolve_crash LOG...
  local f line
  for f in "$@"; do
    [ -f "$f" ] && grep -q 'crash: signal' "$f" || continue
    echo "### crash in $(basename "$f")"
    sed -n '/crash: signal/,/crash: end of stack/p' "$f" | while IFS= read -r line; do
      if [[ $line =~ ^([^\(]+)\(\+(0x[0-9a-f]+)\) ]] && command -v addr2line >/dev/null; then
        echo "    $line -> $(addr2line -f -C -p -e "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" 2>&1 | head -1)"
      else
        echo "    $line"
      fi
    done
  done
}

# NVIDIA MPS for the `two` case: a control daemon of this user with its pipes and logs under
# /tmp (no GPU setting changes; stopped again by mps_stop, its log tail kept in $OUT).
# CUDA_DEVICE_MAX_CONNECTIONS (MPS_CONNECTIONS, default 16): under MPS every client's streams
# share the server's hardware queues, and each process runs persistent kernels (NCCL's, the
# P2P agent) beside the plugin's copy stream; a copy queued behind another process's kernel
# that waits for it never runs (seen with the default 8 under p2p_peers: "the GPU has not run
# it" on both ranks' copies, 2 runs of 4, 2026-12-05; 16: 4 of 4 ran; 32: 4 of 4 ran, but
# real<->real bytes took twice as long as with 8 or 16).
mps_start() {
  export CUDA_DEVICE_MAX_CONNECTIONS=${MPS_CONNECTIONS:-16}
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/crystal-mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/crystal-mps/log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  command -v nvidia-cuda-mps-control >/dev/null || { echo "MPS: no nvidia-cuda-mps-control" >&2; return 1; }
  nvidia-cuda-mps-control -d || { echo "MPS: the control daemon did not start" >&2; return 1; }
  echo "MPS: control daemon started"
}
mps_stop() {
  echo quit | nvidia-cuda-mps-control
  sleep 1
  tail -n 20 "$CUDA_MPS_LOG_DIRECTORY"/control.log "$CUDA_MPS_LOG_DIRECTORY"/server.log >"$OUT/mps-logs.txt" 2>&1
  echo "MPS: stopped (logs: $OUT/mps-logs.txt)"
}

PROTO=${PROTO-Simple}
[ -n "$PROTO" ] && export NCCL_PROTO=$PROTO
export CRYSTAL_DATA=${CRYSTAL_DATA:-none}
export CRYSTAL_GDR=${GDR:-1}
# Every case with its prediction; appends to $OUT/summary.md. Each case has its own time
# limit, so one that hangs cannot take the others with it.
run_all() {
  local S=$OUT/summary.md ops=${OPS:-allreduce,allgather,reducescatter,broadcast,reduce,sendrecv,alltoall}
  local sizes="--min 1024 --max 1073741824 --step 4" it="--iters ${ITERS:-20}${WARMUP:+ --warmup $WARMUP}"
  local self=$PWD/tests/gpu/hybrid/run_device.sh
  local sweep=(-b 1K -e 1G -f 4 -n "${ITERS:-20}")  # -n: per operation of the same loop
  {
    echo "# Hybrid emulation vs crystal simulate ($(date -u +%FT%TZ))"
    echo
    echo "Target GPU (cluster.gpu.model): ${TARGET_GPU:-H200, the config default}; this machine: $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)."
    echo
    echo "NCCL_PROTO=${PROTO:-unset (NCCL picks)}, CRYSTAL_DATA=$CRYSTAL_DATA, CRYSTAL_GDR=$CRYSTAL_GDR; emulated = hybrid_nccl's"
    echo "average over ${ITERS:-20} iterations after ${WARMUP:-2} warm-ups on the real rank; model ="
    echo "\`crystal simulate CONFIG --sweep -n ${ITERS:-20}\` for the same communicator; diff = (emulated - model) / model."
    echo "after the first: the mean of the operations after the loop's first (hybrid_nccl's after_first_us;"
    echo "the first follows the program's wait for its stream and carries its first call with the GPU idle)"
    echo "beside the model's time_after_first, and their diff."
    echo "host us: the program's CPU time a call (hybrid_nccl's host_us); \"host-bound\": it is at"
    echo "least 0.9 of the emulated time, so the row times the emulating machine's CPU (compare.py)."
    echo
  } >"$S"
  local t_all=$(date +%s)
  run_case() {  # run_case NAME LIMIT_S ARGS...
    local name=$1 limit=$2; shift 2
    local t0=$(date +%s%N)
    EMULATE_TIMEOUT=$limit timeout -k 5 $((limit + 20)) "$self" "$name" "$@" >"$OUT/$name.txt" 2>&1
    local rc=$?
    echo "| $name | rc $rc | $(( ($(date +%s%N) - t0) / 1000000 )) ms | $(grep -E 'init world|VERIFY|verify rank|NCCL error|kill:|nohost:|unknown:|no completion|crash:|P2P pacing of comm|NOT FAITHFUL' "$OUT/$name.txt" | tr '\n' ';' | cut -c1-300) |" >>"$OUT/cases.md"
    resolve_crash "$OUT/$name.txt" "$OUT/$name"-*.txt >>"$OUT/crashes.md"
  }
  rm -f "$OUT/cases.md" "$OUT/crashes.md"
  local cfg64 cfg8k
  cfg64=$(case_name=one config 0); cfg8k=$(case_name=big config 0)
  model() {  # model NAME CONFIG SWEEP-ARGS...: with --proto if this crystal has it
    local name=$1 cfg=$2; shift 2
    $B/cli/crystal simulate "$cfg" --sweep "$@" ${PROTO:+--proto $PROTO} --json "$OUT/$name.json" \
      >"$OUT/$name.txt" 2>&1 && return 0
    echo "(model $name: no --proto in this crystal; NCCL's own protocol choice)" >>"$S"
    $B/cli/crystal simulate "$cfg" --sweep "$@" --json "$OUT/$name.json" >>"$OUT/$name.txt" 2>&1
  }
  # Broadcast (root 0) at the real rank's place (--rank): its own completion, not the last's.
  model model-64 "$cfg64" --op "$ops" "${sweep[@]}" --ranks 64 --rank 0
  model model-64-r5 "$cfg64" --op "$ops" "${sweep[@]}" --ranks 64 --rank 5
  model model-8 "$cfg64" --op "$ops" "${sweep[@]}" --ranks 8 --rank 0
  model model-8192 "$cfg8k" --op allreduce -b 1G -e 1G --ranks 8192
  run_case one 120 --ops "$ops" $sizes $it
  run_case rank5 60 --ops allreduce,allgather,reducescatter,broadcast,reduce $sizes $it
  MPS=${MPS-1} run_case two 60 --ops allreduce,allgather,sendrecv --min 1024 --max 67108864 --step 16 $it
  run_case split 60 --ops allreduce,allgather --min 1024 --max 67108864 --step 16 $it
  run_case big 60 --ops allreduce --min 1073741824 --max 1073741824 --iters 2
  run_case kill 45
  run_case unknown 70
  run_case nohost 20
  {
    echo "## Cases"
    echo
    echo "| case | exit | wall | key lines |"
    echo "|---|---|---|---|"
    cat "$OUT/cases.md"
    echo
    if [ -s "$OUT/crashes.md" ]; then
      echo "## Crashes"
      echo
      cat "$OUT/crashes.md"
      echo
    fi
    echo "## Emulated vs model (us)"
    echo
    echo "| case | comm | op | bytes | emulated | model | model algo/proto/ch | diff % | after the first: emulated / model | diff % | host us | note |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
    python3 tests/gpu/hybrid/compare.py one "$OUT/one.txt" world="$OUT/model-64.json"
    python3 tests/gpu/hybrid/compare.py rank5 "$OUT/rank5.txt" world="$OUT/model-64-r5.json"
    python3 tests/gpu/hybrid/compare.py two "$OUT/two-rank0.txt" world="$OUT/model-64.json"
    # The same rows against one real rank's (`one`, same target, same peer of send/recv).
    python3 tests/gpu/hybrid/compare.py two-vs-one "$OUT/two-rank0.txt" world="run:$OUT/one.txt"
    python3 tests/gpu/hybrid/compare.py split "$OUT/split.txt" world="$OUT/model-64.json" split="$OUT/model-8.json"
    python3 tests/gpu/hybrid/compare.py big "$OUT/big.txt" world="$OUT/model-8192.json"
    echo
    echo
    # NCCL's "Channel xx/y : a[g] -> b[g] [send|receive] via NET/crystal/d/GDRDMA" lines.
    echo "NET channels with GDRDMA / all NET channel lines, per case:"
    for c in one rank5 two split big; do
      echo "- $c: $(cat "$OUT"/nccl-$c.*.log 2>/dev/null | grep -c 'via NET/crystal/[0-9]*/GDRDMA') / $(cat "$OUT"/nccl-$c.*.log 2>/dev/null | grep -c 'via NET/crystal/')"
    done
    if [ "${CRYSTAL_HOST_STATS:-0}" = 1 ]; then
      # plugin/app_call_stats.h: each comm destroy's line, per case.
      echo
      echo "Host time per operation (CRYSTAL_HOST_STATS), per case:"
      for c in one rank5 two split big; do
        grep -h "crystal: host time on thread" "$OUT/$c.txt" "$OUT/$c"-*.txt 2>/dev/null | sed "s/^/- $c: /"
      done
    fi
    echo "Total $(( $(date +%s) - t_all )) s after the build."
  } >>"$S"
  cat "$S"
}

export NCCL_DEBUG=${NCCL_DEBUG:-INFO}
export NCCL_DEBUG_SUBSYS=${NCCL_DEBUG_SUBSYS:-INIT,NET,BOOTSTRAP,GRAPH,ENV}
export NCCL_DEBUG_FILE="$OUT/nccl-$case_name.%h.%p.log"
export LD_LIBRARY_PATH="$NCCL_HOME/lib:${LD_LIBRARY_PATH:-}"
export ID_FILE="$OUT/id-$case_name.bin"
rm -f "$ID_FILE"
[ -x $B/hybrid_nccl ] && [ -x $B/cli/crystal ] || build || exit 1
P=$PWD/$B/hybrid_nccl
case "$case_name" in
  build) build ;;
  repeat) # One run of `all` moves 1-3 % from the next at 1-16 MiB on these machines: the
         # median of several, with its range, says what a single summary cannot.
         for i in $(seq "${RUNS:-3}"); do
           OUT=$OUT/run$i "$PWD/tests/gpu/hybrid/run_device.sh" all >"$OUT/all-$i.txt" 2>&1
           echo "repeat: run $i of ${RUNS:-3}: rc=$? ($(grep -c '^| ' "$OUT/run$i/summary.md" 2>/dev/null || echo 0) table lines)"
         done
         python3 tests/gpu/hybrid/spread.py "$OUT"/run*/summary.md >"$OUT/spread.md" && cat "$OUT/spread.md" ;;
  one)   emulate "$(config 0)" "" -- env RANK=0 NRANKS=64 "$P" "$@" ;;
  rank5) emulate "$(config 5)" "" -- env RANK=5 NRANKS=64 ID_ROOT=1 "$P" "$@" ;;
  big)   emulate "$(config 0)" "" -- env RANK=0 NRANKS=8192 "$P" "$@" ;;
  nohost) t0=$(date +%s%N)
         CRYSTAL_HOST=127.0.0.1:1 CRYSTAL_TIMEOUT=3 LD_PRELOAD=$PWD/$B/plugin/libnccl-net-crystal.so \
           NCCL_NET_PLUGIN=crystal NCCL_NET=crystal RANK=0 NRANKS=64 timeout 60 "$P" "$@"
         echo "nohost: rc=$? after $(( ($(date +%s%N) - t0) / 1000000 )) ms" ;;
  split) emulate "$(config 0)" block:8 -- env RANK=0 NRANKS=64 "$P" --split 8 "$@" ;;
  unknown) # Peers the emulation does not know: a 128-rank comm on the 64-rank target, and
         # world rank 3 taken by a process where the config makes only rank 0 real. Each must
         # fail ncclCommInitRank with an NCCL error and the host's line, within seconds.
         cfg=$(config 0) ok=1
         for c in "128 0" "64 3"; do
           set -- $c; t0=$(date +%s%N); log=$OUT/unknown-$1-$2.txt
           EMULATE_TIMEOUT=30 emulate "$cfg" "" -- env RANK=$2 NRANKS=$1 ID_ROOT=1 "$P" \
             --ops allreduce --min 1048576 --max 1048576 --iters 1 >"$log" 2>&1
           rc=$?; ms=$(( ($(date +%s%N) - t0) / 1000000 ))
           line=$(grep -h -o "refused COMM_INIT: .*" "$log" "$OUT"/nccl-unknown.*.log 2>/dev/null | head -1 | cut -c1-220)
           echo "unknown: nranks $1 rank $2: rc=$rc after $ms ms; ${line:-NO REFUSAL LINE}"
           grep -q "NCCL error\|returning NCCL error" "$log" || echo "unknown: nranks $1 rank $2: no NCCL error in the program's output"
           [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ -n "$line" ] || ok=0
         done
         [ $ok = 1 ] ;;
  two)   # TWO_PEER (default 1): the second real rank; MPS=1: both processes share one CUDA
         # context through NVIDIA MPS (mps_start), so their kernels run at once instead of
         # taking turns in the driver's time slices.
         q=${TWO_PEER:-1} mps=0
         if [ "${MPS:-0}" = 1 ]; then
           if mps_start; then mps=1; else echo "MPS unavailable: the two processes take turns on the GPU"; fi
         fi
         emulate "$(config 0,$q)" "" -- bash -c "
           RANK=0 NRANKS=64 ID_ROOT=1 REAL_PEER=$q $P $* > $OUT/two-rank0.txt 2>&1 & a=\$!
           RANK=$q NRANKS=64 ID_ROOT=0 REAL_PEER=0 $P $* > $OUT/two-rank$q.txt 2>&1 & b=\$!
           wait \$a; ra=\$?; wait \$b; rb=\$?; exit \$((ra|rb))"
         rc=$?; tail -n 30 "$OUT/two-rank0.txt" "$OUT/two-rank$q.txt"
         [ $mps = 1 ] && mps_stop
         exit $rc ;;
  kill)  # allreduce 64 MiB for a long time; the host dies after the first results
         cfg=$(config 0); log=$OUT/kill-rank0.txt; rm -f "$log"
         CRYSTAL_TIMEOUT=${CRYSTAL_TIMEOUT:-30}  # emulation.timeout_s of hybrid64.yaml
         $B/cli/crystal emulate "$cfg" --plugin "$PWD/$B/plugin/libnccl-net-crystal.so" -- \
           bash -c "RANK=0 NRANKS=64 WAIT_TIMEOUT=60 $P --ops allreduce --min 67108864 \
                    --max 67108864 --iters 100000 > $log 2>&1; echo rc=\$? >> $log" \
           > "$OUT/kill-emulate.txt" 2>&1 & epid=$!
         for i in $(seq 600); do grep -q "^comm" "$log" 2>/dev/null && break; sleep 0.1; done
         sleep 2  # warm-ups done, measured iterations running
         t0=$(date +%s%N); kill -9 $epid; echo "host (crystal emulate, pid $epid) killed"
         for i in $(seq 300); do grep -q "^rc=" "$log" 2>/dev/null && break; sleep 0.1; done
         ms=$(( ($(date +%s%N) - t0) / 1000000 ))
         tail -n 5 "$log"
         resolve_crash "$log"
         rc=$(sed -n 's/^rc=//p' "$log")
         echo "kill: program rc=${rc:-none (still running: HANG)} ${ms} ms after the host died (CRYSTAL_TIMEOUT=$CRYSTAL_TIMEOUT)"
         [ -n "$rc" ] && [ "$rc" != 0 ] ;;
  p2p)   # emulation.p2p_peers (docs/host.md "Virtual GPUs of a real rank's node"): rank
         # P2P_RANK (default 0) of P2P_N ranks (8 = one node, or 64) is real and its node's
         # virtual ranks are GPUs of its host, connected over P2P with memory from the rank's
         # process (CRYSTAL_P2P_POOL, 64,64 by default) and paced by the ring model
         # (CRYSTAL_P2P_PACE=0: free-running). With P2P_OPS (e.g. allreduce,allgather) the
         # case runs those ops from 1 MiB to 1 GiB and prints them beside `crystal simulate`.
         # CRYSTAL_P2P_TRACE=PREFIX: per-event trace of the pacing (p2p_trace.py reads it).
         # P2P_SPLIT=G: also a split into groups of G consecutive ranks (`--split block:G`),
         # used alternately with the world, each beside its own model.
         n=${P2P_N:-8}; r=${P2P_RANK:-0}; cfg=$OUT/config-p2p.yaml; g=${P2P_SPLIT:-}
         # The target's GPU is this machine's card, as config() makes it for the other cases
         # (the model's chain kernels are the card's that runs them).
         sed "s/real_ranks: \[0\]/real_ranks: [$r]/" tests/gpu/hybrid/hybrid64.yaml |
           if [ -n "$TARGET_GPU" ]; then sed "s/^  gpus_per_node: 8$/&\n  gpu: {model: \"$TARGET_GPU\"}/"; else cat; fi |
           if [ "$n" = 8 ]; then sed "s/nodes: 8/nodes: 1/; s/world_size: 64/world_size: 8/; s/dp: 8/dp: 1/"; else cat; fi >"$cfg"
         echo "  p2p_peers: true" >>"$cfg"
         # P2P_REAL_CHANNELS=N: emulation.real_channels (NCCL_MIN_NCHANNELS above the target's).
         [ -n "${P2P_REAL_CHANNELS:-}" ] && echo "  real_channels: $P2P_REAL_CHANNELS" >>"$cfg"
         # P2P_GPU_GBPS=X: emulation.gpu_channel_GBps (ring_fold.h); a large X keeps rings on
         # the target's channel count (R's kernel measured as the target's would run).
         [ -n "${P2P_GPU_GBPS:-}" ] && echo "  gpu_channel_GBps: $P2P_GPU_GBPS" >>"$cfg"
         # P2P_SLICE_US=X: emulation.gpu_slice_us (ring_fold.h; 0: the channels by bytes alone).
         [ -n "${P2P_SLICE_US:-}" ] && echo "  gpu_slice_us: $P2P_SLICE_US" >>"$cfg"
         if [ -z "${P2P_OPS:-}" ]; then
           emulate "$cfg" "" -- env RANK=$r NRANKS=$n ID_ROOT=1 "$P" "$@"
         else
           emulate "$cfg" "${g:+block:$g}" -- env RANK=$r NRANKS=$n ID_ROOT=1 "$P" --ops "$P2P_OPS" \
             --min 1048576 --max 1073741824 --step 4 --iters ${ITERS:-20} ${WARMUP:+--warmup $WARMUP} ${g:+--split $g} "$@" |
             tee "$OUT/p2p.txt"
           rc=${PIPESTATUS[0]}
           $B/cli/crystal simulate "$cfg" --sweep --op "$P2P_OPS" -b 1M -e 1G -f 4 --ranks $n \
             -n ${ITERS:-20} --rank $r ${PROTO:+--proto $PROTO} --json "$OUT/model-p2p.json" >"$OUT/model-p2p.txt" 2>&1
           [ -n "$g" ] && $B/cli/crystal simulate "$cfg" --sweep --op "$P2P_OPS" -b 1M -e 1G -f 4 \
             -n ${ITERS:-20} --ranks $g --rank $((r % g)) ${PROTO:+--proto $PROTO} --json "$OUT/model-p2p-split.json" \
             >"$OUT/model-p2p-split.txt" 2>&1
           echo "| case | comm | op | bytes | emulated | model | model algo/proto/ch | diff % | after the first: emulated / model | diff % | host us | note |"
           echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
           python3 tests/gpu/hybrid/compare.py p2p "$OUT/p2p.txt" world="$OUT/model-p2p.json" \
             ${g:+split="$OUT/model-p2p-split.json"}
           exit $rc
         fi ;;
  all)   run_all ;;
  *) echo "unknown case $case_name" >&2; exit 2 ;;
esac
