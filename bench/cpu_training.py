#!/usr/bin/env python3
"""cutrain's CPU training speed against PyTorch's, side by side in one run on this machine.

Part 1, training images/s. For each model, batch B and compute thread count T, three fresh
processes train on the first (warm-up + timed) x B Fashion-MNIST training JPEGs, one epoch,
no validation, fp32, a step record every step (--log-every 1):
  reference  bin/cutrain train --device cpu --conv direct --linear direct
  onednn     bin/cutrain train --device cpu --conv onednn --linear onednn   (the CPU default)
  torch      bench/torch_reference.py --device cpu, reading onednn's resolved config.json:
             the same model, initialisation, recipe and images (--python: Debian's PyTorch)
  tuned      the same in PyTorch 2.x at its strongest on a CPU (--tuned-python, e.g. the
             .venv-bench of bench/README.md; left out without one): --mode tuned-compile, the
             data decoded once (resident), the whole step one torch.compile(fullgraph=True,
             mode="max-autotune-no-cudagraphs"), compiled before its clock starts; run twice,
             with channels_last (tuned-cl) and without (tuned-nchw): the table's tuned cell is
             the faster of the two for each model, batch and thread count, and says which
The target compares cutrain's default (onednn) with the strongest of the PyTorch rows.
Every process gets OMP_NUM_THREADS=T compute threads (checked: torch.get_num_threads() is T
under it; torch_reference.py sets no thread count of its own). Decoding runs beside them:
cutrain on --decode-threads threads (its --threads), torch in --workers DataLoader processes.
Steady-state images/s = timed steps x B / (the "time" of step warm-up + timed - the "time"
of step warm-up), from each program's metrics.jsonl: the same rule for both, and the first
steps (oneDNN creates its plans on first use, caches fill) are left out. The reference is
slow, so it gets fewer steps.

Part 2 (--layers, the default; --no-layers skips it), conv layers one by one:
bin/bench_cpu_kernels --impl onednn --json FILE times every conv and linear layer of a model
(forward, backward data, backward filter with bias; medians of --layer-repeats after warm-up,
on 1 and N threads); this script then times the same conv shapes in torch, NCHW fp32, with
F.conv2d and aten.convolution_backward (what autograd calls in training), on 1 and N threads
(torch.set_num_threads), and prints torch ms / cutrain ms (> 1: cutrain is faster).
--layers-json FILE takes cutrain's side from a saved --json file instead.

--guard is the check to run after any change to a CPU kernel or to the step (bench/README.md):
the default model, batch 128, 1 compute thread, 4 warm-up + 16 timed steps, 3 rounds, oneDNN
against torch (and the tuned row when there is one), no reference and no layers: about two
minutes. It prints cutrain / torch for each round; below 1, or well below the last recorded
figure (bench/results/), is a slowdown to find before it lands. Its report goes to
results/cpu-guard-<date>.md.

The programs are copied into --work first and run from there; the report (markdown) goes to
stdout and to --out.

  bench/cpu_training.py                 # default and resnet, batch 64 and 128, 1 and 2 threads
  bench/cpu_training.py --quick         # the default model, batch 64 only: a check
  bench/cpu_training.py --guard         # after any change to a CPU kernel or the step (below)
  bench/cpu_training.py --models default --no-layers --rounds 3   # the target, medians
  bench/cpu_training.py --dry-run       # print the plan, run nothing
  bench/cpu_training.py --no-layers --models default --batches 128 --threads 2
"""
import argparse
import ctypes
import json
import os
import re
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DATE = time.strftime("%Y-%m-%d")

# Run under --python with OMP_NUM_THREADS set: what torch is and how many threads it took.
# The tuned row's two runs, by memory format (the faster of the two is the row's).
TUNED = {"channels-last": "tuned-cl", "no-channels-last": "tuned-nchw"}

