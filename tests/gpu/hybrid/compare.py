#!/usr/bin/env python3
"""Emulated times (hybrid_nccl's table) beside `crystal simulate --sweep`'s prediction.

usage: compare.py CASE HYBRID_OUTPUT COMM=MODEL_JSON [COMM=MODEL_JSON ...]
       (COMM=run:OTHER_HYBRID_OUTPUT: that run's rows of COMM are the reference instead)
Prints markdown rows:
  | case | comm | op | bytes | emulated us | model us | model pick | diff % |
    after the first: emulated / model us | diff % | host us | note |
for every line of HYBRID_OUTPUT ("comm op bytes avg_us algbw [host_us [after_first_us]]") whose
comm has a model file,
matched to the model row of the same op and nearest size (within 10 %). Rows without a model
row say so; nothing is dropped silently. host us: the program's CPU time a call to enqueue the
operations (hybrid_nccl's host_us; empty when the line has none). note "host-bound": host_us is
at least HOST_BOUND of the emulated time, so the GPU waited for the program's calls and the row
measures the emulating machine's CPU (NCCL's enqueue and this plugin's share of it), not the
emulated network: a target rank spends its own host time there, which the model does not time.
"after the first": the mean of the operations after the loop's first (hybrid_nccl's
after_first_us) beside the model's time_after_first (crystal simulate --sweep's JSON): the first
operation runs after the program waited for its stream and carries the program's first call
with the GPU idle, which the model does not time. Empty where either side lacks it.
"""
import json
import re
import sys

LINE = re.compile(r"^(\S+)\s+(allreduce|allgather|reducescatter|broadcast|reduce|sendrecv|alltoall)"
                  r"\s+(\d+)\s+([0-9.]+)\s+[0-9.]+(?:\s+([0-9.]+)(?:\s+(-?[0-9.]+))?)?\s*$")
HOST_BOUND = 0.9  # host_us / emulated us at or above which a row is marked host-bound


def host_cells(us, host):
    """The host us and note cells of a row."""
    if host is None:
        return "|"
    note = "host-bound" if us > 0 and host >= HOST_BOUND * us else ""
    return f"{host:.1f} | {note}"


def after_first_of(m):
    """A table line's after_first_us, or None (absent, or -1: one iteration)."""
    v = float(m.group(6)) if m.group(6) is not None else -1.0
    return v if v >= 0 else None


def after_cells(after, model_after):
    """The "after the first" and its diff cells of a row."""
    if after is None or model_after is None or model_after <= 0:
        return "|"
    return f"{after:.1f} / {model_after:.1f} | {100.0 * (after - model_after) / model_after:+.1f}"


def load_model(comm, path):
    """A model file's rows, or with "run:PATH" another hybrid_nccl output's rows of `comm` (e.g.
    two real ranks against one: the reference column is that run's time)."""
    if path.startswith("run:"):
        rows = []
        with open(path[4:], errors="replace") as f:
            for line in f:
                m = LINE.match(line.strip())
                if m and m.group(1) == comm:
                    rows.append({"op": m.group(2), "size": int(m.group(3)),
                                 "time": float(m.group(4)), "pick": "run " + path[4:].split("/")[-1],
                                 "time_after_first": after_first_of(m)})
        return rows
    with open(path) as f:
        return json.load(f)["results"]


def nearest(rows, op, size):
    best = None
    for r in rows:
        if r["op"] != op:
            continue
        d = abs(r["size"] - size) / max(size, 1)
        if d <= 0.10 and (best is None or d < best[0]):
            best = (d, r)
    return best[1] if best else None


def main(argv):
    if len(argv) < 4:
        print(__doc__, file=sys.stderr)
        return 2
    case, hybrid = argv[1], argv[2]
    models = {}
    for spec in argv[3:]:
        comm, _, path = spec.partition("=")
        try:
            models[comm] = load_model(comm, path)
        except (OSError, ValueError, KeyError) as e:
            print(f"| {case} | {comm} | model file {path} unreadable: {e} | | | | | | | | | |")
    try:
        lines = open(hybrid, errors="replace").read().splitlines()
    except OSError as e:
        print(f"| {case} | - | no output ({e}) | | | | | | | | | |")
        return 1
    rows = 0
    for line in lines:
        m = LINE.match(line.strip())
        if not m:
            continue
        comm, op, size, us = m.group(1), m.group(2), int(m.group(3)), float(m.group(4))
        host = float(m.group(5)) if m.group(5) is not None else None
        after = after_first_of(m)
        if comm not in models:
            continue
        r = nearest(models[comm], op, size)
        rows += 1
        if r is None:
            print(f"| {case} | {comm} | {op} | {size} | {us:.1f} | (no model row) | | | | | "
                  f"{host_cells(us, host)} |")
            continue
        diff = 100.0 * (us - r["time"]) / r["time"] if r["time"] > 0 else float("nan")
        pick = r.get("pick") or f"{r.get('algo', '?')}/{r.get('proto', '?')}/{r.get('channels', '?')}"
        print(f"| {case} | {comm} | {op} | {size} | {us:.1f} | {r['time']:.1f} | {pick} | "
              f"{diff:+.1f} | {after_cells(after, r.get('time_after_first'))} | "
              f"{host_cells(us, host)} |")
    if rows == 0:
        print(f"| {case} | - | no timing lines in {hybrid} | | | | | | | | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
