"""PyTorch's training step at its strongest, for bench/torch_reference.py's tuned modes.

One step function (`_step`) does the whole step on the device: the batch gathered from the
resident data by a device step counter (index, crop and flip on the device), the learning rate
computed from that counter (nn/schedule.cpp's schedule as tensor ops), fp16 autocast forward,
the loss, backward, the loss scaler's check for inf/NaN, the optimizer's update skipped on the
device when it finds one, the scale's update (torch._amp_update_scale_, GradScaler's own op),
and the counter's increment. No host read, no host write per step. Three ways to run it:

  graph          (--mode tuned-graph) the step captured once as a CUDA graph
                 (torch.cuda.graph) and replayed; the model eager; the update torch.optim's
                 fused kernel (the functional sgd/adamw with fused=True, grad_scale and
                 found_inf: what torch.optim.SGD(fused=True) runs under a GradScaler)
  compile-graph  (--mode tuned-compile-graph) the same graph around the model compiled with
                 torch.compile(mode="max-autotune-no-cudagraphs") (Inductor's kernels,
                 autotuned, launched from our graph)
  compile-step   (--mode tuned-compile) the whole step one torch.compile(fullgraph=True,
                 mode="max-autotune"): backward traced (torch._dynamo.trace_autograd_ops), the
                 update torch.optim's foreach code on copies kept where no inf was found
                 (PyTorch will not trace its fused kernels), CUDA graphs by Inductor's
                 cudagraph trees. fullgraph=True: any graph break is an error, not a fallback
On the CPU there are no CUDA graphs: graph and compile-graph run their step as it is (the
proof says "not run" and why), compile-step uses "max-autotune-no-cudagraphs".

Set-up before the run's clock (setup(), timed as setup_s): warm-up steps, the capture or the
compilation, the evaluation's compiled forward, and the proof's check, one step of the tuned
path against one eager step on the same batch from the same state (the largest parameter
difference); then the parameters, buffers, optimizer state, scaler and counter are put back as
they were (the same first step as a fresh run). A capture or a compilation that fails says why
and runs the next setting (compile-graph -> graph -> eager, compile-step -> eager): the row's
`ran` says what ran, and the proof (torch_ref/proof.py) fails a tuned row that did not run as
its label says.
"""
import contextlib
import math
import time
import traceback
import warnings

import torch
import torch.nn.functional as F
from torch.optim.adamw import adamw as adamw_update  # what torch.optim.AdamW.step runs
from torch.optim.sgd import sgd as sgd_update        # what torch.optim.SGD.step runs

from torch_ref import data as tdata

WARMUP_STEPS = 3
HOWS = ("graph", "compile-graph", "compile-step")


