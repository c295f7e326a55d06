#!/usr/bin/env python3
"""spread.py on three hand-made summaries (CTest: hybrid_spread_python).

Per row: the model time, the run count, the median and range of the difference and of the
difference after the first operation, how many runs are within 2 % by each, and how many were
host-bound; a row present in fewer runs counts only those; rows against another run are left
out; a missing file is an error."""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
HEAD = """# Hybrid emulation vs crystal simulate

## Emulated vs model (us)

| case | comm | op | bytes | emulated | model | model algo/proto/ch | diff % | after the first: emulated / model | diff % | host us | note |
|---|---|---|---|---|---|---|---|---|---|---|---|
"""


def row(case, op, size, us, model, diff, after, after_diff, host, note=""):
    after_cells = f"{after} / {model} | {after_diff}" if after is not None else "|"
    return (f"| {case} | world | {op} | {size} | {us} | {model} | Ring/Simple/16 | {diff} | "
            f"{after_cells} | {host} | {note} |\n")


def main():
    runs = [
        row("one", "broadcast", 1048576, 16.4, 15.1, "+8.6", 15.9, "+5.3", 10.5) +
        row("one", "allgather", 4194304, 320.8, 321.9, "-0.3", 319.0, "-0.9", 16.2) +
        "| two-vs-one | world | allgather | 4194304 | 1008.7 | 320.8 | run one.txt | +214.4 | "
        "997.3 / 319.0 | +212.6 | 12.0 |  |\n",
        row("one", "broadcast", 1048576, 17.9, 15.1, "+18.5", 17.4, "+15.2", 17.0, "host-bound") +
        row("one", "allgather", 4194304, 330.1, 321.9, "+2.5", 328.0, "+1.9", 16.0),
        row("one", "broadcast", 1048576, 15.3, 15.1, "+1.3", None, None, 11.0),
    ]
    with tempfile.TemporaryDirectory() as d:
        paths = []
        for i, body in enumerate(runs):
            p = os.path.join(d, f"summary{i}.md")
            with open(p, "w") as f:
                f.write(HEAD + body + "\n\nTotal 59 s after the build.\n")
            paths.append(p)
        out = subprocess.run([sys.executable, os.path.join(HERE, "spread.py")] + paths,
                             capture_output=True, text=True, check=True).stdout.splitlines()
        body = [l for l in out if l.startswith("| one") or l.startswith("| two")]
        expected = [
            "| one | world | broadcast | 1048576 | 15.1 | 3 | +8.6 (+1.3 .. +18.5) | "
            "+10.2 (+5.3 .. +15.2) | 1/3 / 0/2 | 1 |",
            "| one | world | allgather | 4194304 | 321.9 | 2 | +1.1 (-0.3 .. +2.5) | "
            "+0.5 (-0.9 .. +1.9) | 1/2 / 2/2 |  |",
        ]
        # Broadcast: only the third run (+1.3) is within 2 %, and no run after the first
        # (+5.3, +15.2; the third has no after-first figure). The two-vs-one row is left out.
        if body != expected:
            print("spread.py rows differ:\n" + "\n".join(body) + "\nexpected:\n" +
                  "\n".join(expected))
            return 1
        if not out or not out[0].startswith("Spread over 3 runs"):
            print(f"first line: {out[:1]}")
            return 1
        missing = subprocess.run([sys.executable, os.path.join(HERE, "spread.py"),
                                  os.path.join(d, "none.md")], capture_output=True, text=True)
        if missing.returncode == 0 or "none.md" not in missing.stderr:
            print(f"a missing summary must fail naming it: rc {missing.returncode}, "
                  f"stderr {missing.stderr!r}")
            return 1
    print("spread.py: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
