// The training step on real Fashion-MNIST images: exact resume through a checkpoint file (on
// oneDNN and on the reference), an injected inf/NaN gradient skipping the step (scale halved,
// nothing else changed), fp16 against fp32 training from the same start, and the CPU's oneDNN
// kernels against the reference over a whole run.
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include "tests/test_util.h"
#include "tests/train/train_fixture.h"
#include "train/checkpoint/checkpoint.h"
#include "train/engine/trainer.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {

RunDevice cpu(DType dtype) {
  RunDevice d;
  d.dtype = dtype;
  return d;
}

// The tensors a skipped step must leave alone: weights, masters, optimizer state (not the
// BatchNorm running statistics, which the forward pass updates whether or not the step is taken).
std::vector<std::pair<std::string, Tensor>> weights_and_state(const Checkpoint& c) {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& t : c.tensors)
    if (t.first.find("running_") == std::string::npos) out.push_back(t);
  return out;
}

}  // namespace

TEST_CASE("resume: losses and final weights after a reload equal those of an unbroken run") {
  // Through a real checkpoint file, mid-epoch (step 11: epoch 2, batch 1, of 5 per epoch),
  // with augmentation, 2 micro-batches per step, and the warm-up and cosine schedule.
  // fp32 runs oneDNN (auto: the CPU's default, the same bits run to run on a fixed thread
  // count) or the reference (direct); fp16 runs the reference whatever the choice. With --ema
  // the averages resume too (the snapshots compared below hold them).
  struct Variant {
    const char* name;
    DType dtype;
    const char* optimizer;
    const char* kernels;
    double ema = 0;
  };
  for (const Variant v : {Variant{"fp32 sgd onednn", DType::f32, "sgd", "auto"},
                          Variant{"fp32 sgd reference", DType::f32, "sgd", "direct"},
                          Variant{"fp16 adamw", DType::f16, "adamw", "auto"},
                          Variant{"fp16 nesterov, --ema 0.9", DType::f16, "nesterov", "auto", 0.9},
                          Variant{"fp32 adamw, --ema 0.99", DType::f32, "adamw", "auto", 0.99}}) {
    INFO(std::string(v.name));
    TempDir dir;
    TrainConfig cfg = tiny_run_config(dir / "run", 160, 4);  // 5 steps per epoch, 20 steps
    cfg.conv = cfg.linear = v.kernels;
    cfg.optimizer = v.optimizer;
    cfg.lr = v.dtype == DType::f16 ? 3e-3 : 0.05;
    cfg.ema = v.ema;
    const int k = 11, N = 20;
    Trainer a(cfg, cpu(v.dtype));
    REQUIRE(a.total_steps() == N);
    std::vector<double> losses;
    for (int s = 0; s < N; s++) {
      if (s == k) write_checkpoint(a.snapshot(), dir / "k.h5");
      losses.push_back(a.step().loss);
    }
    const Checkpoint ck = read_checkpoint(dir / "k.h5");
    REQUIRE(ck.step == k);
    REQUIRE(ck.cursor == SamplerCursor{2, 1});
    Trainer b(config_from_json_text(ck.config_json, "k.h5"), cpu(v.dtype));
    b.restore(ck);
    for (int s = k; s < N; s++) {
      INFO("step " << s);
      const StepResult r = b.step();
      REQUIRE(r.step == s);
      REQUIRE(r.loss == losses[size_t(s)]);  // exactly: same batches, weights, state, lr
    }
    require_same_state(a.snapshot(), b.snapshot());
    if (v.ema > 0) {  // the averages are in the checkpoint, and they moved from the start
      REQUIRE(ck.tensor("conv1.w.ema").dtype() == DType::f32);
      REQUIRE(ck.tensor("bn1.running_var.ema").numel() == ck.tensor("bn1.running_var").numel());
      REQUIRE(!(a.snapshot().tensor("conv1.w.ema").to_floats() ==
                ck.tensor("conv1.w.ema").to_floats()));
    }
    // The comparison has teeth: an unbroken run does move the weights and the losses.
    REQUIRE(losses.front() != losses.back());
  }
}

