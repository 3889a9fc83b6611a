#!/usr/bin/env python3
"""losses.py - two training runs' losses, step by step (tools/gpu/check.sh, issue 19).

    python3 tools/gpu/losses.py REF_METRICS RUN_METRICS --tol T [--label NAME]

REF_METRICS and RUN_METRICS are the metrics.jsonl files `ingot train` wrote (one JSON object per
line; the step lines carry "step" and "loss", the validation lines "val_loss", which are compared
too when both runs have them). Prints a table of every step (ref, run, relative difference
|run - ref| / |ref|), then one line

    losses NAME: steps=N max_rel=R at step S; val_rel=V; tol=T: PASS|FAIL

and exits 0 when every relative difference is within T, 1 when one is not, 2 when the files
cannot be compared (missing, unreadable, different steps).
Standard library only: it runs with whatever python3 the machine has.
"""
import argparse
import json
import math
import sys


def read(path):
    steps, val = {}, {}
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                o = json.loads(line)
            except ValueError as e:
                raise SystemExit(f"losses: {path}:{n}: not JSON ({e})")
            if "step" not in o:
                continue
            if o.get("loss") is not None:
                steps[int(o["step"])] = float(o["loss"])
            if o.get("val_loss") is not None:
                val[int(o["step"])] = float(o["val_loss"])
    return steps, val


def rel(ref, run):
    if not (math.isfinite(ref) and math.isfinite(run)):
        return math.inf
    return abs(run - ref) / abs(ref) if ref else abs(run)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("ref")
    ap.add_argument("run")
    ap.add_argument("--tol", type=float, required=True)
    ap.add_argument("--label", default="run")
    a = ap.parse_args()
    try:
        ref, ref_val = read(a.ref)
        run, run_val = read(a.run)
    except OSError as e:
        print(f"losses {a.label}: cannot read: {e}")
        return 2
    if not ref or sorted(ref) != sorted(run):
        print(f"losses {a.label}: cannot compare: {a.ref} has steps {sorted(ref)[:3]}..."
              f"({len(ref)}), {a.run} has {sorted(run)[:3]}...({len(run)})")
        return 2
    print(f"{'step':>5} {'ref':>20} {'run':>20} {'rel':>10}")
    worst, worst_step = -1.0, 0
    for s in sorted(ref):
        r = rel(ref[s], run[s])
        print(f"{s:>5} {ref[s]:>20.12g} {run[s]:>20.12g} {r:>10.3g}")
        if r > worst:
            worst, worst_step = r, s
    val_worst = None
    for s in sorted(set(ref_val) & set(run_val)):
        r = rel(ref_val[s], run_val[s])
        print(f"{'val' + str(s):>5} {ref_val[s]:>20.12g} {run_val[s]:>20.12g} {r:>10.3g}")
        val_worst = r if val_worst is None else max(val_worst, r)
    ok = worst <= a.tol and (val_worst is None or val_worst <= a.tol)
    val_txt = "none" if val_worst is None else f"{val_worst:.3g}"
    print(f"losses {a.label}: steps={len(ref)} max_rel={worst:.3g} at step {worst_step}; "
          f"val_rel={val_txt}; last ref={ref[max(ref)]:.6f} run={run[max(run)]:.6f}; "
          f"tol={a.tol:g}: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
