"""cutrain's device clock (data/metrics.h) for the PyTorch runs, so both sides of a comparison
say what bounds them by the same rule, read the same way.

Per step, three marks on the device's own clock (CUDA: timing events on the current stream;
the CPU: the host's clock): `begin` before the step waits for its batch, `ready` once the batch
is where the step reads it, `end` after the step's last kernel. From them:
  compute  ready -> end
  wait     begin -> ready: the device waiting for its batch (decode, copy, augmentation)
  idle     the previous step's end -> begin: nothing queued (the host late); not counted for
           the first step and after other work (an evaluation: interrupt())
busy = compute / (compute + wait + idle); the bound, by cutrain's rule (run_bound): loader when
the device waited more than 5% of the time, else host when it idled more than 5%, else
compute.
"""
import time

BOUND_PCT = 5.0  # data/metrics.h, kBoundPct


def run_bound(idle_s, wait_s, compute_s):
    """data/metrics.h's run_bound: "loader", "host", "compute", or None (nothing measured)."""
    wall = idle_s + wait_s + compute_s
    if not wall > 0:
        return None
    if 100 * wait_s > BOUND_PCT * wall:
        return "loader"
    if 100 * idle_s > BOUND_PCT * wall:
        return "host"
    return "compute"


class DeviceClock:
    def __init__(self, cuda):
        self.cuda = cuda
        self.steps = []        # (begin, ready, end, prev_end or None) of the window's steps
        self.prev_end = None   # the last step's end, while nothing else ran since
        self._begin = self._ready = None

    def _now(self):
        if not self.cuda:
            return time.perf_counter()
        import torch
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    def begin(self):
        self._begin = self._now()

    def ready(self):
        self._ready = self._now()

    def end(self):
        end = self._now()
        self.steps.append((self._begin, self._ready, end, self.prev_end))
        self.prev_end = end

    def interrupt(self):
        """Other work ran (an evaluation): the next step counts no idle time."""
        self.prev_end = None

    def _seconds(self, a, b):
        return (b - a) if not self.cuda else a.elapsed_time(b) / 1000.0

    def window(self):
        """The steps since the last call, as the step records' fields (waits for them)."""
        if self.cuda and self.steps:
            self.steps[-1][2].synchronize()
        idle = wait = compute = 0.0
        for begin, ready, end, prev in self.steps:
            if prev is not None:
                idle += max(0.0, self._seconds(prev, begin))
            wait += self._seconds(begin, ready)
            compute += self._seconds(ready, end)
        self.steps = []
        wall = idle + wait + compute
        if not wall > 0:
            return dict(busy_pct=None, device_wait_pct=None, idle_pct=None, bound=None,
                        compute_s=0.0, wall_s=0.0)
        return dict(busy_pct=100 * compute / wall, device_wait_pct=100 * wait / wall,
                    idle_pct=100 * idle / wall, bound=run_bound(idle, wait, compute),
                    compute_s=compute, wall_s=wall)