TORCH_PROBE = ("import json, re, torch; m = re.search(r'MKL-DNN (v[0-9.]+)', "
               "torch.__config__.show()); print(json.dumps([torch.__version__, "
               "torch.get_num_threads(), m.group(1) if m else 'none']))")


def int_list(text):
    return [int(v) for v in text.split(",")]


def parse_args():
    a = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("--models", default="default,resnet", help="comma-separated")
    a.add_argument("--batches", type=int_list, default=[64, 128], help="comma-separated")
    a.add_argument("--threads", type=int_list, default=[1, 2],
                   help="compute thread counts T, comma-separated (OMP_NUM_THREADS)")
    a.add_argument("--quick", action="store_true", help="the default model at batch 64 only")
    a.add_argument("--guard", action="store_true",
                   help="the check after a CPU kernel change: default model, batch 128, 1 "
                   "thread, 4 + 16 steps, 3 rounds, no reference, no layers")
    a.add_argument("--reference", action=argparse.BooleanOptionalAction, default=True,
                   help="the reference kernels' row (--conv direct --linear direct)")
    a.add_argument("--warmup", type=int, default=3, help="onednn and torch: steps left out")
    a.add_argument("--timed", type=int, default=12, help="onednn and torch: steps timed")
    a.add_argument("--ref-warmup", type=int, default=1, help="reference: steps left out")
    a.add_argument("--ref-timed", type=int, default=4, help="reference: steps timed")
    a.add_argument("--rounds", type=int, default=1,
                   help="run every process this many times, round-robin; report medians")
    a.add_argument("--decode-threads", type=int, default=1, help="cutrain's --threads")
    a.add_argument("--workers", type=int, default=1, help="torch's DataLoader processes")
    a.add_argument("--python", default="/usr/bin/python3", help="the Python that has torch")
    venv = os.path.join(ROOT, ".venv-bench", "bin", "python")
    a.add_argument("--tuned-python", default=venv if os.path.exists(venv) else None,
                   help="a Python with PyTorch 2.x for the tuned row (default: .venv-bench's "
                   "when there is one); 'none' leaves the row out")
    a.add_argument("--cutrain", default=os.path.join(ROOT, "bin", "cutrain"))
    a.add_argument("--bench-kernels", default=os.path.join(ROOT, "bin", "bench_cpu_kernels"))
    a.add_argument("--data", default=os.path.join(ROOT, "data-cache", "fashion-mnist"),
                   help="Fashion-MNIST JPEGs (bin/cutrain import-fashion-mnist: made or reused)")
    a.add_argument("--work", default=os.path.join(ROOT, "runs", "cpu-training-" +
                                                  time.strftime("%Y%m%d-%H%M%S")),
                   help="folder for the runs' outputs and logs")
    a.add_argument("--out", help="the report (default: results/cpu-training-<date>.md, "
                   "results/cpu-guard-<date>.md with --guard)")
    a.add_argument("--layers", action=argparse.BooleanOptionalAction, default=True,
                   help="part 2: conv layers against torch")
    a.add_argument("--layers-batch", type=int, default=64)
    a.add_argument("--layer-repeats", type=int, default=5, help="timed runs per pass (median)")
    a.add_argument("--layers-json", help="part 2's cutrain side from this bench_cpu_kernels "
                   "--json file instead of running it")
    a.add_argument("--dry-run", action="store_true", help="print the plan, run nothing")
    a.add_argument("--torch-layers", metavar="JSON", help=argparse.SUPPRESS)  # see main()
    args = a.parse_args()
    args.models = ["default"] if args.quick else args.models.split(",")
    if args.tuned_python == "none":
        args.tuned_python = None
    if args.quick:
        args.batches = [64]
    if args.guard:
        args.models, args.batches, args.threads = ["default"], [128], [1]
        args.warmup, args.timed, args.rounds = 4, 16, 3
        args.reference, args.layers = False, False
    if args.out is None:
        args.out = os.path.join(HERE, "results",
                                f"cpu-{'guard' if args.guard else 'training'}-{DATE}.md")
    if min(args.warmup, args.ref_warmup) < 1 or min(args.timed, args.ref_timed) < 1:
        a.error("every program needs at least 1 warm-up step and 1 timed step")
    if args.rounds < 1:
        a.error("--rounds must be at least 1")
    return args


