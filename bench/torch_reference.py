#!/usr/bin/env python3
"""cutrain's training run, done in PyTorch: the reference cutrain is measured against.

It takes cutrain's own resolved configuration (OUT/config.json of a `cutrain train` run) and
its own model description (`cutrain describe --json`, train/cli/describe.h), so it trains the
same model on the same data with the same recipe:

  model          built layer by layer from cutrain's description, checked layer by layer
                 (torch_ref/model.py); the same initialisation scheme
  optimizer      sgd / nesterov (L2 weight decay on every parameter, as torch.optim.SGD) or
                 adamw (betas 0.9, 0.999, eps 1e-8), lr, momentum, wd from the config
  schedule       per step, nn/schedule.cpp exactly: linear warm-up, then cosine/linear decay
                 to 0 (or constant, or onecycle)
  loss           softmax cross-entropy with the config's label smoothing, mean over the batch
  batches        `batch` images a step (`accum` micro-batches), shuffled each epoch, the last
                 partial batch dropped; `epochs` epochs; evaluation after each epoch. One
                 difference with accum > 1: PyTorch's usual loop, used here, moves BatchNorm's
                 running statistics once per micro-batch, cutrain once per step from their mean
                 (train/replicas/REPLICAS.md), so evaluations differ a little
  data           the same image list, crop/flip/pad and mean/std (torch_ref/data.py)
  precision      on CUDA: AMP fp16 autocast with a GradScaler (2^16, x2 per 2000 clean steps,
                 x0.5 on overflow: cutrain's loss scaler), channels_last, cudnn.benchmark

The settings (--mode):
  dataloader     torch.utils.data.DataLoader, PIL decode (JPEG at a DCT scale, as cutrain) in
                 `--workers` processes (16), pin_memory, persistent workers; AMP with a
                 GradScaler and torch.optim.SGD: the usual PyTorch setup
  resident       every image decoded once into a uint8 tensor on the device, crop/flip on the
                 device, the model under torch.compile (--compile-mode, "default")
  tuned-graph    PyTorch at its strongest (torch_ref/tuned.py): resident data, channels_last,
                 the whole step on the device (the batch's gather and the learning rate from a
                 device step counter, fp16 autocast, the loss scaler's check and a fused
                 optimizer that skips on the device: no host read per step), captured as one
                 CUDA graph and replayed
  tuned-compile-graph  the same graph around the model compiled with torch.compile(mode=
                 "max-autotune-no-cudagraphs")
  tuned-compile  the whole step (gather, lr, forward, loss, backward, check, update, scale)
                 one torch.compile(fullgraph=True, mode="max-autotune")
  gpu-decode     the decode-heavy workload's GPU path: DataLoader workers read the files'
                 bytes, torchvision.io.decode_jpeg decodes them on the GPU (nvJPEG), resize,
                 crop and flip on the GPU
The tuned modes warm up, compile or capture before the clock starts and put the model back as
it was (their time is the summary's setup_s); a capture or a compilation that fails says why
and falls back (compile-graph -> graph -> eager, compile-step -> compile-graph). Each run
prints and keeps (the summary's "proof") what proves its label: torch_ref/proof.py.
Every mode saves a checkpoint after each epoch's evaluation (OUT/checkpoint.pt: the model, the
optimizer's and the scaler's state; written to a temporary file and renamed), inside its
clock, as cutrain writes one per epoch.

Every mode times its steps on the device's clock as cutrain does (torch_ref/clock.py: events
before the wait for the batch, after it and after the step), so its records carry busy_pct,
device_wait_pct, idle_pct and the bound by cutrain's rule.

Metrics go to OUT/metrics.jsonl in cutrain's keys (data/metrics.h, train/run/reporter.h):
"step" records every log_every steps (loss, accuracy, lr, loss_scale, images_per_s,
data_wait_pct, busy_pct, device_wait_pct, idle_pct, bound, time), "eval" records after each
epoch (top1, top5, loss, images, seconds, time), and a closing "summary" record (wall time,
time to the target accuracy, what ran, setup_s). "time" counts from the first timed training
step, as cutrain's does.

  bench/torch_reference.py --check --model default           # layer table vs cutrain, exit
  bench/torch_reference.py --config runs/fm/config.json --mode dataloader --out runs/torch-dl
  bench/torch_reference.py --config runs/fm/config.json --mode resident --out runs/torch-res
  bench/torch_reference.py --config runs/fm/config.json --mode tuned-graph --out runs/torch-g
  bench/torch_reference.py --config ... --device cpu --workers 2 --epochs 1   # a CPU check
"""
import argparse
import contextlib
import json
import math
import os
import random
import sys
import time

