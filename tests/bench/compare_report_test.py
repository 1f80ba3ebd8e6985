#!/usr/bin/env python3
"""Fixture tests of bench/compare.sh's table (bench/torch_ref/report.py) and of the proof that
each PyTorch row ran as its label says (bench/torch_ref/proof.py): recorded rows in, table out.
No torch needed (CI's Python runs it); tests/bench/compare_report_test.cpp runs this file, and
compare.sh --report-only on the same kind of folders.

  python3 tests/bench/compare_report_test.py [FOLDER]   # FOLDER: write the fixture runs there
"""
import copy
import json
import os
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from torch_ref import proof, report  # noqa: E402

# A tuned PyTorch run on CUDA that proves its label.
GOOD_PROOF = {"device": "cuda", "tuned": True, "torch": "2.15.0", "cuda": "13.2", "cudnn": 92600,
              "cudnn_benchmark": True, "tf32_matmul": False, "tf32_cudnn": True,
              "memory_format": "channels_last", "autocast": "float16", "optimizer_name": "sgd",
              "optimizer": "sgd: torch.optim functional, fused=True", "ran": "cuda graph",
              "graph_captured": True, "graph_why": "torch.cuda.graph around the whole step",
              "replays": 4680, "steps": 4680, "replay_vs_eager_max_diff": 1e-6,
              "replay_vs_eager_rel": 1e-3, "replay_vs_eager_why": None,
              "lr_schedule_max_diff": 1e-9, "graph_breaks": 0, "unique_graphs": 0,
              "recompiles": 0, "cudagraph_skips": 0, "compile_cache": "none",
              "sync_debug": "warn", "syncs": 0, "skipped_steps": 3, "final_loss_scale": 32768.0}


def step(epoch, images_per_s, busy=90.0, wait=1.0, idle=2.0, launch=None, pipeline=None):
    return {"kind": "step", "epoch": epoch, "images_per_s": images_per_s, "busy_pct": busy,
            "device_wait_pct": wait, "idle_pct": idle, "launch_pct": launch,
            "pipeline_ratio": pipeline}


