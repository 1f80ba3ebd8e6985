#!/usr/bin/env python3
"""How cutrain's CPU training shares the cores between decoding and computing, measured.

For two workloads, every split of the cores (--threads D decode threads, --compute-threads C
compute threads) and the default (neither option given) train in fresh processes, in rounds
(each round runs every split once, so a machine that gets busier slows all of them alike):
  compute-bound  Fashion-MNIST JPEGs (28x28 gray), the default model, batch 64: decoding an
                 image takes microseconds, a step of 64 about 0.2 s on one core
  decode-bound   192x192 RGB JPEGs made here from Fashion-MNIST (upscaled, tinted; needs
                 PIL: Debian's python3-pil), cut to 64x64, a one-conv model (the step costs
                 about what decoding its images does)
Each cell is the median over the rounds of "images/s in the steps" (cutrain's own summary:
the steps, their waits for data included, start-up and the checkpoint left out), and its
ratio to the best cell of the workload; the line under each table is the default's ratio.
The splits: D in {1, N-1, N} and C in {1, N/2, N} for N cores (this process's affinity).

  bench/cpu_threads.py                       # 3 rounds, report to bench/results/
  bench/cpu_threads.py --rounds 1 --dry-run  # the plan
"""
import argparse
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time

from cpu_training import cpu_name, git_commit, load_average, write_report

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATE = time.strftime("%Y-%m-%d")

TINY_MODEL = """# bench/cpu_threads.py's decode-bound model: little compute per image
conv 8 3x3 stride=2 pad=1
relu
maxpool 2x2
flatten
linear classes
"""


def parse_args():
    a = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    a.add_argument("--cutrain", default=os.path.join(ROOT, "bin", "cutrain"))
    a.add_argument("--data", default=os.path.join(ROOT, "data-cache", "fashion-mnist"),
                   help="Fashion-MNIST JPEGs (bin/cutrain import-fashion-mnist: made or reused)")
    a.add_argument("--work", default="/tmp/cutrain-cpu-threads")
    a.add_argument("--rounds", type=int, default=3)
    a.add_argument("--compute-images", type=int, default=4800,
                   help="compute-bound: images trained (one epoch)")
    a.add_argument("--decode-images", type=int, default=3000,
                   help="decode-bound: images made, each trained --decode-epochs times")
    a.add_argument("--decode-epochs", type=int, default=8)
    a.add_argument("--out", default=os.path.join(HERE, "results", f"cpu-threads-{DATE}.md"))
    a.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    return a.parse_args()


