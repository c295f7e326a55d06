#!/usr/bin/env python3
"""compare.py on a hand-made hybrid_nccl table and model file (CTest: hybrid_compare_python).

Rows keep the model's time and pick and the exact difference; the mean after the first operation
beside the model's time_after_first, with its own difference, where both sides have it; host_us
goes into its own column
and a row whose host_us is at least 0.9 of the emulated time is marked host-bound; a size
without a model row, a line without host_us and a comm without a model file are handled; another
run's table can stand in for the model (two real ranks against one)."""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def run(case, table, models):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "hybrid.txt")
        with open(out, "w") as f:
            f.write(table)
        specs = []
        for comm, rows in models.items():
            path = os.path.join(d, f"model-{comm}.json")
            with open(path, "w") as f:
                json.dump({"results": rows}, f)
            specs.append(f"{comm}={path}")
        p = subprocess.run([sys.executable, os.path.join(HERE, "compare.py"), case, out] + specs,
                           capture_output=True, text=True, check=True)
        return p.stdout.splitlines()


def main():
    # Lines of every age: with after_first_us, with -1 there (one iteration), without it,
    # without host_us.
    table = """comm   op                    bytes       avg_us algbw_GBps   host_us after_first_us
world  broadcast           1048576         17.2      60.91      17.1           16.0
world  broadcast           4194304         25.6     163.67      12.0           -1.0
world  reduce              1048576         16.0      65.50
world  reduce             16777216         60.0     280.00      11.0
world  allreduce           1048576        211.1       4.97      31.1          197.2
split  allreduce           4194304         80.5      52.10      11.2
"""
    model = [
        {"op": "broadcast", "size": 1048576, "time": 14.3, "time_after_first": 14.3,
         "algo": "Ring", "proto": "Simple", "channels": 16},
        {"op": "broadcast", "size": 4194304, "time": 22.1, "time_after_first": 22.1,
         "algo": "Ring", "proto": "Simple", "channels": 16},
        {"op": "reduce", "size": 1048576, "time": 20.0, "algo": "Ring", "proto": "Simple",
         "channels": 16},
        {"op": "allreduce", "size": 1048576, "time": 198.2, "time_after_first": 198.2,
         "algo": "Tree", "proto": "Simple", "channels": 16},
    ]
    got = run("one", table, {"world": model})
    want = [
        "| one | world | broadcast | 1048576 | 17.2 | 14.3 | Ring/Simple/16 | +20.3 | 16.0 / 14.3 | +11.9 | 17.1 | host-bound |",
        "| one | world | broadcast | 4194304 | 25.6 | 22.1 | Ring/Simple/16 | +15.8 | | | 12.0 |  |",
        "| one | world | reduce | 1048576 | 16.0 | 20.0 | Ring/Simple/16 | -20.0 | | | | |",
        "| one | world | reduce | 16777216 | 60.0 | (no model row) | | | | | 11.0 |  |",
        "| one | world | allreduce | 1048576 | 211.1 | 198.2 | Tree/Simple/16 | +6.5 | 197.2 / 198.2 | -0.5 | 31.1 |  |",
    ]
    if got != want:
        print("compare.py printed:\n  " + "\n  ".join(got) + "\nwanted:\n  " + "\n  ".join(want))
        return 1
    # No line of a comm with a model file: one row that says so.
    got = run("split", table, {"other": model})
    if (len(got) != 1 or not got[0].startswith("| split | - | no timing lines in ") or
            not got[0].endswith("hybrid.txt | | | | | | | | | |")):
        print("compare.py without a matching comm printed: " + repr(got))
        return 1
    # Another run as the reference (two real ranks against one): its rows of the same comm.
    with tempfile.TemporaryDirectory() as d:
        one = os.path.join(d, "one.txt")
        with open(one, "w") as f:
            f.write("world  allreduce          4194304        346.4      12.11      23.6          340.0\n"
                    "split  allreduce          4194304         80.0      52.10      11.2\n")
        two = os.path.join(d, "two.txt")
        with open(two, "w") as f:
            f.write("world  allreduce          4194304        383.8      10.93      22.7          374.0\n")
        p = subprocess.run([sys.executable, os.path.join(HERE, "compare.py"), "two-vs-one", two,
                            "world=run:" + one], capture_output=True, text=True, check=True)
        want = ["| two-vs-one | world | allreduce | 4194304 | 383.8 | 346.4 | run one.txt | "
                "+10.8 | 374.0 / 340.0 | +10.0 | 22.7 |  |"]
        if p.stdout.splitlines() != want:
            print("compare.py against a run printed: " + repr(p.stdout.splitlines()))
            return 1
    print("compare.py: host-bound rows marked, the rest exact, another run as the reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