# ---- part 1: training runs ----------------------------------------------------------------

class Run:
    """One training process: what it is, its command line, where it writes."""

    def __init__(self, model, batch, threads, program, argv, out, warmup, timed):
        self.model, self.batch, self.threads, self.program = model, batch, threads, program
        self.argv, self.out, self.warmup, self.timed = argv, out, warmup, timed
        self.env = {"OMP_NUM_THREADS": str(threads)}
        self.rates, self.busy = [], []  # per round: images/s, cores busy

    def shell(self):
        return " ".join(f"{k}={v}" for k, v in self.env.items()) + " " + shlex.join(self.argv)


def plan_training(args):
    runs = []
    for model in args.models:
        for B in args.batches:
            for T in args.threads:
                tag = os.path.join(args.work, f"{model}-b{B}-t{T}")
                programs = [("onednn", "onednn", args.warmup, args.timed)]
                if args.reference:
                    programs.insert(0, ("reference", "direct", args.ref_warmup, args.ref_timed))
                for program, impl, warm, timed in programs:
                    argv = [args.cutrain, "train", "--train",
                            os.path.join(args.data, "train.txt"), "--model", model,
                            "--batch", str(B), "--epochs", "1",
                            "--limit-train", str((warm + timed) * B), "--device", "cpu",
                            "--conv", impl, "--linear", impl,
                            "--threads", str(args.decode_threads), "--log-every", "1",
                            "--out", f"{tag}-{program}"]
                    runs.append(Run(model, B, T, program, argv, f"{tag}-{program}", warm,
                                    timed))
                pythons = [("torch", args.python, [])]
                if args.tuned_python:
                    pythons += [(TUNED[layout], args.tuned_python,
                                 ["--mode", "tuned-compile", f"--{layout}"])
                                for layout in ("channels-last", "no-channels-last")]
                for program, python, mode in pythons:
                    argv = [python, os.path.join(HERE, "torch_reference.py"), "--config",
                            f"{tag}-onednn/config.json", "--cutrain", args.cutrain, "--device",
                            "cpu", "--workers", str(args.workers), "--out",
                            f"{tag}-{program}"] + mode
                    runs.append(Run(model, B, T, program, argv, f"{tag}-{program}",
                                    args.warmup, args.timed))
    return runs


