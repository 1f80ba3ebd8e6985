#!/usr/bin/env python3
"""A recipe search for Fashion-MNIST, done honestly: every recipe is trained on part of the
training set and scored on a held-out part of it (--val-split), never on the test set.

Each recipe is a name and the `cutrain train` options that make it (RECIPES below, or a JSON
file of {"name": "options"} with --recipes). Every run gets the same data and split: the first
--limit-train images of --train, --val-split of them held out (stratified, fixed by --seed).
From each run's metrics.jsonl: the held-out top-1 after the last epoch and the best epoch's,
of the weights and, with --ema, of their average; with --tta also the last checkpoint's
held-out top-1 with test-time flips (`cutrain eval --tta flip`, when the recipe did not
already evaluate with them). The wall time is the whole `cutrain train` process.

Results go, one JSON object per recipe, to WORK/results.jsonl (a recipe already there is not
run again: a search can stop and go on), and as a markdown table to stdout and --out.

  bench/recipe_search.py --dry-run                          # the plan
  bench/recipe_search.py --only baseline,augment            # two recipes
  bench/recipe_search.py --limit-train 12000 --epochs 5     # the reduced budget of a CPU
  bench/recipe_search.py --recipes more.json --out bench/results/recipe-fmnist-DATE.md

The winner is then trained from scratch on all 60,000 images with fresh seeds and evaluated
once on the test set (bench/results/recipe-fmnist-*.md says how); this script never does that.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# name -> options added to the common ones. The common budget (--epochs) applies unless a
# recipe sets its own.
RECIPES = {
    "baseline": "",
    "augment": "--augment",
    "augment-pad2": "--augment --pad 2",
    "smooth0": "--label-smoothing 0",
    "smooth0.2": "--label-smoothing 0.2",
    "nesterov": "--optimizer nesterov",
    "lr0.05": "--lr 0.05",
    "lr0.2": "--lr 0.2",
    "batch256": "--batch 256 --lr 0.2",
    "onecycle": "--schedule onecycle",
    "wd1e-3": "--wd 1e-3",
    "augment-nesterov": "--augment --optimizer nesterov",
    # the averages and flips (--ema, --tta), and combinations of what helped above
    "ema0.99": "--ema 0.99",
    "ema0.95": "--ema 0.95",
    "tta": "--tta flip",
    "lr0.2-smooth0": "--lr 0.2 --label-smoothing 0",
    "lr0.2-ema0.99": "--lr 0.2 --ema 0.99",
    "lr0.2-smooth0-ema0.99": "--lr 0.2 --label-smoothing 0 --ema 0.99",
    "resnet": "--model resnet",
    # a longer budget, where augmentation has time to pay off
    "e15": "--epochs 15",
    "e15-augment": "--epochs 15 --augment",
    "e15-augment-ema0.99-tta": "--epochs 15 --augment --ema 0.99 --tta flip",
    "e15-lr0.2-smooth0-ema0.99": "--epochs 15 --lr 0.2 --label-smoothing 0 --ema 0.99",
    "e15-augment-lr0.2-smooth0-ema0.99-tta":
        "--epochs 15 --augment --lr 0.2 --label-smoothing 0 --ema 0.99 --tta flip",
    "e15-lr0.2-smooth0": "--epochs 15 --lr 0.2 --label-smoothing 0",  # the average's share
}


def last_and_best(metrics_path, key):
    """The last and the best value of `key` over the eval records of a metrics file."""
    vals = []
    with open(metrics_path) as f:
        for line in f:
            r = json.loads(line)
            if r.get("kind") == "eval" and key in r:
                vals.append(r[key])
    return (vals[-1], max(vals)) if vals else (None, None)


def run_recipe(a, name, options, work):
    out = os.path.join(work, name)
    cmd = [a.bin, "train", "--train", a.train, "--limit-train", str(a.limit_train),
           "--val-split", str(a.val_split), "--seed", str(a.seed), "--device", "cpu",
           "--out", out, "--log-every", "1000000"]
    if "--epochs" not in options.split():
        cmd += ["--epochs", str(a.epochs)]
    cmd += shlex.split(options) + shlex.split(a.extra)
    print("$ " + " ".join(shlex.quote(c) for c in cmd), file=sys.stderr, flush=True)
    if a.dry_run:
        return None
    if os.path.isdir(out):
        subprocess.run(["rm", "-rf", out], check=True)
    t0 = time.time()
    with open(os.path.join(work, name + ".log"), "w") as log:
        subprocess.run(cmd, check=True, stdout=log, stderr=subprocess.STDOUT)
    seconds = time.time() - t0
    config = json.load(open(os.path.join(out, "config.json")))
    metrics = os.path.join(out, "metrics.jsonl")
    row = {"name": name, "options": options, "epochs": config["epochs"], "seconds": seconds}
    row["last"], row["best"] = last_and_best(metrics, "top1")
    row["ema_last"], row["ema_best"] = last_and_best(metrics, "ema_top1")
    if a.tta and config.get("tta", "none") == "none":
        row["tta_last"] = tta_top1(a, out)
    return row


def tta_top1(a, run):
    """The held-out top-1 of a run's last checkpoint with test-time flips (of the weights'
    average when the run kept one: cutrain eval's --weights auto)."""
    ev = subprocess.run([a.bin, "eval", "--checkpoint", newest(run), "--device", "cpu",
                         "--tta", "flip"], check=True, capture_output=True, text=True)
    return parse_top1(ev.stdout)