TEST_CASE("the device clock: each step's compute, wait and idle on the CPU's clock") {
  TempDir dir;
  Trainer t(tiny_run_config(dir / "run", 320, 1), cpu(DType::f32));
  require_device_clock(t, true);
  // Two replicas: both lanes' marks (every step begins on every lane before any loader is
  // waited for, and is ready once every shard is).
  TrainConfig two = tiny_run_config(dir / "two", 320, 1);
  two.devices = "cpu,cpu";
  Trainer r(two, cpu(DType::f32));
  require_device_clock(r, true);
}

TEST_CASE("the device clock: a host that dawdles between steps makes the run host-bound") {
  TempDir dir;
  TrainConfig c = tiny_run_config(dir / "run", 320, 1);
  c.accum = 1;
  Trainer t(c, cpu(DType::f32));
  DeviceTime slow;  // steps 4-7, each after the host dawdled
  for (int s = 0; s < 8; s++) {
    const StepResult r = t.step();
    if (s >= 4) slow += r.device;
    // The host's own work between steps (a report, say): 100 ms against a step of ~20 ms of
    // the tiny model. (The work is the sleep; nothing waits for anything here.)
    if (s >= 3) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  INFO("idle " << slow.idle_s << " s, compute " << slow.compute_s << " s");
  REQUIRE(run_bound(slow) == Bound::host);
}

TEST_CASE("restore refuses a checkpoint of another model, with the tensor's name") {
  TempDir dir;
  TrainConfig cfg = tiny_run_config(dir / "run");
  Trainer a(cfg, cpu(DType::f32));
  Checkpoint c = a.snapshot();
  TrainConfig other = cfg;
  other.model_text = kSmallModel;
  Trainer b(other, cpu(DType::f32));
  REQUIRE_ERROR(b.restore(c), "checkpoint tensor 'conv2.w'");
  Trainer h(cfg, cpu(DType::f16));  // fp16 has master weights the fp32 checkpoint lacks
  REQUIRE_ERROR(h.restore(c), "is f32 cpu");
  c.tensors.emplace_back("extra", Tensor::zeros({1}, DType::f32));
  REQUIRE_ERROR(a.restore(c), "a tensor 'extra' that this model does not");
}

TEST_CASE("an inf or NaN in one gradient skips the step: scale halved, weights and state unchanged") {
  TempDir dir;
  const TrainConfig cfg = tiny_run_config(dir / "run");
  // Run A is clean: it shows that step 3 overflows nowhere by itself, so what run B sees
  // comes from the injection alone.
  Trainer a(cfg, cpu(DType::f16));
  for (int s = 0; s < 3; s++) a.step();
  const StepResult clean = a.step();
  REQUIRE(clean.taken);

  for (const float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
    INFO("injected " << bad);
    Trainer b(cfg, cpu(DType::f16));
    for (int s = 0; s < 3; s++) b.step();
    b.after_backward = [&](Trainer& t) {
      for (const VarPtr& p : t.model().parameters())
        if (p->name == "conv2.w") p->grad_buffer().data<half_t>()[5] = half_t(bad);
    };
    const Checkpoint before = b.snapshot();
    const double scale = b.step_state().scaler.scale;
    const int64_t taken = b.step_state().steps_taken;
    const StepResult r = b.step();
    REQUIRE(!r.taken);
    REQUIRE(r.overflow == "conv2.w");
    REQUIRE(r.loss_scale == scale);
    REQUIRE(b.step_state().scaler.scale == scale / 2);
    REQUIRE(b.step_state().scaler.consecutive_skips == 1);
    REQUIRE(b.step_state().steps_taken == taken);
    const Checkpoint after = b.snapshot();
    const auto w0 = weights_and_state(before), w1 = weights_and_state(after);
    REQUIRE(w0.size() == w1.size());
    REQUIRE(w0.size() > b.model().parameters().size());  // masters and Adam/SGD state included
    for (size_t i = 0; i < w0.size(); i++) {
      INFO(w0[i].first);
      REQUIRE(std::memcmp(w0[i].second.raw(), w1[i].second.raw(), w0[i].second.bytes()) == 0);
    }
    // The batch is consumed and the clock moves on; the next (clean) step is taken.
    REQUIRE(b.steps_done() == 4);
    b.after_backward = nullptr;
    const StepResult next = b.step();
    REQUIRE(next.taken);
    REQUIRE(b.step_state().scaler.consecutive_skips == 0);
  }
}

TEST_CASE("fp16 and fp32 training from the same start stay close") {
  TempDir dir;
  const TrainConfig cfg = tiny_run_config(dir / "run", 320);
  Trainer h(cfg, cpu(DType::f16)), f(cfg, cpu(DType::f32));
  const Checkpoint start = f.snapshot();
  const int steps = 8;
  double worst_loss = 0;
  for (int s = 0; s < steps; s++) {
    const StepResult rh = h.step(), rf = f.step();
    REQUIRE(rh.taken);
    worst_loss = std::max(worst_loss, std::abs(rh.loss - rf.loss));
  }
  // The fp16 run's fp32 master weights against the fp32 run's weights: the difference (the
  // L2 norm over all parameters) is a small fraction of how far training moved them. A broken
  // fp16 path (a loss scale not divided out, masters not updated, gradients flushed to zero)
  // gives a difference as large as the move itself.
  const Checkpoint hs = h.snapshot(), fs = f.snapshot();
  double moved = 0, diff = 0;  // sums of squares
  for (const VarPtr& p : f.model().parameters()) {
    const std::vector<double> w0 = start.tensor(p->name).to_doubles();
    const std::vector<double> w32 = fs.tensor(p->name).to_doubles();
    // fp16 weights have an fp32 master; BatchNorm's parameters are fp32 themselves.
    bool has_master = false;
    for (const auto& t : hs.tensors) has_master = has_master || t.first == p->name + ".master";
    const Tensor& m = hs.tensor(has_master ? p->name + ".master" : p->name);
    REQUIRE(m.dtype() == DType::f32);
    const std::vector<double> w16 = m.to_doubles();
    for (size_t i = 0; i < w0.size(); i++) {
      moved += (w32[i] - w0[i]) * (w32[i] - w0[i]);
      diff += (w16[i] - w32[i]) * (w16[i] - w32[i]);
    }
  }
  moved = std::sqrt(moved), diff = std::sqrt(diff);
  INFO("largest loss difference " << worst_loss << ", |w32 - w0| = " << moved
                                  << ", |w16 - w32| = " << diff);
  REQUIRE(moved > 0.1);
  REQUIRE(worst_loss < 0.02);
  REQUIRE(diff < 0.05 * moved);
}

TEST_CASE("gradient accumulation: 4 micro-batches of 8 step like one batch of 32") {
  // Without BatchNorm (which sees each micro-batch alone) the step is the same up to the
  // order of the float sums: each micro-batch's backward is seeded with its share of the batch.
  TempDir dir;
  TrainConfig one = tiny_run_config(dir / "run");
  one.model_text = "conv 8 3x3 pad=1\nrelu\nmaxpool 4x4\nflatten\nlinear classes\n";
  one.accum = 1;
  TrainConfig four = one;
  four.accum = 4;
  Trainer a(one, cpu(DType::f32)), b(four, cpu(DType::f32));
  const Checkpoint start = a.snapshot();
  for (int s = 0; s < 3; s++) {
    const StepResult ra = a.step(), rb = b.step();
    REQUIRE(std::abs(ra.loss - rb.loss) < 1e-5);
    REQUIRE(ra.correct == rb.correct);
  }
  double moved = 0, diff = 0;
  const Checkpoint sa = a.snapshot(), sb = b.snapshot();
  for (const VarPtr& p : a.model().parameters()) {
    const auto w0 = start.tensor(p->name).to_doubles(), wa = sa.tensor(p->name).to_doubles(),
               wb = sb.tensor(p->name).to_doubles();
    for (size_t i = 0; i < w0.size(); i++) {
      moved = std::max(moved, std::abs(wa[i] - w0[i]));
      diff = std::max(diff, std::abs(wa[i] - wb[i]));
    }
  }
  INFO("moved " << moved << ", differ " << diff);
  REQUIRE(moved > 1e-3);
  REQUIRE(diff < 1e-5);
}

TEST_CASE("a run whose every gradient overflows stops with an error naming the step") {
  TempDir dir;
  Trainer t(tiny_run_config(dir / "run", 320, 10), cpu(DType::f16));
  t.after_backward = [](Trainer& tr) {
    tr.model().parameters().back()->grad_buffer().data<half_t>()[0] = half_t(std::nanf(""));
  };
  for (int s = 0; s < 29; s++) REQUIRE(!t.step().taken);
  REQUIRE(t.step_state().scaler.scale == 1);  // halved from 2^16 down to its minimum, 1
  REQUIRE(t.step_state().scaler.consecutive_skips == 29);
  // The 30th overflow in a row ends it.
  REQUIRE_USER_ERROR(t.step(), "step 29: 30 consecutive steps overflowed (inf/NaN gradients, "
                               "first in ");
  // --max-skips sets the limit.
  TrainConfig c3 = tiny_run_config(dir / "run3", 320, 10);
  c3.max_skips = 3;
  Trainer u(c3, cpu(DType::f16));
  u.after_backward = t.after_backward;
  REQUIRE(!u.step().taken);
  REQUIRE(!u.step().taken);
  REQUIRE_ERROR(u.step(), "step 2: 3 consecutive");
}

TEST_CASE("fp32: the first inf/NaN gradient stops the run, naming the step and the parameter") {
  // fp32 has no loss scale to lower, so there is nothing to wait for: no skip, a stop.
  TempDir dir;
  const TrainConfig cfg = tiny_run_config(dir / "run");
  Trainer t(cfg, cpu(DType::f32));
  t.step();
  t.after_backward = [](Trainer& tr) {
    for (const VarPtr& p : tr.model().parameters())
      if (p->name == "conv2.w") p->grad_buffer().data<float>()[3] = std::nanf("");
  };
  REQUIRE_USER_ERROR(t.step(), "step 1: inf/NaN gradient, first in conv2.w (1 step in a row). "
                               "There is no loss scale to lower in fp32");
  REQUIRE_ERROR(t.step(), "an earlier step failed partway");  // the trainer is done
}

TEST_CASE("fp32: weights an update made inf/NaN are named as the cause") {
  // What --lr far too high does: finite gradients, an update to inf. The next step's gradients
  // are NaN, and the message names the weights themselves.
  TempDir dir;
  Trainer t(tiny_run_config(dir / "run"), cpu(DType::f32));
  t.step();
  for (const VarPtr& p : t.model().parameters())
    if (p->name == "conv1.w") p->value.data<float>()[0] = std::numeric_limits<float>::infinity();
  REQUIRE_USER_ERROR(t.step(), "The weights of conv1.w are themselves inf/NaN: an update "
                               "before step 1 made them so");
}

TEST_CASE("launch and results: each step's result once, in order; step() refuses pending steps") {
  TempDir dir;
  Trainer t(tiny_run_config(dir / "run"), cpu(DType::f32));
  Trainer ref(tiny_run_config(dir / "ref"), cpu(DType::f32));
  t.launch();
  t.launch();
  REQUIRE(t.pending() == 2);  // on the CPU the steps are done; their results wait to be taken
  REQUIRE_ERROR(t.step(), "2 launched steps are pending");
  // A snapshot need not wait for the results: it holds the state after the launched steps.
  const Checkpoint early = t.snapshot();
  REQUIRE(early.step == 2);
  std::vector<StepResult> r = t.results();
  REQUIRE(r.size() == 2);
  REQUIRE(t.pending() == 0);
  REQUIRE(t.results(true).empty());
  for (int s = 0; s < 2; s++) {
    REQUIRE(r[size_t(s)].step == s);
    REQUIRE(r[size_t(s)].loss == ref.step().loss);
  }
  const Checkpoint want = ref.snapshot();
  require_same_state(early, want);
  REQUIRE(early.scalars == want.scalars);
  REQUIRE(t.step().step == 2);
}

TEST_CASE("onednn: a fixed-seed CPU run stays within 1e-5 of the reference run's loss curve") {
  // The same run (a small CNN at Fashion-MNIST size, 24 steps of SGD with momentum,
  // augmentation, BatchNorm) on oneDNN and on the reference. They differ by rounding only (fp32
  // sums in other orders), which training carries from step to step. Measured on 2 cores:
  // losses within 2.3e-7 relative, weights within 1.8e-7; the bounds leave a margin of ~50, and
  // a wrong kernel (a dropped bias, gradient or tap) moves the losses by more than 1e-2 within
  // a few steps. lr 0.01: at 0.05 this tiny model's first steps spike (loss 2.6 -> 3.9), and
  // any two summation orders then drift apart to ~1e-2 (measured: the reference against
  // oneDNN, step by step, agree to 1e-7 until the spike).
  TempDir dir;
  TrainConfig cfg = tiny_run_config(dir / "fast", 384, 2);  // 12 steps per epoch, 24 steps
  cfg.model = "small", cfg.model_text = kSmallModel, cfg.lr = 0.01;
  TrainConfig ref = cfg;
  ref.out = dir / "ref";
  cfg.conv = cfg.linear = "onednn";
  ref.conv = ref.linear = "direct";
  Trainer fast(cfg, cpu(DType::f32)), plain(ref, cpu(DType::f32));
  double worst = 0;
  std::vector<double> losses;
  for (int s = 0; s < fast.total_steps(); s++) {
    const StepResult a = fast.step(), b = plain.step();
    worst = std::max(worst, std::abs(a.loss - b.loss) / std::abs(b.loss));
    losses.push_back(b.loss);
  }
  double diff = 0, norm = 0;  // sums of squares over every parameter
  for (const VarPtr& p : plain.model().parameters()) {
    const std::vector<double> w = p->value.to_doubles();
    const std::vector<double> f = fast.snapshot().tensor(p->name).to_doubles();
    for (size_t i = 0; i < w.size(); i++) diff += (f[i] - w[i]) * (f[i] - w[i]), norm += w[i] * w[i];
  }
  const double off = std::sqrt(diff / norm);
  INFO("losses within " << worst << " relative; weights within " << off);
  MESSAGE("onednn against the reference over " << losses.size() << " steps: losses within "
          << worst << " relative, weights " << off);
  REQUIRE(losses.front() - losses.back() > 0.3);  // it trained: the comparison means something
  REQUIRE(worst < 1e-5);
  REQUIRE(off < 1e-5);
}

TEST_CASE("--ema: the averages of the weights and of BatchNorm's statistics, by definition") {
  // e_0 = the start; at step t, d = min(decay, (1+t)/(10+t)), e_t = d e_{t-1} + (1-d) w_t, with
  // w_t the weights (the running variance) after step t: computed here in double from each
  // step's snapshot, against the trainer's fp32 averages.
  TempDir dir;
  TrainConfig cfg = tiny_run_config(dir / "run", 160, 1);
  cfg.accum = 1, cfg.conv = cfg.linear = "direct", cfg.ema = 0.8;
  Trainer t(cfg, cpu(DType::f32));
  const Checkpoint c0 = t.snapshot();
  REQUIRE(c0.tensor("conv1.w.ema").to_floats() == c0.tensor("conv1.w").to_floats());
  auto doubles_of = [](const Checkpoint& c, const char* name) {
    const std::vector<float> f = c.tensor(name).to_floats();
    return std::vector<double>(f.begin(), f.end());
  };
  std::vector<double> ew = doubles_of(c0, "conv1.w"), ev = doubles_of(c0, "bn2.running_var");
  for (int64_t s = 1; s <= 5; s++) {
    REQUIRE(t.step().taken);
    const Checkpoint c = t.snapshot();
    const double d = std::min(0.8, (1.0 + double(s)) / (10.0 + double(s)));
    const std::vector<double> w = doubles_of(c, "conv1.w"), v = doubles_of(c, "bn2.running_var");
    for (size_t i = 0; i < ew.size(); i++) ew[i] = d * ew[i] + (1 - d) * w[i];
    for (size_t i = 0; i < ev.size(); i++) ev[i] = d * ev[i] + (1 - d) * v[i];
    const std::vector<double> gw = doubles_of(c, "conv1.w.ema");
    const std::vector<double> gv = doubles_of(c, "bn2.running_var.ema");
    for (size_t i = 0; i < ew.size(); i++) REQUIRE(std::fabs(gw[i] - ew[i]) < 1e-6);
    for (size_t i = 0; i < ev.size(); i++) REQUIRE(std::fabs(gv[i] - ev[i]) < 1e-6 * ev[i] + 1e-7);
    if (s == 5) REQUIRE(gw != w);  // the average is not the weights
  }
  // Evaluated by the trainer (its averaged model) as a model loaded from the checkpoint's
  // averages is: the same metrics; and the weights' own evaluation differs.
  const Checkpoint c = t.snapshot();
  const EvalResult mine = t.evaluate(true);
  EvalOptions o;
  o.batch = 256, o.threads = 1, o.norm = {cfg.mean, cfg.std};
  const auto model = load_model(c, cfg, DType::f32, Context::cpu(), WeightChoice::ema);
  const std::shared_ptr<const SampleSource> val(t.val_data(), [](const SampleSource*) {});
  const EvalResult loaded = evaluate(*model, val, o);
  REQUIRE(mine.top1 == loaded.top1);
  REQUIRE(mine.loss == loaded.loss);
  REQUIRE(t.evaluate(false).loss != mine.loss);
}

TEST_CASE("load_model: --weights auto takes the average when there is one; raw and ema choose") {
  TempDir dir;
  TrainConfig cfg = tiny_run_config(dir / "run", 64, 1);
  cfg.accum = 1, cfg.ema = 0.5;
  Trainer t(cfg, cpu(DType::f32));
  t.step();
  const Checkpoint c = t.snapshot();
  REQUIRE(has_average(c));
  auto conv1 = [&](WeightChoice w) {
    auto m = load_model(c, cfg, DType::f32, Context::cpu(), w);
    return m->parameters()[0]->value.to_floats();
  };
  REQUIRE(conv1(WeightChoice::automatic) == c.tensor("conv1.w.ema").to_floats());
  REQUIRE(conv1(WeightChoice::ema) == c.tensor("conv1.w.ema").to_floats());
  REQUIRE(conv1(WeightChoice::raw) == c.tensor("conv1.w").to_floats());
  REQUIRE(std::string(weights_loaded(c, WeightChoice::automatic)) == "the weights' moving average");
  // A checkpoint without an average (a run without --ema, or one from before it) still loads.
  TrainConfig plain = tiny_run_config(dir / "plain", 64, 1);
  Trainer p(plain, cpu(DType::f32));
  const Checkpoint pc = p.snapshot();
  REQUIRE(!has_average(pc));
  auto m = load_model(pc, plain, DType::f32, Context::cpu(), WeightChoice::automatic);
  REQUIRE(m->parameters()[0]->value.to_floats() == pc.tensor("conv1.w").to_floats());
  REQUIRE(std::string(weights_loaded(pc, WeightChoice::automatic)) == "the weights");
  REQUIRE_ERROR(load_model(pc, plain, DType::f32, Context::cpu(), WeightChoice::ema),
                "holds no moving average");
  REQUIRE_ERROR(parse_weight_choice("best"), "expected auto");
}