def run_logged(argv, env, log):
    """Runs argv with env added, output to log; returns (wall s, CPU s of it and its
    children). A failure stops the benchmark, showing the end of the log."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    with open(log, "w") as f:
        rc = subprocess.call(argv, env={**os.environ, **env}, stdout=f,
                             stderr=subprocess.STDOUT, cwd=ROOT)
    wall = time.time() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if rc != 0:
        with open(log) as f:
            tail = "".join(f.readlines()[-15:])
        sys.exit(f"cpu_training: exit status {rc} from\n  {shlex.join(argv)}\n{tail}"
                 f"(whole log: {log})")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def steady_rate(run):
    """images/s over steps warmup+1 .. warmup+timed, from the "time" of the step records."""
    times = {}
    with open(os.path.join(run.out, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            if r["kind"] == "step":
                times[r["step"]] = r["time"]
    a, b = run.warmup, run.warmup + run.timed
    if a not in times or b not in times:
        sys.exit(f"cpu_training: {run.out}/metrics.jsonl lacks the step records {a} and {b}")
    return run.timed * run.batch / (times[b] - times[a])


def check_tuned(run):
    """A tuned row must prove its label (torch_ref/proof.py: compiled as a whole step, no
    graph break, recompile or skip): a fallback would put an eager number under its name."""
    with open(os.path.join(run.out, "metrics.jsonl")) as f:
        summary = [json.loads(line) for line in f if '"summary"' in line][-1]
    if summary.get("proof_failures") != []:
        sys.exit(f"cpu_training: the tuned run {run.out} does not prove its label: "
                 f"{summary.get('proof_failures')} (notes: {summary.get('notes')})")


def train_all(runs, rounds):
    """Every run once per round, in plan order (each torch run right after the cutrain runs it
    is compared with), so a machine that gets busier slows both sides of a ratio alike."""
    for k in range(rounds):
        for i, run in enumerate(runs, 1):
            shutil.rmtree(run.out, ignore_errors=True)  # torch_reference appends to metrics
            wall, cpu = run_logged(run.argv, run.env, run.out + ".log")
            if run.program in TUNED.values():
                check_tuned(run)
            run.rates.append(steady_rate(run))
            run.busy.append(cpu / wall)
            print(f"[round {k + 1}/{rounds}, {i}/{len(runs)}] {run.model} batch {run.batch} "
                  f"T={run.threads} {run.program}: {run.rates[-1]:.1f} images/s ({wall:.0f} s)",
                  file=sys.stderr, flush=True)
    for run in runs:
        run.images_per_s, run.cores = statistics.median(run.rates), statistics.median(run.busy)


def training_report(runs):
    by = {(r.model, r.batch, r.threads, r.program): r for r in runs}
    rounds = len(runs[0].rates)
    tuned = any(r.program in TUNED.values() for r in runs)
    out = ["## Training, steady-state images/s" +
           (f" (medians of {rounds} rounds)" if rounds > 1 else ""), "",
           "| model | batch | threads | reference | onednn | torch | " +
           ("torch tuned channels_last | torch tuned NCHW | " if tuned else "") +
           "onednn / reference | onednn / torch | " +
           ("onednn / tuned (the faster layout) | " if tuned else "") +
           "target onednn / the stronger >= 1 |" +
           (" onednn / the stronger, each round |" if rounds > 1 else ""),
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- |" +
           (" --- | --- | --- |" if tuned else "") +
           (" --- |" if rounds > 1 else "")]
    for r in runs:
        if r.program != "torch":
            continue
        key = (r.model, r.batch, r.threads)
        ref, dnn = by.get(key + ("reference",)), by[key + ("onednn",)]
        layouts = [by[key + (t,)] for t in TUNED.values()] if tuned else []
        fast = max(layouts, key=lambda p: p.images_per_s) if tuned else None
        peers = [r] + ([fast] if tuned else [])
        strong = max(peers, key=lambda p: p.images_per_s)
        vs = dnn.images_per_s / strong.images_per_s
        target = f"{vs:.2f}" + ((" PASS" if vs >= 1.0 else " FAIL") if r.model == "default"
                                else "")
        each = " ".join(f"{d / max(p.rates[i] for p in peers):.2f}"
                        for i, d in enumerate(dnn.rates))
        tuned_cells = "".join(f"{t.images_per_s:.1f}{'*' if t is fast else ''} | "
                              for t in layouts)
        out.append(f"| {r.model} | {r.batch} | {r.threads} | "
                   f"{f'{ref.images_per_s:.1f}' if ref else '-'} | "
                   f"{dnn.images_per_s:.1f} | {r.images_per_s:.1f} | " + tuned_cells +
                   f"{f'{dnn.images_per_s / ref.images_per_s:.2f}' if ref else '-'} | "
                   f"{dnn.images_per_s / r.images_per_s:.2f} | " +
                   (f"{dnn.images_per_s / fast.images_per_s:.2f} | " if tuned else "") +
                   f"{target} |" + (f" {each} |" if rounds > 1 else ""))
    if tuned:
        out += ["", "torch tuned: PyTorch 2.x, the whole step one torch.compile (--mode "
                "tuned-compile), with and without channels_last; * marks the faster median, "
                "the one the ratios use."]
    out += ["", "Each run: steps warm-up + timed, and cores busy = the process's CPU time "
            "(children included) / its wall time, start-up included.", "",
            "| model | batch | threads | program | steps | cores busy |",
            "| --- | --- | --- | --- | --- | --- |"]
    out += [f"| {r.model} | {r.batch} | {r.threads} | {r.program} | {r.warmup} + {r.timed} | "
            f"{r.cores:.2f} |" for r in runs]
    starved = sum(r.threads > 1 and r.cores < 0.75 * r.threads for r in runs)
    if starved:
        out += ["", f"note: {starved} runs on T > 1 threads kept fewer than 0.75 T cores busy: "
                "other work held cores, so their images/s understate what T threads do."]
    return out


# ---- part 2: conv layers --------------------------------------------------------------------

def plan_layers(args):
    """[(model, cutrain's JSON, bench_cpu_kernels argv or None, torch argv)]"""
    N = max(args.threads)
    torch_argv = [args.python, os.path.abspath(__file__), "--layer-repeats",
                  str(args.layer_repeats), "--torch-layers"]
    if args.layers_json:
        return [(os.path.basename(args.layers_json), args.layers_json, None,
                 torch_argv + [args.layers_json])]
    plans = []
    for model in args.models:
        js = os.path.join(args.work, f"layers-{model}.json")
        bench = [args.bench_kernels, "--model", model, "--batch", str(args.layers_batch),
                 "--threads", str(N), "--repeats", str(args.layer_repeats), "--impl", "onednn",
                 "--json", js]
        plans.append((model, js, bench, torch_argv + [js]))
    return plans


def time_torch_convs(path, repeats):
    """Under --python (this script runs itself so): torch's ms for each conv layer and pass
    of bench_cpu_kernels' JSON at `path`, on 1 and N threads, as JSON on stdout."""
    import torch
    import torch.nn.functional as F

    with open(path) as f:
        kernels = json.load(f)
    N = kernels["threads"]
    conv_backward = torch.ops.aten.convolution_backward

    def median_ms(f):
        for _ in range(2):  # warm-up: oneDNN's primitives are made on first use
            f()
        ms = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            f()
            ms.append(1000 * (time.perf_counter() - t0))
        return statistics.median(ms)

    convs = {L["layer"]: L for L in kernels["layers"] if L["conv"]}  # a record per pass
    out = []
    with torch.no_grad():
        for L in convs.values():
            x = torch.randn(L["N"], L["C"], L["H"], L["W"])  # (N,C,H,W) fp32
            w = torch.randn(L["K"], L["C"], L["R"], L["S"])  # (K,C,R,S)
            b = torch.randn(L["K"])
            st, pad = (L["stride_h"], L["stride_w"]), (L["pad_h"], L["pad_w"])
            dy = torch.randn_like(F.conv2d(x, w, b, st, pad))  # (N,K,P,Q)
            passes = (  # args: dy, x, w, bias sizes, stride, pad, dilation, transposed,
                        # output padding, groups, which of (dx, dw, db)
                lambda: F.conv2d(x, w, b, st, pad),
                lambda: conv_backward(dy, x, w, None, st, pad, (1, 1), False, (0, 0), 1,
                                      (True, False, False)),
                lambda: conv_backward(dy, x, w, [L["K"]], st, pad, (1, 1), False, (0, 0), 1,
                                      (False, True, True)))
            for name, f in zip(("forward", "backward data", "backward filter"), passes):
                ms = {}
                for t in (1, N):
                    torch.set_num_threads(t)
                    ms[t] = median_ms(f)
                out.append({"layer": L["layer"], "pass": name, "ms_1": ms[1], "ms_N": ms[N]})
    json.dump({"threads": N, "layers": out}, sys.stdout)
    return 0


def layers_report(cutrain_json, torch_json):
    with open(cutrain_json) as f:
        kernels = json.load(f)
    N, impl = kernels["threads"], kernels["impl"]
    ours = {(L["layer"], L["pass"]): L for L in kernels["layers"]}
    out = [f"## Conv layers: {kernels['model']}, batch {kernels['batch']}, cutrain {impl} "
           f"against torch", "",
           f"bin/bench_cpu_kernels --impl {impl} and torch (F.conv2d, convolution_backward), "
           f"median ms; ratio = torch ms / cutrain ms (> 1: cutrain faster).", "",
           f"| layer | pass | cutrain 1 thread | torch 1 thread | ratio | cutrain {N} threads | "
           f"torch {N} threads | ratio |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    sums = [0.0] * 4
    for t in torch_json["layers"]:
        c = ours[t["layer"], t["pass"]]
        row = (c["ms_1"], t["ms_1"], c["ms_N"], t["ms_N"])
        sums = [s + v for s, v in zip(sums, row)]
        out.append(f"| {t['layer']} `{c['spec']}` | {t['pass']} | {row[0]:.2f} | {row[1]:.2f} | "
                   f"{row[1] / row[0]:.2f} | {row[2]:.2f} | {row[3]:.2f} | "
                   f"{row[3] / row[2]:.2f} |")
    out += [f"| all conv | | {sums[0]:.1f} | {sums[1]:.1f} | {sums[1] / sums[0]:.2f} | "
            f"{sums[2]:.1f} | {sums[3]:.1f} | {sums[3] / sums[2]:.2f} |", "",
            f"cutrain's whole training step there (bench_cpu_kernels): "
            f"{kernels['step_ms_1']:.1f} ms on 1 thread, {kernels['step_ms_N']:.1f} ms on {N}."]
    return out


def layers_all(args, plans):
    out, env = [], {"OMP_NUM_THREADS": str(max(args.threads))}
    for title, js, bench, torch_argv in plans:
        print(f"layers: {title}", file=sys.stderr, flush=True)
        if bench:
            run_logged(bench, env, js[:-len(".json")] + ".log")
        res = subprocess.run(torch_argv, env={**os.environ, **env}, capture_output=True,
                             text=True)
        if res.returncode != 0:
            sys.exit(f"cpu_training: {shlex.join(torch_argv)} failed:\n{res.stderr}")
        out += layers_report(js, json.loads(res.stdout)) + [""]
    return out


# ---- the report's header ------------------------------------------------------------------

def cpu_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def load_average():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def git_commit():
    """The checkout's commit, -dirty with uncommitted changes."""
    return subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT,
                          capture_output=True, text=True).stdout.strip() or "unknown"


def write_report(lines, out, where):
    """The report (markdown lines) to stdout and to `out`; where it went to stderr."""
    report = "\n".join(lines).rstrip()
    print(report)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        f.write(report + "\n")
    print(f"\nreport: {out}{where}", file=sys.stderr)


def cutrain_onednn(cutrain):
    """The oneDNN version cutrain loads: dnnl_version() of the libdnnl that ldd names."""
    ldd = subprocess.run(["ldd", cutrain], capture_output=True, text=True).stdout
    m = re.search(r"libdnnl\S* => (\S+)", ldd)
    if not m:
        return "not linked"

    class Version(ctypes.Structure):  # dnnl_version_t's leading fields
        _fields_ = [("major", ctypes.c_int), ("minor", ctypes.c_int), ("patch", ctypes.c_int)]

    fn = ctypes.CDLL(m.group(1)).dnnl_version
    fn.restype = ctypes.POINTER(Version)
    v = fn().contents
    return f"v{v.major}.{v.minor}.{v.patch}"


def probe_torch(python, args):
    """torch's version and its oneDNN's in `python`; stops unless OMP_NUM_THREADS=T gives T
    threads."""
    for T in args.threads:
        res = subprocess.run([python, "-c", TORCH_PROBE], capture_output=True, text=True,
                             env={**os.environ, "OMP_NUM_THREADS": str(T)})
        if res.returncode != 0:
            sys.exit(f"cpu_training: no torch in {python} (--python and --tuned-python name "
                     f"ones that have it; on Debian: apt-get install python3-torch):\n"
                     f"{res.stderr}")
        version, got, dnnl = json.loads(res.stdout)
        if got != T:
            sys.exit(f"cpu_training: torch took {got} threads under OMP_NUM_THREADS={T}")
    return version, dnnl


def header(args, commit, torches, load_start):
    return [f"# CPU training: cutrain (reference, oneDNN) against PyTorch, {DATE}"
            + (" (--quick)" if args.quick else "") + (" (--guard)" if args.guard else ""), "",
            f"host: {cpu_name()}, {os.cpu_count()} cores; load average at the start "
            f"{load_start}, at the end {load_average()}  ",
            f"cutrain {commit}, oneDNN {cutrain_onednn(args.cutrain)}; " +
            "; ".join(f"{name} {v} (its oneDNN {dnnl}) in {py}" for name, py, v, dnnl in torches)
            + "  ",
            f"data: Fashion-MNIST JPEGs, 28x28x1, fp32, no augmentation; decoding: cutrain "
            f"--threads {args.decode_threads}, torch {args.workers} DataLoader worker(s); "
            f"compute threads: OMP_NUM_THREADS = T for all three (torch checked)", ""]


METHOD = """Method: each number is one fresh process training one epoch on the first
(warm-up + timed) x batch training images, no evaluation, a step record every step. Images/s
= timed steps x batch / the time between the records of step `warm-up` and step `warm-up +
timed` (each program's "time"), so start-up, the first steps (oneDNN plans, caches) and the
final checkpoint are left out. With --rounds N every process runs N times, round-robin, and
each cell is the median (the ratios of each round are listed too: a torch run follows the
cutrain runs it is compared with); with one round, on a shared machine read the load averages
and cores busy with the numbers."""


def main():
    args = parse_args()
    if args.torch_layers:
        return time_torch_convs(args.torch_layers, args.layer_repeats)
    # Every run uses copies of the programs taken at the start, so a rebuild while the
    # benchmark runs cannot mix two builds (or catch a binary half written).
    programs = [args.cutrain] + ([args.bench_kernels] if args.layers and not args.layers_json
                                 else [])
    snapshot = os.path.join(args.work, "bin")
    args.cutrain, args.bench_kernels = (os.path.join(snapshot, os.path.basename(p)) for p in
                                        (args.cutrain, args.bench_kernels))
    runs = plan_training(args)
    layer_plans = plan_layers(args) if args.layers else []
    if args.dry_run:
        print(shlex.join(["cp"] + programs + [snapshot]))
        print(shlex.join([args.cutrain, "import-fashion-mnist", "--out", args.data]))
        for r in runs:
            print(f"# {r.model} batch {r.batch} T={r.threads} {r.program}: warm-up "
                  f"{r.warmup}, timed {r.timed}\n{r.shell()}")
        for title, _, bench, torch_argv in layer_plans:
            print(f"# conv layers: {title}")
            for argv in filter(None, (bench, torch_argv)):
                print(f"OMP_NUM_THREADS={max(args.threads)} {shlex.join(argv)}")
        print(f"# report: {args.out}")
        return 0
    load_start = load_average()
    commit = git_commit()
    os.makedirs(snapshot, exist_ok=True)
    for p in programs:
        shutil.copy2(p, snapshot)
    torches = [("torch", args.python) + probe_torch(args.python, args)]
    if args.tuned_python:
        torches.append(("tuned: torch", args.tuned_python) + probe_torch(args.tuned_python, args))
    run_logged([args.cutrain, "import-fashion-mnist", "--out", args.data], {},
               os.path.join(args.work, "import.log"))
    train_all(runs, args.rounds)
    body = training_report(runs) + ["", METHOD, ""] + layers_all(args, layer_plans)
    write_report(header(args, commit, torches, load_start) + body, args.out,
                 f"; runs and logs: {args.work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
