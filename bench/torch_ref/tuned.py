"""PyTorch's training step at its strongest, for bench/torch_reference.py's tuned modes.

What makes it strong, each the usual advice for small models on a GPU:
  - data resident on the device as uint8; crop, flip and normalisation on the device
    (torch_ref/data.py), channels_last, cudnn.benchmark;
  - fp16 autocast with a GradScaler and a fused optimizer (SGD or AdamW, fused=True): the
    scaler hands found_inf to the fused kernel, which skips the update on the device, so no
    step reads a value back to the host (plain SGD's scaler calls .item() every step);
  - the learning rate a device tensor, written each step without a host round trip;
  - and then either the whole step (forward, loss, backward, the scaler's check, the update)
    captured once as a CUDA graph (torch.cuda.graph) and replayed, or the model under
    torch.compile(mode="max-autotune").
Warm-up, compilation and capture happen before the run's clock starts, on the first batch,
and the model, optimizer and scaler are put back as they were afterwards (the parameters and
buffers copied back in place, the momentum buffers zeroed: the same first step as a fresh
optimizer's), so the timed run trains exactly as an untuned one would. If the capture or the
compilation fails, the reason is printed and the next setting is used (graph -> compile ->
eager), so a row is never lost.
"""
import time
import traceback

import torch
import torch.nn.functional as F

WARMUP_STEPS = 3


def make_optimizer(params, cfg, lr, fused, capturable=False):
    kw = dict(lr=lr, weight_decay=cfg["wd"])
    if fused:
        kw["fused"] = True
    if cfg["optimizer"] == "adamw":  # capturable: its step count on the device, for a graph
        return torch.optim.AdamW(params, betas=(0.9, 0.999), eps=1e-8, capturable=capturable,
                                 **kw)
    return torch.optim.SGD(params, momentum=cfg["momentum"], nesterov=cfg["optimizer"] == "nesterov",
                           **kw)


class TunedStep:
    """One training step of `model` on a batch (x uint8 (B,S,S,C), y int64 (B)) on `dev`."""

    def __init__(self, model, cfg, dev, amp, prep, how, compile_mode="max-autotune"):
        self.model, self.cfg, self.dev, self.amp, self.prep = model, cfg, dev, amp, prep
        self.B, self.accum = cfg["batch"], cfg["accum"]
        self.lr = torch.tensor(float(cfg["lr"]), device=dev)  # read by the fused kernel
        self.opt = make_optimizer(model.parameters(), cfg, self.lr, fused=True,
                                  capturable=how == "graph" and dev.type == "cuda")
        self.scaler = torch.amp.GradScaler(dev.type, init_scale=2.0 ** 16, growth_factor=2.0,
                                           backoff_factor=0.5, growth_interval=2000,
                                           enabled=amp)
        self.wanted = how               # "graph" or "compile"
        self.compile_mode = compile_mode
        self.forward = model            # the compiled model in "compile"
        self.graph = None
        self.ran = "eager"              # what runs after setup(): "cuda graph", "compile", "eager"
        self.setup_s = 0.0
        self.notes = []

    def set_lr(self, value):
        self.lr.fill_(value)

    def _autocast(self):
        return (torch.autocast(self.dev.type, dtype=torch.float16) if self.amp
                else torch.autocast(self.dev.type, enabled=False))

    def _step(self, x, y):
        """Forward and backward over the micro-batches, the scaler's step and update. The loss
        sum and the top-1 count come back as device tensors (no host read)."""
        micro = self.B // self.accum
        loss_sum = torch.zeros((), device=self.dev)
        correct = torch.zeros((), device=self.dev, dtype=torch.int64)
        for m0 in range(0, self.B, micro):
            xm, ym = self.prep(x[m0:m0 + micro]), y[m0:m0 + micro]
            with self._autocast():
                z = self.forward(xm)
                loss = F.cross_entropy(z.float(), ym, label_smoothing=self.cfg["label_smoothing"])
            self.scaler.scale(loss * (ym.shape[0] / self.B)).backward()
            loss_sum += loss.detach() * ym.shape[0]
            correct += (z.argmax(1) == ym).sum()
        self.scaler.step(self.opt)
        self.scaler.update()
        return loss_sum, correct

    def __call__(self, x, y):
        if self.graph is not None:
            self.static_x.copy_(x)
            self.static_y.copy_(y)
            self.graph.replay()
            return self.static_loss.clone(), self.static_correct.clone()
        out = self._step(x, y)
        self.opt.zero_grad(set_to_none=True)
        return out

    # ---- before the clock -----------------------------------------------------------------
    def _saved(self):
        return ({k: v.detach().clone() for k, v in self.model.state_dict().items()},
                self.scaler.state_dict())

    def _restore(self, saved):
        state, scaler = saved
        with torch.no_grad():
            for k, v in self.model.state_dict().items():
                v.copy_(state[k])
            for st in self.opt.state.values():
                for key in ("momentum_buffer", "exp_avg", "exp_avg_sq"):
                    if st.get(key) is not None:
                        st[key].zero_()
                if "step" in st:
                    st["step"].zero_() if torch.is_tensor(st["step"]) else st.update(step=0)
            if self.amp:  # in place: a captured graph holds these tensors
                self.scaler._scale.fill_(scaler["scale"])
                self.scaler._growth_tracker.fill_(scaler["_growth_tracker"])

    def _try_graph(self, x, y):
        if self.dev.type != "cuda":
            raise RuntimeError("CUDA graphs need a CUDA device")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up on a side stream, as torch.cuda.graph wants
            for _ in range(WARMUP_STEPS):
                self._step(x, y)
                self.opt.zero_grad(set_to_none=True)
        torch.cuda.current_stream().wait_stream(side)
        self.static_x, self.static_y = x.clone(), y.clone()
        graph = torch.cuda.CUDAGraph()
        self.opt.zero_grad(set_to_none=True)  # backward in the capture makes the .grad tensors
        with torch.cuda.graph(graph):
            self.static_loss, self.static_correct = self._step(self.static_x, self.static_y)
        graph.replay()  # a first replay: an error shows here, not in the timed run
        torch.cuda.synchronize()
        self.graph = graph

    def _try_compile(self, x, y, evaluate):
        self.forward = torch.compile(self.model, mode=self.compile_mode)
        for _ in range(WARMUP_STEPS):
            self(x, y)
        if evaluate:
            evaluate(self.forward)  # the eval-mode graphs too, before the clock
        if self.dev.type == "cuda":
            torch.cuda.synchronize()

    def setup(self, x, y, evaluate):
        """Warm-up, then the capture or the compilation, on batch (x, y); the state put back.
        evaluate(forward) runs an evaluation pass (compiles the eval-mode graphs); None when
        the run has no validation data."""
        t0 = time.time()
        saved = self._saved()
        order = ["graph", "compile"] if self.wanted == "graph" else ["compile"]
        for how in order:
            try:
                if how == "graph":
                    self._try_graph(x, y)
                    self.ran = "cuda graph"
                else:
                    self._try_compile(x, y, evaluate)
                    self.ran = f"compile {self.compile_mode}"
                break
            except Exception as e:  # noqa: BLE001: any failure falls back, saying why
                why = f"{how} failed ({type(e).__name__}: {str(e).splitlines()[0][:200]})"
                self.notes.append(why + "; falling back")
                print("torch_reference: " + why, flush=True)
                traceback.print_exc(limit=3)
                self.graph, self.forward = None, self.model
                self.opt.zero_grad(set_to_none=True)
        self._restore(saved)
        if self.dev.type == "cuda":
            torch.cuda.synchronize()
        self.setup_s = time.time() - t0
