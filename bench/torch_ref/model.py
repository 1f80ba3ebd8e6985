"""The PyTorch twin of a cutrain model, built from `cutrain describe --json` (train/cli/describe.h).

Every layer is made from the fields cutrain itself reports (kind, K, RxS, stride, pad, bias),
and check_against() compares each layer's output shape and parameter count, and every
parameter's shape, with what cutrain reported: the two models are the same by construction.

Initialisation as nn/model.h: conv and linear weights normal with std sqrt(2 / fan_in)
(fan_in = R*S*C or C; kaiming_normal_ in fan_in mode with the ReLU gain), biases and BN beta 0,
BN gamma 1. BN: eps 1e-5, momentum 0.1, unbiased running variance (as kernels/batchnorm.h).
The draws differ (cutrain keys each element on (seed, parameter, element)); the distribution
is the same.
"""
import collections
import json
import math
import os
import subprocess
import tempfile

import torch
import torch.nn as nn


def describe(cutrain, model, size, channels, classes, model_text=None):
    """`cutrain describe MODEL --json` (a built-in name or a file), or of `model_text` when
    given (a config.json's resolved description); returns the parsed JSON."""
    path = model
    if model_text is not None:
        with tempfile.NamedTemporaryFile("w", suffix=".model", delete=False) as f:
            f.write(model_text)
            path = f.name
    try:
        out = subprocess.run(
            [cutrain, "describe", path, "--input", f"{size}x{size}x{channels}",
             "--classes", str(classes), "--json"],
            check=True, capture_output=True, text=True).stdout
    finally:
        if model_text is not None:
            os.unlink(path)
    return json.loads(out)


def _kaiming(w, fan_in):
    with torch.no_grad():
        w.normal_(0.0, math.sqrt(2.0 / fan_in))


def _conv(spec, cin):
    conv = nn.Conv2d(cin, spec["out"], (spec["R"], spec["S"]), stride=tuple(spec["stride"]),
                     padding=tuple(spec["pad"]), bias=spec["bias"])
    _kaiming(conv.weight, spec["R"] * spec["S"] * cin)
    if conv.bias is not None:
        nn.init.zeros_(conv.bias)
    return conv


def _bn(c):
    return nn.BatchNorm2d(c, eps=1e-5, momentum=0.1)  # gamma 1, beta 0, mean 0, var 1


class Gap(nn.Module):
    def forward(self, x):  # (N,C,H,W) -> (N,C)
        return x.mean(dim=(2, 3))


class FlattenNHWC(nn.Module):
    """cutrain flattens (H,W,C) in that order; so does this, so a following linear layer's
    weight columns mean the same pixels."""

    def forward(self, x):
        return x.permute(0, 2, 3, 1).flatten(1)


class ResBlock(nn.Module):
    """y = relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), as nn/layers.cpp."""

    def __init__(self, spec, cin):
        super().__init__()
        parts = {p["name"].split(".")[-1]: p for p in spec["parts"]}
        self.conv1 = _conv(parts["conv1"], cin)
        self.bn1 = _bn(parts["conv1"]["out"])
        self.conv2 = _conv(parts["conv2"], parts["conv1"]["out"])
        self.bn2 = _bn(parts["conv2"]["out"])
        self.shortcut = None
        if "shortcut" in parts:
            self.shortcut = nn.Sequential(_conv(parts["shortcut"], cin),
                                          _bn(parts["shortcut"]["out"]))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (x if self.shortcut is None else self.shortcut(x)))


def build(desc):
    """nn.Sequential with one module per line of the description, named like cutrain's layers."""
    H, W, C = desc["input"]
    layers = []
    c = C
    for spec in desc["layers"]:
        kind = spec["kind"]
        if kind == "conv":
            m = _conv(spec, c)
        elif kind == "bn":
            m = _bn(c)
        elif kind == "relu":
            m = nn.ReLU(inplace=True)
        elif kind == "maxpool":
            m = nn.MaxPool2d((spec["R"], spec["S"]), stride=tuple(spec["stride"]),
                             padding=tuple(spec["pad"]))
        elif kind == "gap":
            m = Gap()
        elif kind == "flatten":
            m = FlattenNHWC()
        elif kind == "linear":
            m = nn.Linear(c, spec["out"], bias=spec["bias"])
            _kaiming(m.weight, c)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif kind == "resblock":
            m = ResBlock(spec, c)
        else:
            raise ValueError(f"{spec['name']}: unknown layer kind '{kind}'")
        shape = spec["shape"]
        c = shape[-1]
        layers.append((spec["name"], m))
    return nn.Sequential(collections.OrderedDict(layers))


def _cutrain_layout(name, shape):
    """A PyTorch parameter shape in cutrain's layout: conv (K,C,R,S) -> (K,R,S,C)."""
    if len(shape) == 4:
        return [shape[0], shape[2], shape[3], shape[1]]
    return list(shape)


def check_against(model, desc, out=print):
    """Per-layer output shapes and parameter counts, and every parameter's shape, against
    cutrain's description. Prints a side-by-side table; returns the number of mismatches."""
    H, W, C = desc["input"]
    shapes = {}
    hooks = [m.register_forward_hook(
        lambda mod, inp, o, name=name: shapes.__setitem__(name, list(o.shape[1:])))
        for name, m in model.named_children()]
    was_training = model.training
    model.eval()
    with torch.no_grad():
        model(torch.zeros(2, C, H, W))
    model.train(was_training)
    for h in hooks:
        h.remove()

    bad = 0
    out(f"{'layer':<10} {'cutrain shape':<14} {'torch shape':<14} {'cutrain params':>14} "
        f"{'torch params':>12}")
    for spec in desc["layers"]:
        name = spec["name"]
        s = shapes[name]
        torch_shape = s if len(s) == 1 else [s[1], s[2], s[0]]  # (C,H,W) -> (H,W,C)
        n = sum(p.numel() for p in getattr(model, name).parameters())
        ok = torch_shape == spec["shape"] and n == spec["params"]
        bad += not ok
        out(f"{name:<10} {str(tuple(spec['shape'])):<14} {str(tuple(torch_shape)):<14} "
            f"{spec['params']:>14} {n:>12}{'' if ok else '   <-- differs'}")
    total = sum(p.numel() for p in model.parameters())
    out(f"{'total':<10} {'':<14} {'':<14} {desc['params']:>14} {total:>12}"
        f"{'' if total == desc['params'] else '   <-- differs'}")
    bad += total != desc["params"]

    # Every parameter, in order (cutrain: w, then b; gamma, then beta, as PyTorch).
    theirs = [(p["name"], p["shape"]) for p in desc["parameters"]]
    ours = [(n, _cutrain_layout(n, list(p.shape))) for n, p in model.named_parameters()]
    if len(theirs) != len(ours):
        out(f"parameter tensors: cutrain {len(theirs)}, torch {len(ours)}  <-- differs")
        bad += 1
    for (tn, ts), (on, os_) in zip(theirs, ours):
        if ts != os_:
            out(f"parameter {tn} {ts} vs torch {on} {os_}  <-- differs")
            bad += 1
    out(f"parameter tensors: {len(theirs)} in cutrain, {len(ours)} in torch; "
        f"{'all shapes equal' if bad == 0 else f'{bad} differences'}")
    return bad
