#!/usr/bin/env python3
"""Compare NCCL's protocol/algorithm choice per collective and size with the crystal tuner's.

usage: compare_choices.py NRANKS NCCL_LOG...
NCCL prints (on rank 0 only; NCCL_DEBUG_SUBSYS includes TUNING)
  "AllReduce: 1024 Bytes -> Algo RING proto LL channel{Lo..Hi}={0..0}"
and the plugin's tuner, once per (function, size), through the same logger
  "crystal: tuner comm 0x..: AllReduce: 1024 Bytes -> Algo RING proto LL channels 1".
NCCL prints count x type size (per rank for AllGather/ReduceScatter); the tuner gets
NCCL's nBytes = that x NRANKS for those two (enqueue.cc: ncclFuncMaxSendRecvCount). Every
NCCL choice whose (function, size) the tuner logged must name the same algorithm and
protocol. Prints one line per size and a summary; exit 1 on any mismatch or if nothing pairs.
"""
import re
import sys

NCCL = re.compile(r"\b(Broadcast|Reduce|AllGather|ReduceScatter|AllReduce): "
                  r"(\d+) Bytes -> Algo (\w+) proto (\w+) channel\{Lo\.\.Hi\}=\{(\d+)\.\.(\d+)\}")
TUNER = re.compile(r"tuner comm 0x[0-9a-f]+: (\w+): (\d+) Bytes -> Algo (\w+) proto (\w+) channels (\S+)")


def main():
    nranks = int(sys.argv[1])
    nccl, tuner = {}, {}
    for path in sys.argv[2:]:
        for line in open(path, errors="replace"):
            m = TUNER.search(line)
            if m:
                tuner[(m.group(1), int(m.group(2)))] = (m.group(3), m.group(4), m.group(5))
                continue
            m = NCCL.search(line)
            if m:
                lo, hi = int(m.group(5)), int(m.group(6))
                per_rank = m.group(1) in ("AllGather", "ReduceScatter")
                nbytes = int(m.group(2)) * (nranks if per_rank else 1)
                nccl[(m.group(1), nbytes)] = (m.group(3), m.group(4), hi - lo + 1)
    bad = paired = 0
    for key in sorted(nccl):
        if key not in tuner:
            continue
        paired += 1
        n, t = nccl[key], tuner[key]
        ok = n[0] == t[0] and n[1] == t[1]
        bad += not ok
        print(f"{'ok ' if ok else 'BAD'} {key[0]:>13} {key[1]:>11} B: NCCL {n[0]}/{n[1]}/{n[2]}ch"
              f"  tuner {t[0]}/{t[1]}/{t[2]}ch")
    print(f"compare_choices: {paired} sizes paired, {bad} mismatches, "
          f"{len(nccl) - paired} NCCL choices without a tuner line")
    return 1 if bad or paired == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
