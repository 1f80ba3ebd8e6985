#!/usr/bin/env python3
"""The table of bench/compare.sh: reads the run folders it made and prints markdown.

A run folder (OUT/<setting>-s<seed>/) holds metrics.jsonl (cutrain's, or torch_reference.py's
in the same keys), log (the program's output), wall_s (seconds from process start to exit,
measured by the driver) and, on a GPU, gpu_util.txt (nvidia-smi utilization.gpu samples, %).

Per run:
  images/s     steady state: the median of the "step" records' images_per_s from epoch 2 on
               (all records when there is one epoch); the median keeps out the windows that
               contain an evaluation
  wall         process start to exit (everything included)
  set-up       process start to the run's clock (its first timed step): cutrain's "start"
               record's setup_s (configuration, data, --conv auto's timing: conv_auto_s, the
               loaders); torch_reference.py's startup_s (imports, decoding the data set:
               decode_s, and in the tuned modes warm-up, compilation or capture and the
               check against eager: setup_s). cutrain's warm-up steps and graph capture run
               inside its clock; PyTorch's cuDNN search inside its clock in the untuned modes
  time to X    clock: the "time" of the first "eval" record with top1 >= X, from the first
               timed training step, each program's own clock; from start: set-up + that,
               counted the same way for every program
  final top-1  the last "eval" record
  busy         the device busy, on its own clock (cutrain's step records, and
               torch_reference.py's from the same marks, torch_ref/clock.py): the median of
               busy_pct over the steady state; without it, nvidia-smi's utilization (marked ~)
  launch       the host's time queuing the steps, in % of the wall (GPU only)
  bound        the steady state's bound by cutrain's rule (data/metrics.h), applied to the
               medians of busy, device wait, idle and launch; "host (launch-bound)" when the
               launches took 95% of the compute time or more
  pipeline     cutrain only: the median of its records' pipeline_ratio, wall over the longer
               of the loader alone and the device's compute
  proof        PyTorch: the summary's proof (torch_ref/proof.py), PASS or FAIL with why;
               cutrain: whether its CUDA graphs ran and for how many steps (its log)
A setting's cell is the median over its seeds, with the range when there are several. A seed
that never reached the target counts as infinitely late in the median of the time to it (so 1
of 3 seeds reaching it is "not reached"), with the count that did beside it.
"Where cutrain loses" lists every setting whose median beats the best cutrain setting's (the
launched run or --cuda-graph), and by how much; the strongest PyTorch row is named (the
fastest tuned row whose proof passed). Then each run's proof lines.
"""
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from torch_ref import proof as tproof  # noqa: E402
from torch_ref.clock import BOUND_PCT, LAUNCH_BOUND_PCT, run_bound  # noqa: E402