def splits(cores):
    """(D, C) pairs, None for the default, first."""
    ds = sorted({1, max(1, cores - 1), cores})
    cs = sorted({1, max(1, cores // 2), cores})
    return [None] + [(d, c) for d in ds for c in cs]


def workloads(args):
    fm = os.path.join(args.data, "train.txt")
    big = os.path.join(args.work, "decode-bound", "train.txt")
    model = os.path.join(args.work, "decode-bound", "tiny.model")
    return [
        ("compute-bound", ["--train", fm, "--limit-train", str(args.compute_images),
                           "--epochs", "1", "--batch", "64"]),
        ("decode-bound", ["--train", big, "--model", model, "--size", "64", "--lr", "0.01",
                          "--epochs", str(args.decode_epochs), "--batch", "64"]),
    ]


def make_decode_data(args):
    """--decode-images 192x192 RGB JPEGs from the first Fashion-MNIST training images."""
    try:
        from PIL import Image
    except ImportError:
        sys.exit("cpu_threads: the decode-bound images need PIL (Debian: apt-get install "
                 "python3-pil)")
    folder = os.path.join(args.work, "decode-bound")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "tiny.model"), "w") as f:
        f.write(TINY_MODEL)
    rows = []
    with open(os.path.join(args.data, "train.txt")) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                rows.append(line.split())
            if len(rows) == args.decode_images:
                break
    lines = []
    for i, (path, label) in enumerate(rows):
        src = path if os.path.isabs(path) else os.path.join(args.data, path)
        out = os.path.join(folder, f"{i:05d}.jpg")
        if not os.path.exists(out):
            im = Image.open(src).convert("RGB").resize((192, 192), Image.BILINEAR)
            tint = [0.6 + 0.4 * ((i * k) % 7) / 6 for k in (1, 3, 5)]
            im = Image.merge("RGB", [ch.point(lambda v, t=t: int(v * t))
                                     for ch, t in zip(im.split(), tint)])
            im.save(out, quality=92)
        lines.append(f"{out} {label}\n")
    with open(os.path.join(folder, "train.txt"), "w") as f:
        f.writelines(lines)


def argv_of(args, work_args, split, out):
    argv = [args.cutrain, "train", "--device", "cpu"] + work_args + [
        "--out", out, "--log-every", "1000000"]
    if split:
        argv += ["--threads", str(split[0]), "--compute-threads", str(split[1])]
    return argv


RATE = re.compile(r"^trained \d+ steps in [0-9.]+ s \(([0-9.]+) images/s in the steps\)", re.M)
THREADS = re.compile(r"^threads: (\d+) decoding, (\d+) computing", re.M)


def run_one(argv, out):
    shutil.rmtree(out, ignore_errors=True)
    res = subprocess.run(argv, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"cpu_threads: failed ({res.returncode}): {shlex.join(argv)}\n{res.stderr}")
    rate, threads = RATE.search(res.stdout), THREADS.search(res.stdout)
    if not rate or not threads:
        sys.exit(f"cpu_threads: no summary in the output of {shlex.join(argv)}")
    return float(rate.group(1)), (int(threads.group(1)), int(threads.group(2)))


def main():
    args = parse_args()
    cores = len(os.sched_getaffinity(0))  # what the program's default follows
    plan = [(name, split) for name, _ in workloads(args) for split in splits(cores)]
    out = os.path.join(args.work, "run")
    if args.dry_run:
        for name, work_args in workloads(args):
            for split in splits(cores):
                print(f"# {name}\n{shlex.join(argv_of(args, work_args, split, out))}")
        return 0
    # A copy of the program taken at the start: a rebuild meanwhile cannot mix two builds.
    os.makedirs(os.path.join(args.work, "bin"), exist_ok=True)
    args.cutrain = shutil.copy2(args.cutrain, os.path.join(args.work, "bin"))
    subprocess.run([args.cutrain, "import-fashion-mnist", "--out", args.data], check=True,
                   capture_output=True)
    make_decode_data(args)
    load_start = load_average()
    rates = {key: [] for key in plan}
    default_split = {}
    for r in range(args.rounds):
        for name, work_args in workloads(args):
            for split in splits(cores):
                rate, used = run_one(argv_of(args, work_args, split, out), out)
                rates[(name, split)].append(rate)
                if split is None:
                    default_split[name] = used
                print(f"round {r + 1}/{args.rounds} {name} {split or 'default'}: {rate:.0f} "
                      f"images/s", file=sys.stderr)
    commit = git_commit()
    lines = [f"# CPU training: decode and compute threads, {DATE}", "",
             f"host: {cpu_name()}, {cores} cores; load average at the start {load_start}, at "
             f"the end {load_average()}  ",
             f"cutrain {commit}; {args.rounds} rounds, medians; bench/cpu_threads.py", ""]
    for name, _ in workloads(args):
        med = {s: statistics.median(rates[(name, s)]) for s in splits(cores)}
        best = max(med.values())
        d, c = default_split[name]
        lines += [f"## {name}", "", "| decode threads | compute threads | images/s | / best |",
                  "| --- | --- | --- | --- |"]
        for s in splits(cores):
            dd, cc = s if s else (f"default ({d})", f"default ({c})")
            lines.append(f"| {dd} | {cc} | {med[s]:.0f} | {med[s] / best:.2f} |")
        lines += ["", f"default / best: {med[None] / best:.2f}", ""]
    write_report(lines, args.out, "")
    return 0


if __name__ == "__main__":
    sys.exit(main())
