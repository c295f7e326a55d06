#!/usr/bin/env python3
"""Where a paced P2P operation's time goes, from a pacing agent's trace.

    python3 tests/gpu/hybrid/p2p_trace.py PREFIX.<pid>.<comm>.csv [--each]

The trace (CRYSTAL_P2P_TRACE=PREFIX, docs/plugin.md "P2P pacing trace") has one row per event
of the agent: S/D an operation's start/end as the pacing thread saw its stream events, o a
counter R's kernel moved (CPU time, and gpu_ns when the agent kernel saw it), r a value the
CPU released for R's own counter (due_ns: when the model made it due), g the agent kernel
stored it (gpu_ns). Per (collective, bytes), averaged over its operations (--each: every
operation), it prints in microseconds:
  op          S to D (the pacing thread's view of the stream; includes its polling)
  gpu_span    first to last counter move of R's kernel the agent saw in the operation
  model       first to last receive due: the model's span of the operation
  first_send  S to the first send slice the agent saw (R's kernel start, as the CPU saw S)
  cpu_late    mean released - due (the pacing thread's lateness; negative by the lead it
              releases with, one reader pass of the agent kernel)
  store       mean stored - released, for stores of a released value (the kernel's reader
              pass: PCIe read of the table)
  consume     mean, per receive stored, R's kernel moving its recv head to that value
              after the store (R's processing of the slot: its step, if it waited on us)
  to_cpu      mean CPU saw - GPU saw, per counter move (the mapped table's latency + poll)
  pass        op / the agent kernel's reader passes during it (D rows carry the count)
  start_lag   S less the previous operation's last counter move (GPU time, mapped): with
              operations back to back, how late the pacing thread saw the stream reach this
              one (R's kernel ended at that move; the next starts a few us later)
  gated       share of receive stores below the newest release: R's slots (head + 8) held
              them, the kernel let them through as R emptied a slot
"""
import argparse
import collections
import csv
import statistics
import sys


def load(path):
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            for k in ("t_ns", "conn", "ordinal", "value", "due_ns", "gpu_ns"):
                r[k] = int(r[k])
            rows.append(r)
    return rows


def operations(rows):
    """Splits rows at S rows: [(S row, D row or None, rows between)]."""
    ops, cur = [], None
    for r in rows:
        if r["kind"] == "S":
            if cur:
                ops.append(cur)
            cur = [r, None, []]
        elif cur is not None:
            if r["kind"] == "D" and cur[1] is None:
                cur[1] = r
            else:
                cur[2].append(r)
    if cur:
        ops.append(cur)
    return ops


def mean(xs):
    return statistics.fmean(xs) if xs else float("nan")


def describe(start, end, rows, passes_before):
    us = 1e-3
    moves = [r for r in rows if r["kind"] == "o" and r["gpu_ns"] >= 0]
    sends = [r for r in moves if r["dir"] == "s"]
    recv_rel = [r for r in rows if r["kind"] == "r" and r["dir"] == "r"]
    released = {(r["conn"], r["value"]): r["t_ns"] for r in rows if r["kind"] == "r"}
    out = {
        "op": (end["t_ns"] - start["t_ns"]) * us if end else float("nan"),
        "gpu_span": (max(r["gpu_ns"] for r in moves) - min(r["gpu_ns"] for r in moves)) * us
        if moves else float("nan"),
        "model": (max(r["due_ns"] for r in recv_rel) - min(r["due_ns"] for r in recv_rel)) * us
        if recv_rel else float("nan"),
        "first_send": (min(r["gpu_ns"] for r in sends) - start["t_ns"]) * us
        if sends else float("nan"),
        "cpu_late": mean([(r["t_ns"] - r["due_ns"]) * us for r in rows
                          if r["kind"] == "r" and r["due_ns"] > 0]),
    }
    stores = []
    for r in rows:
        if r["kind"] == "g" and r["gpu_ns"] >= 0:
            t = released.get((r["conn"], r["value"]))
            if t is not None:
                stores.append((r["gpu_ns"] - t) * us)
    out["store"] = mean(stores)
    # R's recv head (the recv connection's watched counter) per connection, in GPU time.
    heads = collections.defaultdict(list)
    for r in moves:
        if r["dir"] == "r":
            heads[r["conn"]].append((r["gpu_ns"], r["value"]))
    consume = []
    for r in rows:
        if r["kind"] == "g" and r["dir"] == "r" and r["gpu_ns"] >= 0:
            for g, v in heads.get(r["conn"], []):
                if v >= r["value"] and g >= r["gpu_ns"]:
                    consume.append((g - r["gpu_ns"]) * us)
                    break
    out["consume"] = mean(consume)
    out["to_cpu"] = mean([(r["t_ns"] - r["gpu_ns"]) * us for r in moves])
    # Gated: a receive store below what the CPU had released by then.
    recv_stores = [r for r in rows if r["kind"] == "g" and r["dir"] == "r"]
    newest = collections.defaultdict(int)
    gated = 0
    for r in sorted([x for x in rows if x["kind"] in "rg" and x["dir"] == "r"],
                    key=lambda x: x["t_ns"]):
        if r["kind"] == "r":
            newest[r["conn"]] = max(newest[r["conn"]], r["value"])
        elif r["value"] < newest[r["conn"]]:
            gated += 1
    out["gated"] = gated / len(recv_stores) if recv_stores else float("nan")
    passes = end["value"] - passes_before if end and passes_before is not None else 0
    out["pass"] = out["op"] / passes if passes > 0 else float("nan")
    return out


COLS = ("op", "gpu_span", "model", "first_send", "cpu_late", "store", "consume", "to_cpu",
        "pass", "start_lag")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--each", action="store_true", help="one line per operation")
    args = ap.parse_args()
    rows = load(args.trace)
    ops = operations(rows)
    if not ops:
        sys.exit(f"{args.trace}: no operation (S row) in the trace")
    print("| collective | bytes | n | " + " | ".join(COLS) + " | gated |")
    print("|---|---|---|" + "---|" * (len(COLS) + 1))
    groups = collections.OrderedDict()
    passes = None
    last_move = None
    for i, (s, d, body) in enumerate(ops):
        key = (i,) if args.each else (s["func"], s["due_ns"])
        row = describe(s, d, body, passes)
        row["start_lag"] = (s["t_ns"] - last_move) * 1e-3 if last_move else float("nan")
        groups.setdefault(key, []).append((s, row))
        passes = d["value"] if d else None
        moves = [r["gpu_ns"] for r in body if r["kind"] == "o" and r["gpu_ns"] >= 0]
        last_move = max(moves) if moves else None
    for key, items in groups.items():
        s = items[0][0]
        cells = []
        for c in COLS + ("gated",):
            v = mean([x[c] for _, x in items if x[c] == x[c]])
            cells.append(f"{v:.0%}" if c == "gated" else f"{v:.1f}")
        name = f"{s['func']} #{s['value']}" if args.each else s["func"]
        print(f"| {name} | {s['due_ns']} | {len(items)} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
