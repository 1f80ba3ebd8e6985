// The trainer's numbers, pinned: fixed-seed CPU runs whose every step (loss, top-1 count,
// learning rate, loss scale before and after, taken or skipped and why) and whose final state
// (every tensor of a snapshot, its scalars, step and cursor) are compared with values recorded
// from an earlier cutrain. A refactoring of the training step ([engine]) must reproduce them
// bit for bit; a change that alters results on purpose updates the table below and says why in
// its commit.
//
// The variants cover what the step does: fp32 and fp16 (the real half type), SGD and AdamW,
// gradient accumulation, 2 and 3 CPU replicas, a skipped step (an inf injected into one
// gradient), resume mid-epoch through a checkpoint file, --balance loss with label smoothing,
// and --cuda-graph (on the CPU it changes nothing, which is what is pinned).
//
// The runs use the reference kernels (--conv/--linear direct), whose bits depend on nothing
// but the code: oneDNN's, the CPU's default, depend on the thread count and on the CPU's
// instruction set (kernels/onednn.h), so a table of them would hold on one machine only.
//
// To print the current values as the table's C++ (after a change that alters results on
// purpose): CUTRAIN_GOLDEN_PRINT=1 bin/cutrain_tests -tc='golden*'
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/xxhash64.h"
#include "tests/test_util.h"
#include "tests/train/replica_fixture.h"
#include "tests/train/train_fixture.h"
#include "train/checkpoint/checkpoint.h"
#include "train/engine/trainer.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {

struct Golden {
  const char* name;
  uint64_t steps_hash;        // of every step's line (step_line)
  uint64_t state_hash;        // of the final snapshot (state_hash)
  std::vector<double> losses;  // every step's loss, exactly
};

// One step's result as text, every number exactly (hexadecimal floating point).
std::string step_line(const StepResult& r) {
  char buf[512];
  std::snprintf(buf, sizeof buf, "%" PRId64 " %d %a %" PRId64 " %a %a %a %d %s e%" PRId64 "/b%" PRId64,
                r.step, r.images, r.loss, r.correct, r.lr, r.loss_scale, r.scale_after,
                int(r.taken), r.overflow.c_str(), int64_t(r.batch.epoch), int64_t(r.batch.batch));
  return buf;
}

// Every tensor (name, shape, dtype, bytes), every scalar, the step and the cursor.
uint64_t state_hash(const Checkpoint& c) {
  std::string s;
  for (const auto& [name, t] : c.tensors) {
    s += name + " " + t.str() + " ";
    char h[32];
    std::snprintf(h, sizeof h, "%016" PRIx64 "\n", xxh64(t.raw(), t.bytes()));
    s += h;
  }
  for (const auto& [name, v] : c.scalars) {
    char h[128];
    std::snprintf(h, sizeof h, "%s %a\n", name.c_str(), v);
    s += h;
  }
  s += std::to_string(c.step) + " " + std::to_string(c.cursor.epoch) + " " +
       std::to_string(c.cursor.batch);
  return xxh64(s.data(), s.size());
}

RunDevice cpu(DType dtype) {
  RunDevice d;
  d.dtype = dtype;
  return d;
}

struct Run {
  std::vector<StepResult> steps;
  Checkpoint final_state;
};

Run run_steps(Trainer& t, int from, int to, Run run = {}) {
  for (int s = from; s < to; s++) run.steps.push_back(t.step());
  return run;
}

// The variants, each a short run on 160 real Fashion-MNIST images (train_fixture.h).
Run run_variant(const std::string& name, const std::string& dir) {
  TrainConfig c = tiny_run_config(dir + "/" + name, 160, 3);  // 5 steps an epoch, 15 steps
  c.conv = c.linear = "direct";  // the reference kernels (below)
  if (name == "fp32 sgd accum 2") {
    Trainer t(c, cpu(DType::f32));
    Run r = run_steps(t, 0, 15);
    r.final_state = t.snapshot();
    return r;
  }
  if (name == "fp16 adamw accum 2") {
    c.optimizer = "adamw", c.lr = 3e-3;
    Trainer t(c, cpu(DType::f16));
    Run r = run_steps(t, 0, 15);
    r.final_state = t.snapshot();
    return r;
  }
  if (name == "fp16 nesterov accum 1 cuda-graph") {
    c.optimizer = "nesterov", c.accum = 1, c.cuda_graph = true;
    Trainer t(c, cpu(DType::f16));
    Run r = run_steps(t, 0, 15);
    r.final_state = t.snapshot();
    return r;
  }
  if (name == "fp16 sgd skipped step") {
    Trainer t(c, cpu(DType::f16));
    Run r = run_steps(t, 0, 3);
    t.after_backward = [](Trainer& tr) {
      for (const VarPtr& p : tr.model().parameters())
        if (p->name == "conv2.w")
          p->grad_buffer().data<half_t>()[5] = half_t(std::numeric_limits<float>::infinity());
    };
    r = run_steps(t, 3, 4, r);
    t.after_backward = nullptr;
    r = run_steps(t, 4, 15, r);
    r.final_state = t.snapshot();
    return r;
  }
  if (name == "fp16 adamw resume at step 7") {
    c.optimizer = "adamw", c.lr = 3e-3;
    Run r;
    {
      Trainer a(c, cpu(DType::f16));
      r = run_steps(a, 0, 7);
      write_checkpoint(a.snapshot(), dir + "/resume.h5");
    }
    const Checkpoint ck = read_checkpoint(dir + "/resume.h5");
    Trainer b(config_from_json_text(ck.config_json, "resume.h5"), cpu(DType::f16));
    b.restore(ck);
    r = run_steps(b, 7, 15, r);
    r.final_state = b.snapshot();
    return r;
  }
  if (name == "fp32 balance loss smoothing") {
    c.balance = "loss", c.label_smoothing = 0.1;
    Trainer t(c, cpu(DType::f32));
    Run r = run_steps(t, 0, 15);
    r.final_state = t.snapshot();
    return r;
  }
  for (const int R : {2, 3}) {
    for (const DType dt : {DType::f32, DType::f16}) {
      if (name != std::to_string(R) + " replicas " + dtype_name(dt)) continue;
      // 240 images, batches of 24, one micro-batch per replica, BatchNorm: 10 steps an epoch.
      TrainConfig rc = replica_config(dir + "/" + name, R, kTinyModel);
      rc.conv = rc.linear = "direct";
      Trainer t(rc, cpu(dt));
      Run r = run_steps(t, 0, 15);
      r.final_state = t.snapshot();
      return r;
    }
  }
  REQUIRE_MESSAGE(false, "no variant " << name);
  return {};
}

