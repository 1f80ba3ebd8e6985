"""What proves that a PyTorch row ran as its label says ([peer-fair]); needs no torch.

torch_reference.py keeps a "proof" in its summary record: the settings every row runs with
(settings()), and for the tuned modes what torch_ref/tuned.py saw (TunedStep.finish()). It
prints them (lines()) and records which checks failed (failures()); report.py checks them again
from the record, so a table never shows a tuned row that did not run as labelled without saying
so. A tuned row fails when:
  - what ran is not what its mode names on that device (a capture or compilation fell back);
  - the timed run had any graph break, recompile or cudagraph skip (torch._dynamo's counters);
  - on CUDA, its graph replayed fewer times than there were steps, or a step synchronised with
    the host (torch.cuda.set_sync_debug_mode("warn") over the timed steps);
  - one step of the tuned path moved the parameters differently from one eager step on the
    same batch (the largest difference over 5% of the step's largest change), or the learning
    rate computed on the device differs from the schedule's.
"""

# What each tuned mode must run, on CUDA and on the CPU (no CUDA graphs there).
EXPECTED = {"tuned-graph": {"cuda": "cuda graph", "cpu": "eager"},
            "tuned-compile-graph": {"cuda": "compile-graph", "cpu": "compile (model only)"},
            "tuned-compile": {"cuda": "compile-step", "cpu": "compile-step"}}
MAX_REL_DIFF = 0.05  # tuned against eager, relative to the step's largest parameter change
MAX_LR_DIFF = 1e-6


def settings(torch, dev, amp, channels_last, tuned, optimizer):
    """The settings of a run (versions, cuDNN, TF32, memory format, autocast)."""
    cuda = dev.type == "cuda"
    return {"device": dev.type, "tuned": tuned, "torch": torch.__version__,
            "cuda": torch.version.cuda if cuda else None,
            "cudnn": torch.backends.cudnn.version() if cuda else None,
            "cudnn_benchmark": torch.backends.cudnn.benchmark if cuda else None,
            "tf32_matmul": torch.backends.cuda.matmul.allow_tf32 if cuda else None,
            "tf32_cudnn": torch.backends.cudnn.allow_tf32 if cuda else None,
            "memory_format": "channels_last" if channels_last else "contiguous (NCHW)",
            "autocast": "float16" if amp else "none (fp32)", "optimizer_name": optimizer}


def _n(v):
    return "-" if v is None else f"{v:.3g}" if isinstance(v, float) else str(v)


def lines(mode, p):
    """The proof as printed by a run: one "proof:" line per group."""
    out = [f"proof: {mode} on {p['device']}: ran {p.get('ran')}; torch {p['torch']}, CUDA "
           f"{_n(p['cuda'])}, cuDNN {_n(p['cudnn'])}; cudnn.benchmark "
           f"{_n(p['cudnn_benchmark'])}; TF32 matmul {_n(p['tf32_matmul'])}, cuDNN "
           f"{_n(p['tf32_cudnn'])}; memory format {p['memory_format']}; autocast "
           f"{p['autocast']}; optimizer {p.get('optimizer', p['optimizer_name'])}"]
    if p["tuned"]:
        out += [f"proof: graph captured {'yes' if p.get('graph_captured') else 'no'} "
                f"({p.get('graph_why')}); replays {_n(p.get('replays'))} of {p.get('steps')} "
                f"steps",
                f"proof: one tuned step against one eager step, same batch and state: largest "
                f"parameter difference {_n(p.get('replay_vs_eager_max_diff'))} "
                f"({_n(p.get('replay_vs_eager_rel'))} of the step's largest change)"
                + (f"; {p['replay_vs_eager_why']}" if p.get("replay_vs_eager_why") else "")
                + f"; learning rate on the device against the schedule: "
                f"{_n(p.get('lr_schedule_max_diff'))}",
                f"proof: timed run: graph breaks {_n(p.get('graph_breaks'))}, unique graphs "
                f"{_n(p.get('unique_graphs'))}, recompiles {_n(p.get('recompiles'))}, "
                f"cudagraph skips {_n(p.get('cudagraph_skips'))}; compile cache "
                f"{p.get('compile_cache')}",
                f"proof: sync debug mode {p.get('sync_debug')}: syncs in the timed steps "
                f"{_n(p.get('syncs'))}; skipped steps {_n(p.get('skipped_steps'))}; final "
                f"loss scale {_n(p.get('final_loss_scale'))}"]
    failed = failures(mode, p)
    out.append("proof: " + ("PASS" if not failed else "FAIL: " + "; ".join(failed)))
    return out


def failures(mode, p):
    """Why a row does not prove its label ([] when it does, and for the untuned modes)."""
    if mode not in EXPECTED:
        return []
    bad = []
    want = EXPECTED[mode][p["device"]]
    if p.get("ran") != want:
        bad.append(f"ran {p.get('ran')!r}, not {want!r} ({p.get('graph_why')})")
    for key, name in (("graph_breaks", "graph breaks"), ("recompiles", "recompiles"),
                      ("cudagraph_skips", "cudagraph skips")):
        if p.get(key):
            bad.append(f"{p[key]} {name} in the timed run")
    if p["device"] == "cuda":
        if (p.get("graph_captured") and p.get("replays") is not None and
                p.get("replays") != p.get("steps")):  # (None: cudagraph trees, uncounted)
            bad.append(f"replays {p.get('replays')} of {p.get('steps')} steps")
        if p.get("syncs"):
            bad.append(f"{p['syncs']} host syncs in the timed steps")
    rel = p.get("replay_vs_eager_rel")
    if not p.get("replay_vs_eager_why") and (rel is None or not rel <= MAX_REL_DIFF):
        bad.append(f"one tuned step differs from one eager step by {_n(rel)} of the step's "
                   f"largest change (at most {MAX_REL_DIFF})")
    lr = p.get("lr_schedule_max_diff")
    if lr is None or not lr <= MAX_LR_DIFF:
        bad.append(f"the learning rate on the device differs from the schedule by {_n(lr)}")
    return bad
