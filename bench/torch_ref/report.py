#!/usr/bin/env python3
"""The table of bench/compare.sh: reads the run folders it made and prints markdown.

A run folder (OUT/<setting>-s<seed>/) holds metrics.jsonl (cutrain's, or torch_reference.py's
in the same keys), wall_s (seconds from process start to exit, measured by the driver) and,
on a GPU, gpu_util.txt (nvidia-smi utilization.gpu samples, %).

Per run:
  images/s     steady state: the median of the "step" records' images_per_s from epoch 2 on
               (all records when there is one epoch); the median keeps out the windows that
               contain an evaluation
  wall         process start to exit (compilation, capture and worker start included)
  set-up       torch_reference.py's tuned modes: warm-up and compilation or capture, before
               their clock starts (the summary's setup_s)
  time to X    the "time" of the first "eval" record with top1 >= X: from the first timed
               training step, each program's own clock
  final top-1  the last "eval" record
  busy         the device busy, on its own clock (cutrain's step records, and
               torch_reference.py's from the same marks, torch_ref/clock.py): the median of
               busy_pct over the steady state; without it, nvidia-smi's utilization (marked ~)
  bound        the steady state's bound by cutrain's rule (data/metrics.h), applied to the
               medians of busy, device wait and idle
  pipeline     cutrain only: the median of its records' pipeline_ratio, wall over the longer
               of the loader alone and the device's compute
A setting's cell is the median over its seeds, with the range when there are several. A seed
that never reached the target counts as infinitely late in the median of the time to it (so 1
of 3 seeds reaching it is "not reached"), with the count that did beside it.
"Where cutrain loses" lists every setting whose median beats the best cutrain setting's (the
launched run or --cuda-graph), and by how much.
"""
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from torch_ref.clock import run_bound  # noqa: E402


def records(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def steady(recs, key):
    steps = [r for r in recs if r["kind"] == "step"]
    late = [r for r in steps if r["epoch"] >= 2] or steps
    values = [r[key] for r in late if r.get(key) is not None]
    return statistics.median(values) if values else None


def run_numbers(folder, target):
    recs = records(os.path.join(folder, "metrics.jsonl"))
    evals = [r for r in recs if r["kind"] == "eval"]
    summary = next((r for r in recs if r["kind"] == "summary"), {})
    n = {"images_per_s": steady(recs, "images_per_s"),
         "final_top1": evals[-1]["top1"] if evals else None,
         "time_to_target": next((e["time"] for e in evals if e["top1"] >= target), None),
         "setup_s": summary.get("setup_s"), "ran": summary.get("ran")}
    wall = os.path.join(folder, "wall_s")
    n["wall_s"] = float(open(wall).read()) if os.path.exists(wall) else None
    busy, wait, idle = (steady(recs, k) for k in ("busy_pct", "device_wait_pct", "idle_pct"))
    n["busy"], n["busy_from"] = busy, "clock"
    if busy is None:
        util = os.path.join(folder, "gpu_util.txt")
        if os.path.exists(util):
            samples = [float(v) for v in open(util).read().split() if v.replace(".", "").isdigit()]
            n["busy"], n["busy_from"] = (statistics.mean(samples) if samples else None), "smi"
    n["bound"] = (run_bound(idle or 0.0, wait or 0.0, busy) if busy is not None and
                  wait is not None else None)
    n["pipeline_ratio"] = steady(recs, "pipeline_ratio")
    return n


def median_cell(values, fmt, scale=1.0, missing="-"):
    v = [x * scale for x in values if x is not None]
    if not v:
        return missing
    s = fmt.format(statistics.median(v))
    if len(v) > 1:
        s += " (" + fmt.format(min(v)) + "-" + fmt.format(max(v)) + ")"
    if len(v) < len(values):
        s += f" [{len(values) - len(v)} of {len(values)} without a value]"
    return s


def time_cell(values):
    """The median time to the target, a seed that never got there counting as infinite."""
    v = sorted(x if x is not None else float("inf") for x in values)
    if not v:
        return "-"
    med = statistics.median(v)
    reached = sum(x != float("inf") for x in v)
    s = "not reached" if med == float("inf") else f"{med:.1f}"
    return s + (f" ({reached} of {len(v)} reached it)" if 0 < reached < len(v) else "")


def text_cell(values):
    v = sorted({x for x in values if x})
    return ", ".join(v) if v else "-"


def median_of(runs, key):
    if key == "time_to_target":  # not reached: infinitely late
        v = [r.get(key) if r.get(key) is not None else float("inf") for r in runs]
        m = statistics.median(v) if v else None
        return None if m is None or m == float("inf") else m
    v = [r.get(key) for r in runs if r.get(key) is not None]
    return statistics.median(v) if v else None


def table(out, target, settings):
    rows = {}
    for s in settings:
        runs = sorted(d for d in os.listdir(out) if d.startswith(s + "-s") and
                      d[len(s) + 2:].isdigit() and
                      os.path.exists(os.path.join(out, d, "metrics.jsonl")))
        if runs:
            rows[s] = [run_numbers(os.path.join(out, d), target) for d in runs]
    pct = f"{100 * target:.0f}%"
    lines = [f"| setting | runs | images/s (steady) | wall s | set-up s | time to {pct} s | "
             "final top-1 | busy | bound | pipeline |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for s, runs in rows.items():
        col = lambda k: [r.get(k) for r in runs]  # noqa: E731
        smi = any(r["busy_from"] == "smi" and r["busy"] is not None for r in runs)
        ran = text_cell(col("ran"))
        lines.append(
            f"| {s}{' (' + ran + ')' if ran != '-' else ''} | {len(runs)} | "
            f"{median_cell(col('images_per_s'), '{:,.0f}')} | {median_cell(col('wall_s'), '{:.1f}')} | "
            f"{median_cell(col('setup_s'), '{:.1f}')} | "
            f"{time_cell(col('time_to_target'))} | "
            f"{median_cell(col('final_top1'), '{:.2f}%', 100)} | "
            f"{'~' if smi else ''}{median_cell(col('busy'), '{:.0f}%')} | "
            f"{text_cell(col('bound'))} | {median_cell(col('pipeline_ratio'), '{:.2f}')} |")

    # Where cutrain loses: every measure on which another setting's median does better than
    # the best of cutrain's settings.
    ours = [s for s in rows if s.startswith("cutrain")]
    if ours:
        better = {"images_per_s": (max, "images/s"), "wall_s": (min, "wall time"),
                  "time_to_target": (min, f"time to {pct}"), "final_top1": (max, "final top-1")}
        losses = []
        for k, (pick, name) in better.items():
            mine = [(median_of(rows[s], k), s) for s in ours]
            mine = [(v, s) for v, s in mine if v is not None]
            c, cs = pick(mine) if mine else (None, None)
            for s in rows:
                t = median_of(rows[s], k)
                if s in ours or t is None:
                    continue
                if c is None:
                    losses.append(f"- {name}: {s} {t:,.4g}; cutrain: not reached")
                elif pick(c, t) == t and t != c:
                    ratio = t / c if pick is max else c / t
                    losses.append(f"- {name}: {s} {t:,.4g} against {cs}'s {c:,.4g} "
                                  f"({ratio:.2f}x)")
        lines.append("\nWhere cutrain loses (another setting's median beats cutrain's best):")
        lines.append("\n".join(losses) if losses else "- nowhere in this table")
    return "\n".join(lines)


def main():
    out, target = sys.argv[1], float(sys.argv[2])
    print(table(out, target, sys.argv[3:]))


if __name__ == "__main__":
    main()
