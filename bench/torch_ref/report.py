#!/usr/bin/env python3
"""The table of bench/compare.sh: reads the run folders it made and prints markdown.

A run folder (OUT/<setting>-s<seed>/) holds metrics.jsonl (cutrain's, or torch_reference.py's
in the same keys), wall_s (seconds from process start to exit, measured by the driver) and,
on a GPU, gpu_util.txt (nvidia-smi utilization.gpu samples, %). OUT/load_only.txt holds the
loader-only rate of bin/bench_data (images/s) when it was measured.

Per run:
  images/s     steady state: the median of the "step" records' images_per_s from epoch 2 on
               (all records when there is one epoch); the median keeps out the windows that
               contain an evaluation
  wall         process start to exit
  time to X    the "time" of the first "eval" record with top1 >= X: from the first training
               step, each program's own clock
  final top-1  the last "eval" record
  GPU busy     the mean of the utilization.gpu samples over the run
  data wait    cutrain only: the median of the step records' data_wait_pct (time in
               Loader::next()), from epoch 2 on
  pipeline / max(load, compute)   cutrain only: time per image in the steady state against
               the larger of the loader's alone (1 / bench_data's rate) and the computation's
               alone (the step time without the data wait); 1.00 = perfect overlap
Seeds are shown as the mean and, with several, the range.
"""
import json
import os
import statistics
import sys


def records(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def steady(recs, key):
    steps = [r for r in recs if r["kind"] == "step"]
    late = [r for r in steps if r["epoch"] >= 2] or steps
    return statistics.median(r[key] for r in late) if late else None


def run_numbers(folder, target, load_rate):
    recs = records(os.path.join(folder, "metrics.jsonl"))
    evals = [r for r in recs if r["kind"] == "eval"]
    n = {"images_per_s": steady(recs, "images_per_s"),
         "final_top1": evals[-1]["top1"] if evals else None,
         "time_to_target": next((e["time"] for e in evals if e["top1"] >= target), None)}
    wall = os.path.join(folder, "wall_s")
    n["wall_s"] = float(open(wall).read()) if os.path.exists(wall) else None
    util = os.path.join(folder, "gpu_util.txt")
    if os.path.exists(util):
        samples = [float(v) for v in open(util).read().split() if v.replace(".", "").isdigit()]
        n["gpu_busy"] = statistics.mean(samples) if samples else None
    wait = steady(recs, "data_wait_pct")
    n["data_wait"] = wait
    if load_rate and n["images_per_s"] and wait is not None:
        ips = n["images_per_s"]  # pipeline time per image = 1 / ips
        n["pipeline_ratio"] = 1.0 / max(ips / load_rate, 1.0 - wait / 100.0)
    return n


def cell(values, fmt, scale=1.0, missing="-"):
    v = [x * scale for x in values if x is not None]
    if not v:
        return missing
    s = fmt.format(statistics.mean(v))
    if len(v) > 1:
        s += " (" + fmt.format(min(v)) + "-" + fmt.format(max(v)) + ")"
    if len(v) < len(values):
        s += f" [{len(values) - len(v)} of {len(values)} without a value]"
    return s


def main():
    out, target = sys.argv[1], float(sys.argv[2])
    settings = sys.argv[3:]
    load = os.path.join(out, "load_only.txt")
    load_rate = float(open(load).read()) if os.path.exists(load) else None
    rows = {}
    for s in settings:
        runs = sorted(d for d in os.listdir(out) if d.startswith(s + "-s")
                      and os.path.exists(os.path.join(out, d, "metrics.jsonl")))
        rows[s] = [run_numbers(os.path.join(out, d), target, load_rate if s == "cutrain" else None)
                   for d in runs]
    pct = f"{100 * target:.0f}%"
    print(f"| setting | runs | images/s (steady) | wall s | time to {pct} s | final top-1 | "
          "GPU busy | data wait | pipeline / max(load, compute) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for s, runs in rows.items():
        col = lambda k: [r.get(k) for r in runs]  # noqa: E731
        is_cut = s == "cutrain"
        print(f"| {s} | {len(runs)} | {cell(col('images_per_s'), '{:,.0f}')} | "
              f"{cell(col('wall_s'), '{:.1f}')} | {cell(col('time_to_target'), '{:.1f}', missing='not reached')} | "
              f"{cell(col('final_top1'), '{:.2f}%', 100)} | {cell(col('gpu_busy'), '{:.0f}%')} | "
              f"{cell(col('data_wait'), '{:.1f}%') if is_cut else '-'} | "
              f"{cell(col('pipeline_ratio'), '{:.2f}') if is_cut else '-'} |")
    if load_rate:
        print(f"\nLoader alone (bin/bench_data, the same list and threads): {load_rate:,.0f} images/s.")

    # Where cutrain loses: every measure on which some PyTorch setting does better.
    if "cutrain" in rows and rows["cutrain"]:
        def mean(s, k):
            v = [r.get(k) for r in rows[s] if r.get(k) is not None]
            return statistics.mean(v) if v else None
        better = {"images_per_s": max, "wall_s": min, "time_to_target": min, "final_top1": max}
        names = {"images_per_s": "images/s", "wall_s": "wall time",
                 "time_to_target": f"time to {pct}", "final_top1": "final top-1"}
        losses = []
        for k, pick in better.items():
            c = mean("cutrain", k)
            for s in rows:
                t = mean(s, k)
                if s == "cutrain" or t is None:
                    continue
                if c is None or pick(c, t) == t and t != c:
                    losses.append(f"- {names[k]}: {s} {t:,.4g} against cutrain's "
                                  f"{'not reached' if c is None else f'{c:,.4g}'}")
        print("\nWhere cutrain loses (a PyTorch setting does better on the mean):")
        print("\n".join(losses) if losses else "- nowhere in this table")


if __name__ == "__main__":
    main()