T_PROCESS = time.time()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from torch_ref import data as tdata  # noqa: E402
from torch_ref import model as tmodel  # noqa: E402
from torch_ref import proof as tproof  # noqa: E402
from torch_ref.clock import DeviceClock  # noqa: E402
from torch_ref.tuned import TunedStep, lr_tensor  # noqa: E402

MODES = ["dataloader", "resident", "tuned-graph", "tuned-compile-graph", "tuned-compile",
         "gpu-decode"]
TUNED = {"tuned-graph": "graph", "tuned-compile-graph": "compile-graph",
         "tuned-compile": "compile-step"}  # torch_ref/tuned.py's settings
RESIDENT = ("resident",) + tuple(TUNED)  # data decoded once onto the device

HERE = os.path.dirname(os.path.abspath(__file__))


def lr_at(kind, base, warmup, total, step):
    """nn/schedule.cpp: the lr of 0-based step `step` (final lr 0)."""
    W = max(1, total * 3 // 10) if kind == "onecycle" else warmup
    if step < W:
        return base * (step + 1) / W
    if kind == "constant":
        return base
    if step >= total:
        return 0.0
    p = (step - W) / (total - W)
    if kind == "linear":
        return base - base * p
    return base * 0.5 * (1 + math.cos(math.pi * p))  # cosine, onecycle


def autocast(amp):
    """fp16 autocast on CUDA; nothing otherwise (CPU autocast knows only bfloat16)."""
    return torch.autocast("cuda", dtype=torch.float16) if amp else contextlib.nullcontext()


class Metrics:
    def __init__(self, path):
        self.f = open(path, "a") if path else None

    def write(self, kind, **fields):
        line = json.dumps({"kind": kind, **fields})
        if self.f:
            self.f.write(line + "\n")
            self.f.flush()
        return line


def parse_args():
    a = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("--config", help="cutrain's resolved config.json (OUT/config.json of a run)")
    a.add_argument("--cutrain", default=os.path.join(HERE, "..", "bin", "cutrain"),
                   help="the cutrain program, for `describe --json`")
    a.add_argument("--mode", choices=MODES, default="dataloader")
    a.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a.add_argument("--workers", type=int, default=16, help="DataLoader / decode processes")
    a.add_argument("--out", help="folder for metrics.jsonl (default: none written)")
    a.add_argument("--epochs", type=int, help="override the config's epochs")
    a.add_argument("--seed", type=int, help="override the config's seed")
    a.add_argument("--limit-train", type=int, help="override the config's limit_train")
    a.add_argument("--limit-val", type=int, help="override the config's limit_val")
    a.add_argument("--target", type=float, default=0.93, help="time-to-accuracy target (top-1)")
    a.add_argument("--no-amp", action="store_true", help="fp32 on CUDA too")
    a.add_argument("--channels-last", action=argparse.BooleanOptionalAction,
                   help="NHWC activations (default: on CUDA and in the tuned modes)")
    a.add_argument("--no-compile", action="store_true", help="resident mode without torch.compile")
    a.add_argument("--compile-mode", default="default",
                   help="torch.compile mode of --mode resident")
    a.add_argument("--check", action="store_true",
                   help="print the layer table against cutrain's and exit (1 on a difference)")
    a.add_argument("--model", default="default", help="--check without --config: the model")
    a.add_argument("--input", default="28x28x1", help="--check without --config: HxWxC, H = W")
    a.add_argument("--classes", type=int, default=10, help="--check without --config")
    return a.parse_args()


def load_config(args):
    if args.config:
        with open(args.config) as f:
            cfg = json.load(f)
    else:
        if not args.check:
            sys.exit("torch_reference: --config (cutrain's config.json) is needed to train")
        h, w, c = (int(v) for v in args.input.split("x"))
        assert h == w, "--input: square images only"
        cfg = {"model": args.model, "model_text": None, "size": h, "channels": c,
               "classes": args.classes, "seed": 1}
    for key in ("epochs", "seed", "limit_train", "limit_val"):
        if getattr(args, key) is not None:
            cfg[key] = getattr(args, key)
    return cfg


def check(desc, model):
    print(f"model {desc['model']}: input {'x'.join(map(str, desc['input']))}, "
          f"{desc['classes']} classes; cutrain (describe --json) against torch_ref/model.py")
    bad = tmodel.check_against(model, desc)
    print("check: " + ("the same model" if bad == 0 else f"{bad} DIFFERENCES"))
    return 1 if bad else 0


class Feeder:
    """Batches for training and evaluation, on the device: (N,S,S,C) uint8 and (N) labels."""

    def __init__(self, cfg, args, dev):
        self.cfg, self.dev = cfg, dev
        S, C = cfg["size"], cfg["channels"]
        pad = cfg["pad"] if cfg["augment"] else 0
        train = tdata.read_list(cfg["train"], cfg.get("limit_train", 0))
        val = tdata.read_list(cfg["val"], cfg.get("limit_val", 0)) if cfg.get("val") else []
        self.n_train, self.n_val = len(train), len(val)
        self.eval_batch = max(cfg["batch"], 256)
        self.mode = ("resident" if args.mode in RESIDENT else args.mode)
        self.seed = cfg["seed"]
        if args.mode == "gpu-decode":
            try:
                import torchvision  # noqa: F401
            except ImportError as e:
                sys.exit(f"torch_reference: --mode gpu-decode needs torchvision (its "
                         f"decode_jpeg, nvJPEG on CUDA) in {sys.executable}: {e}")
            kw = dict(num_workers=args.workers, pin_memory=False, collate_fn=tdata.bytes_collate,
                      persistent_workers=args.workers > 0)
            g = torch.Generator().manual_seed(cfg["seed"])
            self.train_dl = torch.utils.data.DataLoader(
                tdata.BytesDataset(train), batch_size=cfg["batch"], shuffle=True, drop_last=True,
                generator=g, **kw)
            self.val_dl = torch.utils.data.DataLoader(
                tdata.BytesDataset(val), batch_size=self.eval_batch, shuffle=False,
                **kw) if val else None
            self.side, self.C, self.S, self.pad = cfg["resize"] or S, C, S, pad
            self.gen = torch.Generator(device=dev).manual_seed(cfg["seed"])
        elif args.mode == "dataloader":
            pin = dev.type == "cuda"
            g = torch.Generator().manual_seed(cfg["seed"])
            kw = dict(num_workers=args.workers, pin_memory=pin,
                      persistent_workers=args.workers > 0)
            self.train_dl = torch.utils.data.DataLoader(
                tdata.ListDataset(train, S, C, cfg["resize"], cfg["augment"], pad),
                batch_size=cfg["batch"], shuffle=True, drop_last=True, generator=g, **kw)
            self.val_dl = torch.utils.data.DataLoader(
                tdata.ListDataset(val, S, C, cfg["resize"], False, 0),
                batch_size=self.eval_batch, shuffle=False, **kw) if val else None
        else:
            side = cfg["resize"] or S
            t0 = time.time()
            self.train_x, self.train_y = (t.to(dev) for t in
                                          tdata.decode_all(train, C, side, args.workers))
            self.val_x, self.val_y = ((t.to(dev) for t in
                                       tdata.decode_all(val, C, side, args.workers))
                                      if val else (None, None))
            self.decode_s = time.time() - t0
            self.gen = torch.Generator(device=dev).manual_seed(cfg["seed"])
            self.pad = pad

    def _gpu_decode(self, files, augment):
        return tdata.gpu_decode(files, self.C, self.side, self.S, self.pad if augment else 0,
                                augment, self.dev, self.gen)

    def train_epoch(self):
        if self.mode == "gpu-decode":
            for files, y in self.train_dl:
                yield self._gpu_decode(files, self.cfg["augment"]), y.to(self.dev)
            return
        if self.mode == "dataloader":
            for x, y in self.train_dl:
                yield (x.to(self.dev, non_blocking=True), y.to(self.dev, non_blocking=True))
            return
        B, S = self.cfg["batch"], self.cfg["size"]
        perm = torch.randperm(self.n_train, device=self.dev, generator=self.gen)
        for k in range(self.n_train // B):
            idx = perm[k * B:(k + 1) * B]
            x = self.train_x[idx]
            x = (tdata.gpu_crop_flip(x, S, self.pad, self.gen) if self.cfg["augment"]
                 else tdata.gpu_centre(x, S))
            yield x, self.train_y[idx]

    def val_batches(self):
        if self.mode == "gpu-decode":
            for files, y in self.val_dl:
                yield self._gpu_decode(files, False), y.to(self.dev)
            return
        if self.mode == "dataloader":
            for x, y in self.val_dl:
                yield (x.to(self.dev, non_blocking=True), y.to(self.dev, non_blocking=True))
            return
        for k in range(0, self.n_val, self.eval_batch):
            yield (tdata.gpu_centre(self.val_x[k:k + self.eval_batch], self.cfg["size"]),
                   self.val_y[k:k + self.eval_batch])


def save_checkpoint(out, state):
    """OUT/checkpoint.pt, written whole or not at all (a temporary file renamed)."""
    path = os.path.join(out, "checkpoint.pt")
    torch.save(state, path + ".tmp")
    os.replace(path + ".tmp", path)


def evaluate(model, feeder, prep, amp, dev):
    t0 = time.time()
    model.eval()
    loss = torch.zeros((), device=dev)
    top1 = torch.zeros((), device=dev)
    top5 = torch.zeros((), device=dev)
    n = 0
    with torch.no_grad(), autocast(amp):
        for x, y in feeder.val_batches():
            z = model(prep(x)).float()
            loss += F.cross_entropy(z, y, reduction="sum")  # unsmoothed, as cutrain's eval
            k = min(5, z.shape[1])
            best = z.topk(k, dim=1).indices
            top1 += (best[:, 0] == y).sum()
            top5 += (best == y[:, None]).any(dim=1).sum()
            n += y.shape[0]
    model.train()
    return {"loss": loss.item() / n, "top1": top1.item() / n, "top5": top5.item() / n,
            "images": n, "seconds": time.time() - t0}


def main():
    args = parse_args()
    cfg = load_config(args)
    cutrain = os.path.abspath(args.cutrain)
    desc = tmodel.describe(cutrain, cfg["model"], cfg["size"], cfg["channels"], cfg["classes"],
                           cfg.get("model_text"))
    torch.manual_seed(cfg["seed"])
    random.seed(cfg["seed"])
    model = tmodel.build(desc)
    if args.check:
        return check(desc, model)
    if tmodel.check_against(model, desc, out=lambda s: None):
        return check(desc, model)  # prints the differences

    dev = torch.device(args.device)
    on_cuda = dev.type == "cuda"
    amp = on_cuda and not args.no_amp
    notes = []
    if on_cuda:
        torch.backends.cudnn.benchmark = True
    nhwc = (args.channels_last if args.channels_last is not None
            else on_cuda or args.mode.startswith("tuned-"))
    model = model.to(dev, memory_format=torch.channels_last if nhwc else torch.contiguous_format)
    params = list(model.parameters())
    opt_name, lr, wd = cfg["optimizer"], cfg["lr"], cfg["wd"]
    tuned_mode = args.mode in TUNED
    compiled = False
    train_model = model
    if not tuned_mode:  # the untuned settings: torch.optim as most scripts use it
        if opt_name == "adamw":
            opt = torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=wd)
        else:
            opt = torch.optim.SGD(params, lr=lr, momentum=cfg["momentum"], weight_decay=wd,
                                  nesterov=opt_name == "nesterov")
        # torch.amp.GradScaler from 2.3 on; Debian's 1.13 has the CUDA one only
        scaler_kw = dict(init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
                         growth_interval=2000, enabled=amp)
        scaler = (torch.amp.GradScaler(dev.type, **scaler_kw) if hasattr(torch.amp, "GradScaler")
                  else torch.cuda.amp.GradScaler(**scaler_kw))
        if args.mode == "resident" and not args.no_compile:
            if hasattr(torch, "compile"):
                train_model = torch.compile(model, mode=args.compile_mode)
                compiled = True
            else:
                notes.append(f"torch {torch.__version__} has no torch.compile: resident mode "
                             "runs without it")
    for n_ in notes:
        print("torch_reference: " + n_, file=sys.stderr)

    feeder = Feeder(cfg, args, dev)
    B, accum, epochs = cfg["batch"], cfg["accum"], cfg["epochs"]
    steps_per_epoch = feeder.n_train // B
    total = epochs * steps_per_epoch
    warmup = min(total - 1, round(cfg["warmup"] * steps_per_epoch))  # llround: half away
    mean = torch.tensor(cfg["mean"], device=dev)
    std = torch.tensor(cfg["std"], device=dev)

    def prep(x):
        return tdata.normalise(x, mean, std, nhwc)

    tuned = None
    if tuned_mode:  # warm-up, capture or compilation before the clock
        schedule = (cfg["schedule"], lr, warmup, total)
        tuned = TunedStep(model, cfg, dev, amp, prep, TUNED[args.mode], feeder, schedule,
                          constants=(mean, std))
        tuned.setup((lambda fwd: evaluate(fwd, feeder, prep, amp, dev))
                    if feeder.n_val else None)
        train_model = tuned.eval_forward
        notes += tuned.notes
        compiled = tuned.ran.startswith("compile")
        steps = torch.arange(total, dtype=torch.int64)
        tuned.proof["lr_schedule_max_diff"] = max(
            abs(a - lr_at(cfg["schedule"], lr, warmup, total, k))
            for k, a in enumerate(lr_tensor(*schedule, steps).tolist()))

    if args.out:
        os.makedirs(args.out, exist_ok=True)
    metrics = Metrics(os.path.join(args.out, "metrics.jsonl") if args.out else None)
    how = (f"{tuned.ran}, the whole step on the device" if tuned
           else "compiled" if compiled else "eager")
    print(f"torch_reference: {args.mode} on {dev}, torch {torch.__version__}, "
          f"{'AMP fp16' if amp else 'fp32'}, {how}; "
          f"{feeder.n_train} training images ({steps_per_epoch} steps of {B} per epoch, "
          f"{epochs} epochs), {opt_name} lr {lr} wd {wd}, {cfg['schedule']} with "
          f"{warmup} warm-up steps, label smoothing {cfg['label_smoothing']}, "
          f"{desc['params']} parameters" +
          (f"; set-up (warm-up, {tuned.ran}) {tuned.setup_s:.1f} s" if tuned else ""), flush=True)

    log_every = cfg.get("log_every", 50)
    clock = DeviceClock(on_cuda)
    resident = args.mode in RESIDENT
    t_start = time.time()  # the clock of "time", as cutrain's: from the first timed step
    startup_s = t_start - T_PROCESS
    step = 0
    win_t, win_wait, win_images = t_start, 0.0, 0
    loss_sum = torch.zeros((), device=dev)
    correct = torch.zeros((), device=dev)
    evals, time_to_target = [], None
    micro = B // accum
    for epoch in range(1, epochs + 1):
        if tuned:  # the epoch's order; the step gathers its batch from it on the device
            tuned.new_epoch(torch.randperm(feeder.n_train, device=dev, generator=feeder.gen))
            batches = iter(range(steps_per_epoch))
        else:
            batches = feeder.train_epoch()
        while True:
            clock.begin()  # before the wait for the batch
            if resident:  # on the device already: its crop and flip are compute, as cutrain's
                clock.ready()
            t0 = time.time()
            batch = next(batches, None)
            win_wait += time.time() - t0
            if batch is None:
                break
            if not resident:
                clock.ready()
            lr_now = lr_at(cfg["schedule"], lr, warmup, total, step)
            if tuned:
                with tuned.sync_watch():  # torch.cuda.set_sync_debug_mode("warn") on CUDA
                    loss_b, correct_b = tuned()
                loss_sum += loss_b
                correct += correct_b
            else:
                x, y = batch
                for g in opt.param_groups:
                    g["lr"] = lr_now
                for m0 in range(0, B, micro):
                    xm, ym = prep(x[m0:m0 + micro]), y[m0:m0 + micro]
                    with autocast(amp):
                        z = train_model(xm)
                        loss = F.cross_entropy(z.float(), ym,
                                               label_smoothing=cfg["label_smoothing"])
                    scaler.scale(loss * (ym.shape[0] / B)).backward()
                    loss_sum += loss.detach() * ym.shape[0]
                    correct += (z.argmax(1) == ym).sum()
                scaler.step(opt)
                scaler.update()
                opt.zero_grad(set_to_none=True)
            clock.end()
            step += 1
            win_images += B
            if step % log_every == 0 or step == total:
                now = time.time()
                w = clock.window()
                scale = (tuned.scale.item() if tuned else scaler.get_scale()) if amp else 0
                metrics.write("step", step=step, epoch=epoch, loss=loss_sum.item() / win_images,
                              accuracy=correct.item() / win_images, lr=lr_now,
                              loss_scale=scale, images_per_s=win_images / (now - win_t),
                              data_wait_pct=100 * win_wait / (now - win_t),
                              busy_pct=w["busy_pct"], device_wait_pct=w["device_wait_pct"],
                              idle_pct=w["idle_pct"], launch_pct=w["launch_pct"],
                              bound=w["bound"], pipeline_ratio=None,
                              time=now - t_start)
                win_t, win_wait, win_images = now, 0.0, 0
                loss_sum.zero_()
                correct.zero_()
        if feeder.n_val:
            clock.interrupt()
            e = evaluate(train_model, feeder, prep, amp, dev)
            e.update(epoch=epoch, step=step, time=time.time() - t_start)
            evals.append(e)
            metrics.write("eval", **e)
            if time_to_target is None and e["top1"] >= args.target:
                time_to_target = e["time"]
            print(f"epoch {epoch}/{epochs}  val loss {e['loss']:.4f}  top-1 "
                  f"{100 * e['top1']:.2f}%  top-5 {100 * e['top5']:.2f}%  |  "
                  f"{e['time']:.1f} s", flush=True)
        if args.out:  # inside the clock, as cutrain's checkpoint of each epoch
            clock.interrupt()
            save_checkpoint(args.out, tuned.state_dict() if tuned else
                            {"model": model.state_dict(), "optimizer": opt.state_dict(),
                             "scaler": scaler.state_dict(), "step": step})
    t_end = time.time()
    proof = tproof.settings(torch, dev, amp, nhwc, tuned_mode, opt_name)
    if tuned:
        proof.update(tuned.finish(), ran=tuned.ran)
    else:
        proof.update(ran="compile" if compiled else "eager", optimizer=(
            f"{opt_name}: torch.optim, default (foreach); the GradScaler reads found_inf on "
            "the host each step" if amp else f"{opt_name}: torch.optim, default (foreach)"))
    for line in tproof.lines(args.mode, proof):
        print(line, flush=True)
    summary = dict(mode=args.mode, device=str(dev),
                   gpu=torch.cuda.get_device_name(dev) if on_cuda else None,
                   torch=torch.__version__, amp=amp, compiled=compiled,
                   ran=tuned.ran if tuned else ("compile" if compiled else "eager"),
                   setup_s=tuned.setup_s if tuned else None,
                   channels_last=nhwc, workers=args.workers, seed=cfg["seed"],
                   epochs=epochs, steps=step, images=step * B,
                   train_s=t_end - t_start, startup_s=startup_s, wall_s=t_end - T_PROCESS,
                   decode_s=getattr(feeder, "decode_s", None),
                   images_per_s=step * B / (t_end - t_start),
                   final_top1=evals[-1]["top1"] if evals else None,
                   target=args.target, time_to_target_s=time_to_target, notes=notes,
                   proof=proof, proof_failures=tproof.failures(args.mode, proof))
    print(metrics.write("summary", **summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