def lr_tensor(kind, base, warmup, total, step):
    """torch_reference.lr_at (nn/schedule.cpp) for a device step counter `step` (int64)."""
    s = step.double()
    W = max(1, total * 3 // 10) if kind == "onecycle" else warmup
    ramp = base * (s + 1) / max(W, 1)
    if kind == "constant":
        after = torch.full_like(s, base)
    else:
        p = (s - W) / max(total - W, 1)
        after = (base - base * p if kind == "linear"
                 else base * 0.5 * (1 + torch.cos(math.pi * p)))
        after = torch.where(s >= total, torch.zeros_like(s), after)
    return torch.where(s < W, ramp, after).float()


def dynamo_counts():
    """What torch.compile did so far: graph breaks, unique graphs (a graph compiled in the
    timed run is a recompile), cudagraph skips, and the compile caches' hits and misses
    (torch._dynamo.utils.counters)."""
    c = torch._dynamo.utils.counters
    return {"graph_breaks": sum(c["graph_break"].values()),
            "unique_graphs": c["stats"]["unique_graphs"],
            "cudagraph_skips": c["inductor"]["cudagraph_skips"],
            "cache_hits": c["inductor"]["fxgraph_cache_hit"],
            "cache_misses": c["inductor"]["fxgraph_cache_miss"]}


class TunedStep:
    """The whole training step of `model` on `feeder`'s resident data (torch_reference.Feeder).
    prep(x) normalises a uint8 batch, reading the tensors `constants` (its mean and std)."""

    def __init__(self, model, cfg, dev, amp, prep, how, feeder, schedule, constants=()):
        assert how in HOWS, how
        self.model, self.cfg, self.dev, self.amp, self.prep = model, cfg, dev, amp, prep
        self.feeder, self.schedule = feeder, schedule  # schedule: (kind, base, warmup, total)
        self.constants = list(constants)
        self.B, self.accum = cfg["batch"], cfg["accum"]
        self.cuda = dev.type == "cuda"
        self.wanted = how
        self.params = [p for p in model.parameters()]
        zeros = lambda: [torch.zeros_like(p) for p in self.params]  # noqa: E731
        self.adamw = cfg["optimizer"] == "adamw"
        if self.adamw:  # capturable: its step counts on the device
            self.opt_state = {"exp_avg": zeros(), "exp_avg_sq": zeros(),
                              "step": [torch.zeros((), device=dev) for _ in self.params]}
        else:  # a zero momentum buffer gives torch.optim's first step (buf = grad)
            self.opt_state = {"momentum_buffer": zeros()}
        self.scale = torch.full((), 2.0 ** 16 if amp else 1.0, device=dev)
        self.growth_tracker = torch.zeros((), dtype=torch.int32, device=dev)
        self.counter = torch.zeros((), dtype=torch.int64, device=dev)  # steps done
        self.skipped = torch.zeros((), dtype=torch.int64, device=dev)  # steps skipped (inf)
        self.perm = torch.arange(feeder.n_train, device=dev)  # this epoch's order
        self.ar = torch.arange(self.B, device=dev)
        self.spe = feeder.n_train // self.B
        self.forward = model   # the model the step calls (compiled in compile-graph)
        self.eval_forward = model
        self.run_step = self._step  # what __call__ runs when there is no graph
        self.graph = None
        self.ran = "eager"     # "cuda graph", "compile-graph", "compile-step", "eager"
        self.setup_s = 0.0
        self.notes = []
        self.proof = {"graph_captured": False, "graph_why": "not tried", "replays": 0,
                      "replay_vs_eager_max_diff": None, "replay_vs_eager_rel": None,
                      "replay_vs_eager_why": None}
        self.steps_called = 0

    # ---- the step ---------------------------------------------------------------------------
    def _autocast(self):
        return (torch.autocast(self.dev.type, dtype=torch.float16) if self.amp
                else contextlib.nullcontext())

    def _batch(self):
        """The batch of step `counter`: (B,S,S,C) uint8 and (B) labels, gathered on the device."""
        f = self.feeder
        idx = self.perm.index_select(0, (self.counter % self.spe) * self.B + self.ar)
        x = f.train_x.index_select(0, idx)
        x = (tdata.gpu_crop_flip(x, f.cfg["size"], f.pad, None) if f.cfg["augment"]
             else tdata.gpu_centre(x, f.cfg["size"]))
        return x, f.train_y.index_select(0, idx)

    def _update(self, grads, found, traced):
        """torch.optim's update (functional sgd / adamw), skipped where found != 0."""
        cfg = self.cfg
        lr = lr_tensor(*self.schedule, self.counter)
        st = self.opt_state
        kw = dict(lr=lr, weight_decay=cfg["wd"], maximize=False)
        if self.adamw:
            kw.update(amsgrad=False, beta1=0.9, beta2=0.999, eps=1e-8, capturable=self.cuda)
        else:
            kw.update(momentum=cfg["momentum"], dampening=0.0,
                      nesterov=cfg["optimizer"] == "nesterov")
        update = adamw_update if self.adamw else sgd_update

        def run(params, state, **more):
            if self.adamw:
                update(params, grads, state["exp_avg"], state["exp_avg_sq"], [], state["step"],
                       **more, **kw)
            else:
                update(params, grads, state["momentum_buffer"], **more, **kw)

        if not traced:  # the fused kernel unscales and skips on the device itself
            run(self.params, st, fused=True,
                **({"grad_scale": self.scale, "found_inf": found} if self.amp else {}))
            return
        if self.amp:
            torch._amp_foreach_non_finite_check_and_unscale_(grads, found,
                                                             self.scale.reciprocal())
        new_p = [p.clone() for p in self.params]
        new_st = {k: [t.clone() for t in v] for k, v in st.items()}
        run(new_p, new_st, foreach=True)
        keep = found == 0
        for old, new in [(self.params, new_p)] + [(st[k], new_st[k]) for k in st]:
            torch._foreach_copy_(old, [torch.where(keep, n, o) for n, o in zip(new, old)])

    def _step(self, traced=False):
        """One whole step at `counter`; returns (loss sum, correct count) as device tensors."""
        x, y = self._batch()
        micro = self.B // self.accum
        loss_sum = torch.zeros((), device=self.dev)
        correct = torch.zeros((), device=self.dev, dtype=torch.int64)
        for m0 in range(0, self.B, micro):
            xm, ym = self.prep(x[m0:m0 + micro]), y[m0:m0 + micro]
            with self._autocast():
                z = self.forward(xm)
                loss = F.cross_entropy(z.float(), ym, label_smoothing=self.cfg["label_smoothing"])
            (loss * (ym.shape[0] / self.B) * self.scale).backward()
            loss_sum += loss.detach() * ym.shape[0]
            correct += (z.argmax(1) == ym).sum()
        grads = [p.grad for p in self.params]
        with torch.no_grad():
            found = torch.zeros(1, device=self.dev)
            if self.amp and not traced:  # the GradScaler's check (inv scale 1: check only)
                torch._amp_foreach_non_finite_check_and_unscale_(
                    grads, found, torch.ones(1, device=self.dev))
            self._update(grads, found, traced)
            if self.amp:  # x2 after 2000 clean steps, x0.5 on inf (cutrain's loss scaler)
                torch._amp_update_scale_(self.scale, self.growth_tracker, found, 2.0, 0.5,
                                         2000)
            self.skipped += found.long().sum()
            self.counter += 1
            for g in grads:
                g.zero_()
        return loss_sum, correct

    def _traced_step(self):
        return self._step(traced=True)

    def new_epoch(self, perm):
        self.perm.copy_(perm)

    def __call__(self):
        self.steps_called += 1
        if self.graph is not None:
            self.graph.replay()
            self.proof["replays"] += 1
            return self.static_loss.clone(), self.static_correct.clone()
        return self.run_step()

    # ---- state, for the set-up and the checkpoints --------------------------------------------
    def state_dict(self):
        return {"model": self.model.state_dict(),
                "optimizer": {k: [t.detach().clone() for t in v]
                              for k, v in self.opt_state.items()},
                "scaler": {"scale": self.scale.item(), "growth_tracker":
                           self.growth_tracker.item()},
                "step": self.counter.item()}

    def _tensors(self):
        """Every tensor the step changes, in place (a captured graph holds their addresses)."""
        return (list(self.model.state_dict().values()) +
                [t for v in self.opt_state.values() for t in v] +
                [self.scale, self.growth_tracker, self.counter, self.skipped, self.perm] +
                [p.grad for p in self.params if p.grad is not None])

    def _save(self):
        return ([t.detach().clone() for t in self._tensors()],
                torch.get_rng_state(), torch.cuda.get_rng_state() if self.cuda else None)

    def _restore(self, saved):
        tensors, cpu_rng, cuda_rng = saved
        with torch.no_grad():
            for t, v in zip(self._tensors(), tensors):
                t.copy_(v)
        torch.set_rng_state(cpu_rng)
        if self.cuda:
            torch.cuda.set_rng_state(cuda_rng)

    # ---- before the clock --------------------------------------------------------------------
    def _grads(self):  # the .grad tensors, made once: the step zeroes them in place
        for p in self.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)

    def _compile_model(self, mode):
        self.forward = torch.compile(self.model, mode=mode)
        self.eval_forward = self.forward

    def _capture(self, warm):
        """Warm-up on a side stream, then the step captured as one CUDA graph."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # as torch.cuda.graph wants
            for _ in range(warm):
                self._step()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self.static_loss, self.static_correct = self._step()
        self.graph = graph

    def _try(self, how):
        """Sets up `how`; returns what runs ("cuda graph", ...), or raises saying why not."""
        no_graphs = "not run: CUDA graphs need a CUDA device"
        if how == "compile-step":
            if not hasattr(torch._dynamo.config, "trace_autograd_ops"):
                raise RuntimeError(f"torch {torch.__version__} cannot trace backward inside "
                                   "torch.compile (no torch._dynamo.config.trace_autograd_ops)")
            torch._dynamo.config.trace_autograd_ops = True  # backward inside the graph
            # Every tensor the step reads or changes keeps its address: cudagraph trees would
            # otherwise copy each one (the whole resident data set) into the graph every step.
            for t in self._tensors() + self.constants + [self.feeder.train_x,
                                                         self.feeder.train_y, self.ar]:
                torch._dynamo.mark_static_address(t)
            mode = "max-autotune" if self.cuda else "max-autotune-no-cudagraphs"
            compiled = torch.compile(self._traced_step, fullgraph=True, mode=mode)

            def run_step():
                if self.cuda:  # each call a new step for Inductor's cudagraph trees
                    torch.compiler.cudagraph_mark_step_begin()
                return compiled()
            self.run_step = run_step
            self.eval_forward = torch.compile(self.model, mode="max-autotune-no-cudagraphs")
            for _ in range(WARMUP_STEPS):
                self.run_step()
            self.proof["graph_why"] = ("Inductor's cudagraph trees (mode max-autotune)"
                                       if self.cuda else f"{no_graphs} (mode {mode})")
            return "compile-step"
        if how == "compile-graph":
            self._compile_model("max-autotune-no-cudagraphs")
        if not self.cuda:  # the step as it is, the model compiled by its first calls
            for _ in range(WARMUP_STEPS):
                self._step()
            self.proof["graph_why"] = no_graphs
            return "compile (model only)" if how == "compile-graph" else "eager"
        self._capture(WARMUP_STEPS)
        self.proof["graph_captured"] = True
        self.proof["graph_why"] = "torch.cuda.graph around the whole step"
        return "cuda graph" if how == "graph" else "compile-graph"

    def _check_against_eager(self, saved):
        """One tuned step against one eager step on the same batch, from the same state: the
        largest parameter difference, absolute and relative to the step's largest change."""
        self._restore(saved)
        before = [p.detach().clone() for p in self.params]
        (self.run_step if self.graph is None else self.graph.replay)()
        got = [p.detach().clone() for p in self.params]
        self._restore(saved)
        forward, self.forward = self.forward, self.model
        self._step()  # eager: the model uncompiled, torch.optim's fused update
        self.forward = forward
        diff = max((a.float() - b.float()).abs().max().item() for a, b in zip(got, self.params))
        moved = max((a.float() - b.float()).abs().max().item()
                    for a, b in zip(before, self.params))
        self.proof["replay_vs_eager_max_diff"] = diff
        self.proof["replay_vs_eager_rel"] = diff / moved if moved > 0 else None
        if self.cfg["augment"] and self.ran == "compile-step":
            self.proof["replay_vs_eager_why"] = ("augment on: Inductor draws its own random "
                                                 "crops, so the batches differ")

    def setup(self, evaluate):
        """Warm-up, the capture or the compilation, the check against eager, the state put
        back. evaluate(forward) runs an evaluation pass (compiles the eval-mode graphs); None
        when the run has no validation data."""
        t0 = time.time()
        self._grads()
        saved = self._save()
        order = {"graph": ["graph"], "compile-graph": ["compile-graph", "graph"],
                 "compile-step": ["compile-step", "compile-graph"]}[self.wanted]
        for how in order:
            try:
                self.ran = self._try(how)
                break
            except Exception as e:  # noqa: BLE001: any failure falls back, saying why
                why = f"{how} failed ({type(e).__name__}: {str(e).splitlines()[0][:200]})"
                self.notes.append(why + "; falling back")
                self.proof["graph_why"] = why
                print("torch_reference: " + why, flush=True)
                traceback.print_exc(limit=3)
                self.graph, self.forward, self.eval_forward = None, self.model, self.model
                self.run_step = self._step
                self._restore(saved)
        if evaluate:
            evaluate(self.eval_forward)  # the eval-mode graphs too, before the clock
        self._check_against_eager(saved)
        self._restore(saved)
        if self.cuda:
            torch.cuda.synchronize()
        self.counts_after_setup = dynamo_counts()
        self.setup_s = time.time() - t0

    # ---- the timed run -------------------------------------------------------------------------
    @contextlib.contextmanager
    def sync_watch(self):
        """The step under torch.cuda.set_sync_debug_mode("warn"), its syncs counted."""
        if not self.cuda:
            yield
            return
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                yield
            finally:
                torch.cuda.set_sync_debug_mode("default")
        self.proof["syncs"] = self.proof.get("syncs", 0) + sum(
            "synchroniz" in str(w.message) for w in seen)

    def finish(self):
        """The proof's numbers of the timed run (after its last step)."""
        end = dynamo_counts()
        p = self.proof
        for k in ("graph_breaks", "cudagraph_skips"):
            p[k] = end[k] - self.counts_after_setup[k]
        p["unique_graphs"] = end["unique_graphs"]  # the set-up's (train and eval) and any new
        p["recompiles"] = end["unique_graphs"] - self.counts_after_setup["unique_graphs"]
        if self.ran == "compile-step" and self.cuda:  # Inductor's graphs: no skip, no count
            p["graph_captured"], p["replays"] = p["cudagraph_skips"] == 0, None
        p["compile_cache"] = ("none" if not (end["cache_hits"] or end["cache_misses"]) else
                              "warm" if end["cache_misses"] == 0 else
                              "cold" if end["cache_hits"] == 0 else "partly warm")
        p["steps"] = self.steps_called
        p["sync_debug"] = "warn" if self.cuda else "not run: CUDA only"
        p.setdefault("syncs", None if not self.cuda else 0)
        p["skipped_steps"] = self.skipped.item()
        p["final_loss_scale"] = self.scale.item() if self.amp else None
        p["optimizer"] = (f"{self.cfg['optimizer']}: torch.optim functional, " +
                          ("foreach on copies kept where finite (traced)"
                           if self.ran == "compile-step" else "fused=True, grad_scale and "
                           "found_inf on the device"))
        return p
