#!/usr/bin/env python3
"""The tuned PyTorch step (bench/torch_ref/tuned.py) on the CPU, its fp16 path included (CPU
autocast in float16 stands in for CUDA's): the GPU-only parts (CUDA graphs, the sync debug mode)
cannot run here, the rest can. Needs PyTorch 2.x (the .venv-bench of bench/README.md);
tests/bench/compare_report_test.cpp runs it there and skips it, saying why, without one.

  .venv-bench/bin/python tests/bench/tuned_step_test.py CUTRAIN   # the cutrain program
"""
import math
import os
import sys
import unittest

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from torch_ref import data as tdata  # noqa: E402
from torch_ref import model as tmodel  # noqa: E402
from torch_ref.tuned import TunedStep, lr_tensor  # noqa: E402

CUTRAIN = os.path.join(ROOT, "bin", "cutrain")
TINY = """conv 8 3x3 pad=1
bn
relu
maxpool 2x2
conv 8 3x3 pad=1 stride=2
bn
relu
maxpool 2x2
flatten
linear classes
"""
CFG = {"batch": 32, "accum": 1, "optimizer": "nesterov", "lr": 0.1, "momentum": 0.9,
       "wd": 5e-4, "label_smoothing": 0.1, "augment": False, "size": 28, "schedule": "cosine"}


def lr_at(kind, base, warmup, total, step):
    """bench/torch_reference.py's lr_at, imported without its command line."""
    sys.argv = sys.argv[:1]
    import torch_reference
    return torch_reference.lr_at(kind, base, warmup, total, step)


class Feeder:
    """Random resident data: 128 images (28,28,1) uint8, labels 0..9."""

    def __init__(self):
        g = torch.Generator().manual_seed(3)
        self.cfg, self.pad, self.n_train = CFG, 0, 128
        self.train_x = torch.randint(0, 256, (128, 28, 28, 1), dtype=torch.uint8, generator=g)
        self.train_y = torch.randint(0, 10, (128,), generator=g)


def tuned(how):
    torch.manual_seed(1)
    desc = tmodel.describe(CUTRAIN, "tiny", 28, 1, 10, TINY)
    model = tmodel.build(desc).to(memory_format=torch.channels_last)
    mean, std = torch.tensor([0.5]), torch.tensor([0.25])
    step = TunedStep(model, CFG, torch.device("cpu"), True,
                     lambda x: tdata.normalise(x, mean, std, True), how, Feeder(),
                     ("cosine", 0.1, 3, 12), constants=(mean, std))
    step.setup(None)
    return step


class TunedStepTest(unittest.TestCase):
    def check_step(self, how, ran):
        t = tuned(how)
        self.assertEqual(t.ran, ran)
        # one tuned step against one eager step: the same parameters, up to rounding
        self.assertLess(t.proof["replay_vs_eager_rel"], 0.05)
        # a step whose fp16 gradients overflow leaves the parameters and the optimizer's state
        # as they were, halves the scale and counts the skip, as cutrain's loss scaler
        t.scale.fill_(2.0 ** 100)
        before = [p.detach().clone() for p in t.params]
        momentum = [b.clone() for b in t.opt_state["momentum_buffer"]]
        t()
        self.assertTrue(all(torch.equal(a, b) for a, b in zip(before, t.params)))
        self.assertTrue(all(torch.equal(a, b) for a, b in
                            zip(momentum, t.opt_state["momentum_buffer"])))
        self.assertEqual((t.skipped.item(), t.counter.item(), t.scale.item()), (1, 1, 2.0 ** 99))
        # a clean step moves them
        t.scale.fill_(2.0 ** 16)
        t()
        self.assertFalse(all(torch.equal(a, b) for a, b in zip(before, t.params)))
        self.assertEqual((t.skipped.item(), t.counter.item()), (1, 2))
        proof = t.finish()
        self.assertEqual((proof["graph_breaks"], proof["recompiles"],
                          proof["cudagraph_skips"]), (0, 0, 0))

    def test_graph_mode_step_eager_on_the_cpu(self):
        self.check_step("graph", "eager")

    def test_whole_step_compiled_fullgraph(self):
        self.check_step("compile-step", "compile-step")

    def test_the_device_learning_rate_is_the_schedule(self):
        for kind in ("constant", "linear", "cosine", "onecycle"):
            got = lr_tensor(kind, 0.4, 7, 50, torch.arange(60)).tolist()
            want = [lr_at(kind, 0.4, 7, 50, k) for k in range(60)]
            self.assertTrue(all(math.isclose(a, b, abs_tol=1e-7) for a, b in zip(got, want)),
                            kind)


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        CUTRAIN = sys.argv.pop(1)
    unittest.main()