// Recorded from cutrain at commit bea7e10 (before [engine]), on x86-64 with g++ 12. One change
// since, on purpose: the final state of "3 replicas f16". BatchNorm's running statistics are
// averaged over the replicas by the Collective now on the CPU as on GPUs (the ring: sum in the
// ring's order, then x 1/R), where the CPU summed them in rank order and divided by R; with 3
// replicas the two round differently (with 2 they agree). Every loss and step was unchanged:
// the statistics were averaged only for evaluation and checkpoints.
// A second change, on purpose ([sync-bn] item 1): the final state of every variant whose step
// has more than one micro-batch (--accum 2, or replicas), which is all but "fp16 nesterov accum
// 1 cuda-graph". Their BatchNorm running statistics make one update per optimizer step, from
// the mean of the step's batch statistics (nn/ops.h, BatchNormState::step_sums), where each
// micro-batch made its own (and replicas averaged theirs for evaluation): R replicas and
// --accum R now agree. Every loss and step is unchanged: the running statistics are used only
// in evaluation.
const std::vector<Golden>& goldens() {
  static const std::vector<Golden> g = {
#include "tests/train/engine/golden_values.inc"
  };
  return g;
}

}  // namespace

TEST_CASE("golden: fixed-seed CPU runs reproduce the recorded losses and final state bit for bit") {
  TempDir dir;
  const bool print = std::getenv("CUTRAIN_GOLDEN_PRINT") != nullptr;
  const std::vector<std::string> names = {
      "fp32 sgd accum 2",          "fp16 adamw accum 2",  "fp16 nesterov accum 1 cuda-graph",
      "fp16 sgd skipped step",     "fp16 adamw resume at step 7",
      "fp32 balance loss smoothing", "2 replicas f32",    "2 replicas f16",
      "3 replicas f16"};
  std::string table;
  for (const std::string& name : names) {
    INFO("variant: " << name);
    Run r = run_variant(name, dir.str());
    std::string lines;
    for (const StepResult& s : r.steps) lines += step_line(s) + "\n";
    const uint64_t steps_hash = xxh64(lines.data(), lines.size());
    const uint64_t st = state_hash(r.final_state);
    if (print) {
      char head[256];
      std::snprintf(head, sizeof head, "    {\"%s\", 0x%016" PRIx64 "ull, 0x%016" PRIx64 "ull,\n     {",
                    name.c_str(), steps_hash, st);
      table += head;
      for (size_t i = 0; i < r.steps.size(); i++) {
        char v[64];
        std::snprintf(v, sizeof v, "%s%a", i ? ", " : "", r.steps[i].loss);
        table += v;
        if (i % 4 == 3 && i + 1 < r.steps.size()) table += "\n      ";
      }
      table += "}},\n";
      MESSAGE(name << ":\n" << lines);
      continue;
    }
    const Golden* want = nullptr;
    for (const Golden& g : goldens())
      if (name == g.name) want = &g;
    REQUIRE_MESSAGE(want, "no recorded values for " << name);
    REQUIRE(r.steps.size() == want->losses.size());
    for (size_t i = 0; i < r.steps.size(); i++) {
      INFO("step " << i << ": " << step_line(r.steps[i]));
      REQUIRE(r.steps[i].loss == want->losses[i]);
    }
    INFO("the steps now:\n" << lines);
    REQUIRE(steps_hash == want->steps_hash);
    REQUIRE(st == want->state_hash);
  }
  if (print) std::printf("%s", table.c_str());
}