def write_run(folder, recs, wall, log="", config=None):
    os.makedirs(folder)
    with open(os.path.join(folder, "metrics.jsonl"), "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in recs))
    with open(os.path.join(folder, "wall_s"), "w") as f:
        f.write(f"{wall}\n")
    with open(os.path.join(folder, "log"), "w") as f:
        f.write(log)
    if config is not None:
        with open(os.path.join(folder, "config.json"), "w") as f:
            json.dump(config, f)


CUTRAIN_LOG = """cutrain train: cuda fp16
CUDA graphs: on (the step of a full batch is captured after 3 launched steps and replayed)
cutrain: --cuda-graph: the step captured at step 3 as two CUDA graphs (forward and backward: 61 nodes; the update: 2 nodes), replayed for every full batch from now on
CUDA graph: 4677 of 4680 steps replayed from it
"""


def write_fixture(out):
    """Batch 128: cutrain (3 seeds, one never reaching the target), cutrain-graph, a passing
    tuned-graph, a tuned-compile with a graph break, a launch-bound dataloader run."""
    b = os.path.join(out, "b128")
    os.makedirs(b)
    with open(os.path.join(b, "step-plan.txt"), "w") as f:
        f.write("Total: 72 launches, 556.03 MB moved, 17.03 GFLOP; ideal step 165.98 us\n")
    for seed, (rate, t93, setup) in enumerate([(80000, 7.0, 1.5), (82000, None, 1.0),
                                              (78000, 6.0, 2.0)]):
        evals = [{"kind": "eval", "epoch": 10, "top1": 0.935 if t93 else 0.925,
                  "time": t93 or 8.0}]
        write_run(os.path.join(b, f"cutrain-s{seed}"),
                  [{"kind": "start", "setup_s": setup, "conv_auto_s": 0.5},
                   step(1, 1.0), step(2, rate, pipeline=1.2), step(3, rate, pipeline=1.4)] + evals,
                  wall=10.0 + seed, log="CUDA graphs: off (--no-cuda-graph)\n",
                  config={"kernel_plan": "conv1=tc,tc,tc", "conv": "auto", "linear": "auto"})
    write_run(os.path.join(b, "cutrain-graph-s0"),
              [{"kind": "start", "setup_s": 1.0, "conv_auto_s": 0.4},
               step(2, 90000), {"kind": "eval", "epoch": 10, "top1": 0.936, "time": 6.5}],
              wall=9.0, log=CUTRAIN_LOG, config={"kernel_plan": "", "conv": "auto",
                                                 "linear": "auto"})
    summary = {"kind": "summary", "mode": "tuned-graph", "ran": "cuda graph", "startup_s": 20.0,
               "decode_s": 3.0, "setup_s": 12.0, "proof": GOOD_PROOF}
    write_run(os.path.join(b, "torch-tuned-graph-s0"),
              [step(2, 120000), {"kind": "eval", "epoch": 10, "top1": 0.934, "time": 5.0},
               summary], wall=30.0)
    broken = copy.deepcopy(summary)
    broken.update(mode="tuned-compile", ran="compile-step")
    broken["proof"].update(ran="compile-step", graph_captured=False, replays=0,
                           graph_breaks=1, unique_graphs=3)
    write_run(os.path.join(b, "torch-tuned-compile-s0"),
              [step(2, 150000), {"kind": "eval", "epoch": 10, "top1": 0.934, "time": 4.0},
               broken], wall=90.0)
    loader = {"kind": "summary", "mode": "dataloader", "ran": "eager", "startup_s": 4.0,
              "decode_s": None, "setup_s": None,
              "proof": dict(GOOD_PROOF, tuned=False, ran="eager")}
    write_run(os.path.join(b, "torch-dataloader-s0"),
              [step(2, 25000, busy=50.0, wait=0.5, idle=1.0, launch=49.0),
               {"kind": "eval", "epoch": 10, "top1": 0.933, "time": 28.0}, loader], wall=40.0)
    return b


SETTINGS = ["cutrain", "cutrain-graph", "torch-tuned-graph", "torch-tuned-compile",
            "torch-dataloader"]


def row(text, setting):
    return next(line for line in text.splitlines() if line.startswith(f"| {setting} "))


class ReportTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.text = report.table(write_fixture(cls.tmp.name), 0.93, SETTINGS)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_medians_and_ranges_over_seeds(self):
        r = row(self.text, "cutrain")
        self.assertIn("| 3 | 80,000 (78,000-82,000) | 11.0 (10.0-12.0) |", r)
        self.assertIn("| 1.5 (1.0-2.0) (conv auto 0.5) |", r)  # set-up and its part
        # one seed never reached 93%: infinitely late in the median
        self.assertIn("| 7.0 (2 of 3 reached it) | 8.5 (2 of 3 reached it) |", r)
        self.assertIn("| 1.30 | no graph |", r)  # pipeline ratio: each seed's median of its records

    def test_set_up_columns_both_sides(self):
        r = row(self.text, "torch-tuned-graph (cuda graph)")
        self.assertIn("| 20.0 (decode 3.0; warm-up, compile/capture, check 12.0) |", r)
        self.assertIn("| 5.0 | 25.0 |", r)  # clock, and from the process's start
        self.assertIn("- time to 93% on the run's clock: torch-tuned-graph 5 against "
                      "cutrain-graph's 6.5 (1.30x)", self.text)
        self.assertNotIn("from the process's start: torch-tuned-graph", self.text)

    def test_bounds_and_launch(self):
        self.assertIn("| 49% | host (launch-bound) |", row(self.text, "torch-dataloader"))
        self.assertIn("| 90% | - | compute |", row(self.text, "cutrain"))

    def test_proof_checks(self):
        self.assertIn("| PASS |", row(self.text, "torch-tuned-graph (cuda graph)"))
        bad = row(self.text, "torch-tuned-compile (compile-step)")
        self.assertIn("FAIL: 1 graph breaks in the timed run", bad)
        self.assertIn("Rows that do not prove their label (not PyTorch's strongest): "
                      "torch-tuned-compile.", self.text)
        # the faster row failed its proof: the strongest is the one that passed
        self.assertIn("PyTorch's strongest row (the fastest tuned setting whose proof passed): "
                      "torch-tuned-graph, 120,000 images/s.", self.text)
        self.assertIn("proof: timed run: graph breaks 1, unique graphs 3", self.text)

    def test_cutrain_proof_from_its_log(self):
        self.assertIn("| graph, 4677 of 4680 steps |", row(self.text, "cutrain-graph"))
        self.assertIn("proof: captured at step 3: 61 + 2 nodes (forward and backward, the "
                      "update)", self.text)
        self.assertIn("proof: launches per step: 72 planned (cutrain describe --step), 63 in "
                      "the captured graphs", self.text)
        self.assertIn("proof: kernel plan conv1=tc,tc,tc (--conv auto, --linear auto)",
                      self.text)
        self.assertIn("| no graph |", row(self.text, "cutrain"))


class ProofTest(unittest.TestCase):
    def fails(self, mode="tuned-graph", **change):
        return proof.failures(mode, dict(GOOD_PROOF, **change))

    def test_a_good_row_passes_and_says_so(self):
        self.assertEqual(self.fails(), [])
        self.assertEqual(proof.lines("tuned-graph", GOOD_PROOF)[-1], "proof: PASS")

    def test_each_non_zero_counter_fails_saying_why(self):
        self.assertEqual(self.fails(graph_breaks=2), ["2 graph breaks in the timed run"])
        self.assertEqual(self.fails(recompiles=1), ["1 recompiles in the timed run"])
        self.assertEqual(self.fails(cudagraph_skips=1), ["1 cudagraph skips in the timed run"])
        self.assertEqual(self.fails(syncs=5), ["5 host syncs in the timed steps"])
        self.assertEqual(self.fails(replays=4679), ["replays 4679 of 4680 steps"])

    def test_the_whole_step_compiled_on_cuda(self):
        # Inductor's cudagraph trees replay it, uncounted: its proof is no skip
        self.assertEqual(self.fails("tuned-compile", ran="compile-step", replays=None), [])
        self.assertEqual(self.fails("tuned-compile", ran="compile-step", replays=None,
                                    cudagraph_skips=1), ["1 cudagraph skips in the timed run"])

    def test_a_fallback_fails(self):
        self.assertEqual(self.fails(ran="eager", graph_why="graph failed (OOM)"),
                         ["ran 'eager', not 'cuda graph' (graph failed (OOM))"])
        # on the CPU, compile-graph can only compile the model: that is its label there
        self.assertEqual(self.fails("tuned-compile-graph", device="cpu",
                                    ran="compile (model only)", graph_captured=False,
                                    replays=0), [])

    def test_a_step_unlike_eager_fails(self):
        self.assertIn("one tuned step differs from one eager step by 0.5 of the step's "
                      "largest change (at most 0.05)", self.fails(replay_vs_eager_rel=0.5))
        self.assertEqual(self.fails(replay_vs_eager_rel=0.5,
                                    replay_vs_eager_why="augment on"), [])
        self.assertIn("the learning rate on the device differs from the schedule by 0.01",
                      self.fails(lr_schedule_max_diff=0.01))

    def test_untuned_rows_have_nothing_to_prove(self):
        self.assertEqual(proof.failures("dataloader", dict(GOOD_PROOF, tuned=False)), [])


if __name__ == "__main__":
    if len(sys.argv) > 1 and not sys.argv[1].startswith("-"):
        print(write_fixture(sys.argv.pop(1)))  # for compare.sh --report-only's test
        sys.exit(0)
    unittest.main()
