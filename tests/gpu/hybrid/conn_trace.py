#!/usr/bin/env python3
"""Where a real rank's emulated time goes, from the plugin's per-request trace.

    python3 tests/gpu/hybrid/conn_trace.py PREFIX.<pid>.csv [--gap-us 300] [--min-mib 1]

The trace (CRYSTAL_TRACE_CONN=PREFIX, docs/plugin.md "Per-request trace") has one row per
request that test() reported done: posted, modelled due and observed done times. Rows are
split into bursts (an operation, or the iterations of one size) by quiet gaps of --gap-us
on every connection; per burst and per connection class (direction x timing rule) it prints:
  wait_model  mean due - posted   (the modelled transfer, what the target would take)
  late_poll   mean done - due     (the proxy saw it late: polling / GPU-side work)
  ahead       share of receives whose due came at or before their post + 1 us (the virtual
              side was ready first: the real rank's own pace set the time)
  repost      mean time from a receive's done to the post of the request that reuses its
              slot window (request i+8 on the connection): the real rank's turnaround
  proxy_late  mean max(0, first test - due): the proxy had not tested it yet when it was due
              (traces with first_test_ns; the proxy serves its connections in turn)
  held        mean done - max(due, first test): the plugin kept answering "not done" after
              both (GPU copies, mirror holds)
  tests       mean test() calls per request
Each burst line also says how long nothing was in flight before it ("idle before": the real
rank's host enqueue, launch or GPU work outside the network), and the last line their mean.
"""
import argparse
import collections
import csv
import sys


def load(path):
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            for k in ("conn", "step", "bytes", "posted_ns", "due_ns", "done_ns", "ordinal"):
                r[k] = int(r[k])
            for k in ("first_test_ns", "tests"):  # newer traces only
                r[k] = int(r[k]) if r.get(k) not in (None, "") else None
            rows.append(r)
    rows.sort(key=lambda r: r["posted_ns"])
    return rows


def bursts(rows, gap_ns):
    out, cur, last_end = [], [], None
    for r in rows:
        if cur and r["posted_ns"] > last_end + gap_ns:
            out.append(cur)
            cur = []
        cur.append(r)
        last_end = max(last_end or 0, r["done_ns"]) if cur[:-1] else r["done_ns"]
    if cur:
        out.append(cur)
    return out


def mean(xs):
    return sum(xs) / len(xs) if xs else 0.0


def describe(burst):
    t0 = min(r["posted_ns"] for r in burst)
    t1 = max(r["done_ns"] for r in burst)
    by_cls = collections.defaultdict(list)
    for r in burst:
        by_cls[(r["dir"], r["peer_kind"], r["timing"])].append(r)
    lines = []
    for (d, pk, tm), rs in sorted(by_cls.items()):
        conns = {r["conn"] for r in rs}
        devs = sorted({r.get("dev", "?") for r in rs})
        modelled = [r for r in rs if r["due_ns"] >= 0]
        wait = [r["due_ns"] - r["posted_ns"] for r in modelled]
        late = [r["done_ns"] - r["due_ns"] for r in modelled]
        ahead = sum(1 for r in modelled if r["due_ns"] <= r["posted_ns"] + 1000)
        # slot turnaround: per connection, post of request k+8 minus done of request k
        rep = []
        per_conn = collections.defaultdict(list)
        for r in rs:
            per_conn[r["conn"]].append(r)
        for cr in per_conn.values():
            cr.sort(key=lambda r: r["step"])
            for a, b in zip(cr, cr[8:]):
                rep.append(b["posted_ns"] - a["done_ns"])
        nbytes = sum(r["bytes"] for r in rs)
        tested = [r for r in modelled if r.get("first_test_ns") is not None]
        proxy = ""
        if tested:
            plate = [max(0, r["first_test_ns"] - r["due_ns"]) for r in tested]
            held = [r["done_ns"] - max(r["due_ns"], r["first_test_ns"]) for r in tested]
            proxy = (f", proxy_late {mean(plate) / 1e3:.1f} us, held {mean(held) / 1e3:.1f} us, "
                     f"tests {mean([r['tests'] for r in tested]):.1f}")
        lines.append(
            f"  {d}/{'virtual' if pk == 'v' else 'real'}/{ {'r': 'ring', 't': 'tree', 'p': 'peer-ready'}.get(tm, tm)}: "
            f"{len(conns)} conns on devs {','.join(devs)}, {len(rs)} req, {nbytes / 2**20:.1f} MiB "
            f"(mean {nbytes / len(rs) / 1024:.0f} KiB), wait_model {mean(wait) / 1e3:.1f} us, "
            f"late_poll {mean(late) / 1e3:.1f} us, ahead {100.0 * ahead / max(len(modelled), 1):.0f} %, "
            f"repost {mean(rep) / 1e3:.1f} us, per-conn span "
            f"{mean([max(r['done_ns'] for r in c) - min(r['posted_ns'] for r in c) for c in per_conn.values()]) / 1e3:.1f} us"
            f"{proxy}")
    return t0, t1, lines


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--gap-us", type=float, default=300.0)
    ap.add_argument("--min-mib", type=float, default=0.0, help="skip bursts moving less")
    a = ap.parse_args()
    rows = load(a.trace)
    if not rows:
        print(f"{a.trace}: no rows", file=sys.stderr)
        return 1
    base = rows[0]["posted_ns"]
    prev_end, idles = None, []
    for i, b in enumerate(bursts(rows, int(a.gap_us * 1000))):
        t0, t1, lines = describe(b)
        # Nothing of the plugin in flight between two bursts: the real rank's host, launch or
        # GPU work outside the network (an operation's own network part is the span).
        idle = "" if prev_end is None else f", idle before {(t0 - prev_end) / 1e3:.1f} us"
        if prev_end is not None:
            idles.append(t0 - prev_end)
        prev_end = t1
        if sum(r["bytes"] for r in b) < a.min_mib * 2**20:
            continue
        print(f"burst {i}: t={(t0 - base) / 1e6:.3f} ms, span {(t1 - t0) / 1e3:.1f} us, "
              f"{len(b)} requests{idle}")
        print("\n".join(lines))
    if idles:
        print(f"between bursts: {len(idles)} gaps, mean idle {mean(idles) / 1e3:.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