def records(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def steady(recs, key):
    steps = [r for r in recs if r["kind"] == "step"]
    late = [r for r in steps if r["epoch"] >= 2] or steps
    values = [r[key] for r in late if r.get(key) is not None]
    return statistics.median(values) if values else None


def read(folder, name):
    path = os.path.join(folder, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return f.read()


def cutrain_proof(folder):
    """cutrain's graphs, replays, launches per step and kernel plan, from its log and config."""
    log = read(folder, "log") or ""
    cfg = json.loads(read(folder, "config.json") or "{}")
    graphs = re.search(r"^(CUDA graphs: \w+.*)$", log, re.M)
    captured = re.search(r"captured at step (\d+) as two CUDA graphs \(forward and backward: "
                         r"(\d+) nodes; the update: (\d+) nodes\)", log)
    refused = re.search(r"CUDA refused to capture the step \((.*?)\); training", log)
    replays = re.search(r"CUDA graph: (\d+) of (\d+) steps replayed", log)
    lines = [f"proof: cutrain: {graphs.group(1) if graphs else 'CUDA graphs: off (not on a GPU)'}"]
    if captured:
        lines.append(f"proof: captured at step {captured.group(1)}: {captured.group(2)} + "
                     f"{captured.group(3)} nodes (forward and backward, the update)")
    if refused:
        lines.append(f"proof: CUDA refused the capture: {refused.group(1)}")
    if replays:
        lines.append(f"proof: replays {replays.group(1)} of {replays.group(2)} steps")
    planned = re.search(r"^Total: (\d+) launches", read(os.path.dirname(folder),
                                                         "step-plan.txt") or "", re.M)
    lines.append(f"proof: launches per step: {planned.group(1) if planned else '-'} planned "
                 f"(cutrain describe --step)" + (f", {int(captured.group(2)) + int(captured.group(3))}"
                                                 " in the captured graphs" if captured else ""))
    lines.append(f"proof: kernel plan {cfg.get('kernel_plan') or '-'} (--conv "
                 f"{cfg.get('conv', '-')}, --linear {cfg.get('linear', '-')})")
    short = ("graph, " + f"{replays.group(1)} of {replays.group(2)} steps" if replays and
             int(replays.group(1)) > 0 else "no graph" + (" (refused)" if refused else ""))
    return short, lines


def run_numbers(folder, target):
    recs = records(os.path.join(folder, "metrics.jsonl"))
    evals = [r for r in recs if r["kind"] == "eval"]
    summary = next((r for r in recs if r["kind"] == "summary"), {})
    start = next((r for r in recs if r["kind"] == "start"), {})
    n = {"images_per_s": steady(recs, "images_per_s"),
         "final_top1": evals[-1]["top1"] if evals else None,
         "time_to_target": next((e["time"] for e in evals if e["top1"] >= target), None),
         "ran": summary.get("ran")}
    # set-up: process start to the clock's start (cutrain: its start record; PyTorch: summary)
    n["setup_s"] = summary.get("startup_s", start.get("setup_s"))
    n["setup_parts"] = ({"conv auto": start.get("conv_auto_s")} if start.get("setup_s") is not None
                        else {"decode": summary.get("decode_s"),
                              "warm-up, compile/capture, check": summary.get("setup_s")})
    n["from_start"] = (n["setup_s"] + n["time_to_target"]
                       if n["setup_s"] is not None and n["time_to_target"] is not None else None)
    wall = read(folder, "wall_s")
    n["wall_s"] = float(wall) if wall else None
    busy, wait, idle, launch = (steady(recs, k) for k in
                                ("busy_pct", "device_wait_pct", "idle_pct", "launch_pct"))
    n["busy"], n["busy_from"], n["launch"] = busy, "clock", launch
    if busy is None:
        util = read(folder, "gpu_util.txt")
        if util is not None:
            samples = [float(v) for v in util.split() if v.replace(".", "").isdigit()]
            n["busy"], n["busy_from"] = (statistics.mean(samples) if samples else None), "smi"
    n["bound"] = (run_bound(idle or 0.0, wait or 0.0, busy, launch or 0.0)
                  if busy is not None and wait is not None else None)
    if (n["bound"] == "host" and (idle or 0.0) <= BOUND_PCT and launch and
            100 * launch >= LAUNCH_BOUND_PCT * busy):  # host-bound by its launches alone
        n["bound"] = "host (launch-bound)"
    n["pipeline_ratio"] = steady(recs, "pipeline_ratio")
    proof = summary.get("proof")
    if proof is not None:  # PyTorch: checked again here, whatever the run said
        failed = tproof.failures(summary.get("mode"), proof)
        n["proof"] = "PASS" if not failed else "FAIL: " + "; ".join(failed)
        n["proof_ok"] = not failed
        n["proof_lines"] = tproof.lines(summary.get("mode"), proof)
        n["cache"] = proof.get("compile_cache")
    else:
        n["proof"], n["proof_lines"] = cutrain_proof(folder)
        n["proof_ok"], n["cache"] = True, None
    return n


def median_cell(values, fmt, scale=1.0, missing="-"):
    v = [x * scale for x in values if x is not None]
    if not v:
        return missing
    s = fmt.format(statistics.median(v))
    if min(v) != max(v):
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
    if key in ("time_to_target", "from_start"):  # not reached: infinitely late
        v = [r.get(key) if r.get(key) is not None else float("inf") for r in runs]
        m = statistics.median(v) if v else None
        return None if m is None or m == float("inf") else m
    v = [r.get(key) for r in runs if r.get(key) is not None]
    return statistics.median(v) if v else None


def setup_cell(runs):
    """The median set-up, its parts, and the compile caches (cold: compiled from nothing)."""
    cell = median_cell([r["setup_s"] for r in runs], "{:.1f}")
    parts = [f"{k} {median_of([r['setup_parts'] for r in runs], k):.1f}"
             for k in runs[0]["setup_parts"] if any(r["setup_parts"].get(k) is not None
                                                    for r in runs)]
    caches = text_cell([r["cache"] for r in runs if r["cache"] not in (None, "none")])
    return cell + (f" ({'; '.join(parts)})" if parts else "") + (
        f", cache {caches}" if caches != "-" else "")


def table(out, target, settings):
    rows = {}
    for s in settings:
        runs = sorted(d for d in os.listdir(out) if d.startswith(s + "-s") and
                      d[len(s) + 2:].isdigit() and
                      os.path.exists(os.path.join(out, d, "metrics.jsonl")))
        if runs:
            rows[s] = [dict(run_numbers(os.path.join(out, d), target), folder=d) for d in runs]
    pct = f"{100 * target:.0f}%"
    lines = [f"| setting | runs | images/s (steady) | wall s | set-up s | time to {pct} s, "
             f"clock | time to {pct} s, from start | final top-1 | busy | launch | bound | "
             "pipeline | proof |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for s, runs in rows.items():
        col = lambda k: [r.get(k) for r in runs]  # noqa: E731
        smi = any(r["busy_from"] == "smi" and r["busy"] is not None for r in runs)
        ran = text_cell(col("ran"))
        lines.append(
            f"| {s}{' (' + ran + ')' if ran != '-' else ''} | {len(runs)} | "
            f"{median_cell(col('images_per_s'), '{:,.0f}')} | {median_cell(col('wall_s'), '{:.1f}')} | "
            f"{setup_cell(runs)} | {time_cell(col('time_to_target'))} | "
            f"{time_cell(col('from_start'))} | "
            f"{median_cell(col('final_top1'), '{:.2f}%', 100)} | "
            f"{'~' if smi else ''}{median_cell(col('busy'), '{:.0f}%')} | "
            f"{median_cell(col('launch'), '{:.0f}%')} | "
            f"{text_cell(col('bound'))} | {median_cell(col('pipeline_ratio'), '{:.2f}')} | "
            f"{text_cell(col('proof'))} |")

    # Where cutrain loses: every measure on which another setting's median does better than
    # the best of cutrain's settings.
    ours = [s for s in rows if s.startswith("cutrain")]
    tuned = [s for s in rows if s.startswith("torch-tuned") and
             all(r["proof_ok"] for r in rows[s]) and median_of(rows[s], "images_per_s")]
    if tuned:
        best = max(tuned, key=lambda s: median_of(rows[s], "images_per_s"))
        lines.append(f"\nPyTorch's strongest row (the fastest tuned setting whose proof "
                     f"passed): {best}, {median_of(rows[best], 'images_per_s'):,.0f} images/s.")
    failed = [s for s in rows if not all(r["proof_ok"] for r in rows[s])]
    if failed:
        lines.append("\nRows that do not prove their label (not PyTorch's strongest): " +
                     ", ".join(failed) + ".")
    if ours:
        better = {"images_per_s": (max, "images/s"), "wall_s": (min, "wall time"),
                  "time_to_target": (min, f"time to {pct} on the run's clock"),
                  "from_start": (min, f"time to {pct} from the process's start"),
                  "final_top1": (max, "final top-1")}
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
    lines.append("\nWhat proves each row's label (torch_ref/proof.py; cutrain's log):\n")
    for s, runs in rows.items():
        for r in runs:
            lines.append(f"- {r['folder']}:")
            lines += [f"  - {line}" for line in r["proof_lines"]]
    return "\n".join(lines)


def main():
    out, target = sys.argv[1], float(sys.argv[2])
    print(table(out, target, sys.argv[3:]))


if __name__ == "__main__":
    main()
