#!/usr/bin/env python3
"""Run-to-run spread of several `run_device.sh all` summaries (the `repeat` case).

usage: spread.py SUMMARY.md [SUMMARY.md ...]
Reads the "Emulated vs model" rows (compare.py's) of every summary and prints one markdown row
per (case, comm, op, bytes) that has a model time:
  | case | comm | op | bytes | model us | runs | diff %: median (min .. max) |
    after the first: median (min .. max) | within 2 %: mean / after the first | host-bound |
"within 2 %": in how many of the runs |diff| <= 2 (the issue's bar), for the 20-operation
mean and for the mean after the first operation; "host-bound": in how many runs compare.py
marked the row so (the emulating machine's CPU set its time). A single run on these virtual
machines moves 1-3 % from the next at 1-16 MiB (forty-second session: ten runs of rank 0's
all-gather and reduce-scatter), so one summary's row says less than the median of several.
Rows compared with another run instead of a model ("run ..." in the pick column) are left out.
"""
import re
import statistics
import sys

NUM = r"[-+]?[0-9.]+"
ROW = re.compile(r"^\|\s*(\S+)\s*\|\s*(\S+)\s*\|\s*(\w+)\s*\|\s*(\d+)\s*\|\s*(" + NUM + r")\s*\|"
                 r"\s*(" + NUM + r")\s*\|\s*([^|]*)\|\s*(" + NUM + r")\s*\|\s*([^|]*)\|\s*([^|]*)\|"
                 r"\s*([^|]*)\|\s*([^|]*)\|\s*$")


def rows_of(path):
    """(key, model us, diff, after-first diff or None, host-bound) for each model row."""
    out = []
    with open(path, errors="replace") as f:
        for line in f:
            m = ROW.match(line.strip())
            if not m or m.group(7).strip().startswith("run "):
                continue
            key = (m.group(1), m.group(2), m.group(3), int(m.group(4)))
            after = m.group(10).strip()
            out.append((key, float(m.group(6)), float(m.group(8)),
                        float(after) if after else None, m.group(12).strip() == "host-bound"))
    return out


def span(values):
    if not values:
        return ""
    return (f"{statistics.median(values):+.1f} ({min(values):+.1f} .. {max(values):+.1f})")


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    by_key = {}
    order = []
    for path in argv[1:]:
        try:
            rows = rows_of(path)
        except OSError as e:
            print(f"spread.py: {path}: {e}", file=sys.stderr)
            return 1
        for key, model, diff, after, bound in rows:
            if key not in by_key:
                by_key[key] = {"model": model, "diff": [], "after": [], "bound": 0}
                order.append(key)
            k = by_key[key]
            k["diff"].append(diff)
            if after is not None:
                k["after"].append(after)
            k["bound"] += 1 if bound else 0
    print(f"Spread over {len(argv) - 1} runs: diff = (emulated - model) / model, the median and "
          "the range; within 2 %: runs with |diff| <= 2.")
    print()
    print("| case | comm | op | bytes | model us | runs | diff % median (range) | "
          "after the first: median (range) | within 2 %: mean / after the first | host-bound |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for key in order:
        k = by_key[key]
        n = len(k["diff"])
        within = sum(1 for d in k["diff"] if abs(d) <= 2.0)
        within_after = sum(1 for d in k["after"] if abs(d) <= 2.0)
        after_cell = f"{within_after}/{len(k['after'])}" if k["after"] else "-"
        print(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {k['model']:.1f} | {n} | "
              f"{span(k['diff'])} | {span(k['after'])} | {within}/{n} / {after_cell} | "
              f"{k['bound'] or ''} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
