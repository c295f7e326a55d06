#!/usr/bin/env python3
"""Compare NCCL's printed tuning table / choices with our model's (model_tuning_table).

usage: compare.py NCCL_RANK0_LOG MODEL_TABLE_OUTPUT
Cells NCCL enables (bandwidth > 0) must match to NCCL's print precision (0.1); exit 1
otherwise. Also compares the channel count and the per-size AllReduce choices.
"""
import re
import sys

CELL = re.compile(r"\s*([0-9.]+)/\s*([0-9.]+)\s*")


def tables(lines):
    """{(func, algo, proto): (lat, bw)} from NCCL-layout table lines."""
    out, algos = {}, []
    protos = ["LL", "LL128", "Simple"]
    for line in lines:
        if "Algorithm   |" in line:
            algos = [a.strip() for a in line.split("|")[1:] if a.strip()]
            continue
        m = re.search(r"(Broadcast|Reduce|AllGather|ReduceScatter|AllReduce) \|(.*)$", line)
        if not m or not algos:
            continue
        cells = [c for c in m.group(2).split("|") if c.strip()]
        for i, c in enumerate(cells):
            mm = CELL.fullmatch(c)
            if mm and i // 3 < len(algos):
                out[(m.group(1), algos[i // 3], protos[i % 3])] = (float(mm.group(1)),
                                                                  float(mm.group(2)))
    return out


def main():
    nccl_lines = open(sys.argv[1]).read().splitlines()
    ours_lines = open(sys.argv[2]).read().splitlines()
    nccl, ours = tables(nccl_lines), tables(ours_lines)
    bad = 0
    for key, (lat, bw) in sorted(nccl.items()):
        if bw <= 0:
            continue
        o = ours.get(key)
        ok = o is not None and abs(o[0] - lat) <= 0.051 and abs(o[1] - bw) <= 0.051
        bad += not ok
        print(f"{'ok ' if ok else 'BAD'} {key[0]:>13} {key[1]:>6} {key[2]:>6}: "
              f"nccl {lat:6.1f}/{bw:6.1f}  ours {o[0] if o else -1:6.1f}/{o[1] if o else -1:6.1f}")
    for key, (lat, bw) in sorted(ours.items()):
        if bw > 0 and nccl.get(key, (0, 0))[1] <= 0:
            bad += 1
            print(f"BAD {key}: we enable it, NCCL does not")
    nc = [l for l in nccl_lines if "coll channels" in l]
    oc = [l for l in ours_lines if "coll channels" in l]
    n_nccl = int(re.search(r"(\d+) coll channels", nc[0]).group(1)) if nc else -1
    n_ours = int(re.search(r"(\d+) coll channels", oc[0]).group(1)) if oc else -2
    print(f"{'ok ' if n_nccl == n_ours else 'BAD'} channels: nccl {n_nccl} ours {n_ours}")
    bad += n_nccl != n_ours
    pick = re.compile(r"AllReduce: (\d+) Bytes -> Algo (\w+) proto (\w+) channel\{Lo..Hi\}=\{(\d+)..(\d+)\}")
    seen = {}
    for l in nccl_lines:
        m = pick.search(l)
        if m:
            seen[int(m.group(1))] = (m.group(2).lower(), m.group(3).lower(),
                                     int(m.group(5)) - int(m.group(4)) + 1)
    mine = re.compile(r"AllReduce: (\d+) Bytes -> Algo (\w+) proto (\w+) channels (\d+)")
    for l in ours_lines:
        m = mine.search(l)
        if m and int(m.group(1)) in seen:
            o = (m.group(2).lower(), m.group(3).lower(), int(m.group(4)))
            ok = o == seen[int(m.group(1))]
            bad += not ok
            print(f"{'ok ' if ok else 'BAD'} AllReduce {m.group(1)} B: nccl {seen[int(m.group(1))]} ours {o}")
    print("MATCH" if bad == 0 else f"{bad} MISMATCHES")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