def rewrite(results, done):
    with open(results + ".tmp", "w") as f:
        for row in done.values():
            f.write(json.dumps(row) + "\n")
    os.replace(results + ".tmp", results)


def newest(run):
    steps = sorted(f for f in os.listdir(run) if f.startswith("step-") and f.endswith(".h5"))
    return os.path.join(run, steps[-1])


def parse_top1(text):
    for line in text.splitlines():
        if "top-1" in line and line.startswith("loss"):
            return float(line.split("top-1")[1].split("%")[0]) / 100
    raise RuntimeError("no top-1 in cutrain eval's output:\n" + text)


def pct(v):
    return "" if v is None else "%.2f%%" % (100 * v)


def table(rows, a):
    lines = ["| recipe | options | epochs | held-out top-1, last | best epoch | EMA last | "
             "EMA best | last, TTA flip (of the EMA when kept) | wall s |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in sorted(rows, key=lambda r: -max(v for v in [r["last"], r.get("ema_last"),
                                                         r.get("tta_last")] if v is not None)):
        lines.append("| %s | `%s` | %d | %s | %s | %s | %s | %s | %.0f |" % (
            r["name"], r["options"] or "(defaults)", r["epochs"], pct(r["last"]),
            pct(r["best"]), pct(r.get("ema_last")), pct(r.get("ema_best")),
            pct(r.get("tta_last")), r["seconds"]))
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", default=os.path.join(ROOT, "bin/cutrain"))
    p.add_argument("--train", default=os.path.join(ROOT, "data-cache/fashion-mnist/train.txt"))
    p.add_argument("--limit-train", type=int, default=12000)
    p.add_argument("--val-split", type=float, default=0.25)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--extra", default="", help="options added to every recipe")
    p.add_argument("--recipes", help="a JSON file of {name: options} instead of the built-in list")
    p.add_argument("--only", help="comma-separated recipe names")
    p.add_argument("--tta", action="store_true", help="also evaluate each last checkpoint with "
                                                      "--tta flip")
    p.add_argument("--work", default=os.path.join(ROOT, "runs/recipe-search"))
    p.add_argument("--out", help="also write the table here")
    p.add_argument("--dry-run", action="store_true")
    a = p.parse_args()
    recipes = json.load(open(a.recipes)) if a.recipes else RECIPES
    if a.only:
        recipes = {n: recipes[n] for n in a.only.split(",")}
    os.makedirs(a.work, exist_ok=True)
    results = os.path.join(a.work, "results.jsonl")
    done = {}
    if os.path.exists(results):
        for line in open(results):
            r = json.loads(line)
            done[r["name"]] = r
    for name, options in recipes.items():
        if name in done:
            row = done[name]
            run = os.path.join(a.work, name)
            if a.tta and "tta_last" not in row and os.path.isdir(run) and not a.dry_run:
                row["tta_last"] = tta_top1(a, run)  # a recipe run before --tta was asked for
                rewrite(results, done)
            continue
        row = run_recipe(a, name, options, a.work)
        if row:
            done[name] = row
            with open(results, "a") as f:
                f.write(json.dumps(row) + "\n")
            print("%s: %s (best %s) in %.0f s" % (name, pct(row["last"]), pct(row["best"]),
                                                  row["seconds"]), file=sys.stderr, flush=True)
    if a.dry_run:
        return
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    head = ("Held-out split: the first %d images of %s, %g of them held out (seed %d); "
            "--device cpu; commit %s; %s.\n\n" % (a.limit_train, os.path.relpath(a.train, ROOT),
                                                 a.val_split, a.seed, commit,
                                                 time.strftime("%Y-%m-%d")))
    text = head + table(list(done.values()), a)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
