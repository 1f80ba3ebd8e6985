"""cutrain's device clock (data/metrics.h) for the PyTorch runs, so both sides of a comparison
say what bounds them by the same rule, read the same way.

Per step, three marks on the device's own clock (CUDA: timing events on the current stream;
the CPU: the host's clock): `begin` before the step waits for its batch, `ready` once the batch
is where the step reads it, `end` after the step's last kernel. From them:
  compute  ready -> end
  wait     begin -> ready: the device waiting for its batch (decode, copy, augmentation)
  idle     the previous step's end -> begin: nothing queued (the host late); not counted for
           the first step and after other work (an evaluation: interrupt())
On CUDA also launch, the host's time from `ready` to `end` (queuing the step's work).
busy = compute / (compute + wait + idle); the bound, by cutrain's rule (run_bound): loader when
the device waited more than 5% of the time, else host when it idled more than 5% or when the
launches took 95% of the compute time or more (the GPU kept pace with the host), else compute.
"""
import time

BOUND_PCT = 5.0  # data/metrics.h, kBoundPct
LAUNCH_BOUND_PCT = 95.0  # data/metrics.h, kLaunchBoundPct


def run_bound(idle_s, wait_s, compute_s, launch_s=0.0):
    """data/metrics.h's run_bound: "loader", "host", "compute", or None (nothing measured)."""
    wall = idle_s + wait_s + compute_s
    if not wall > 0:
        return None
    if 100 * wait_s > BOUND_PCT * wall:
        return "loader"
    if 100 * idle_s > BOUND_PCT * wall:
        return "host"
    if launch_s > 0 and 100 * launch_s >= LAUNCH_BOUND_PCT * compute_s:
        return "host"
    return "compute"


class DeviceClock:
    def __init__(self, cuda):
        self.cuda = cuda
        self.steps = []        # (begin, ready, end, prev_end or None, launch s) this window
        self.prev_end = None   # the last step's end, while nothing else ran since
        self._begin = self._ready = None
        self._ready_host = 0.0
        self._free = []        # CUDA events made once and reused: no allocation per step

    def _now(self):
        if not self.cuda:
            return time.perf_counter()
        import torch
        e = self._free.pop() if self._free else torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    def begin(self):
        self._begin = self._now()

    def ready(self):
        self._ready = self._now()
        self._ready_host = time.perf_counter()

    def end(self):
        end = self._now()
        # The host's time queuing the step (a GPU's; on the CPU the work is done as queued).
        launch = time.perf_counter() - self._ready_host if self.cuda else 0.0
        self.steps.append((self._begin, self._ready, end, self.prev_end, launch))
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
        idle = wait = compute = launch = 0.0
        for begin, ready, end, prev, host in self.steps:
            if prev is not None:
                idle += max(0.0, self._seconds(prev, begin))
            wait += self._seconds(begin, ready)
            compute += self._seconds(ready, end)
            launch += host
        if self.cuda:  # every event read back to the pool, but the next step's prev_end
            used = [e for begin, ready, end, prev, _ in self.steps
                    for e in (begin, ready, end, prev) if e is not None]
            self._free += list({id(e): e for e in used if e is not self.prev_end}.values())
        self.steps = []
        wall = idle + wait + compute
        if not wall > 0:
            return dict(busy_pct=None, device_wait_pct=None, idle_pct=None, launch_pct=None,
                        bound=None, compute_s=0.0, wall_s=0.0)
        return dict(busy_pct=100 * compute / wall, device_wait_pct=100 * wait / wall,
                    idle_pct=100 * idle / wall,
                    launch_pct=100 * launch / wall if launch > 0 else None,
                    bound=run_bound(idle, wait, compute, launch), compute_s=compute,
                    wall_s=wall)
