// The trainer on a GPU against the trainer on the CPU, on real Fashion-MNIST images: the same
// losses within the kernels' tolerance, exact resume on the GPU itself, an injected inf
// skipping the step on the device, a checkpoint taken without waiting (and refused past the
// overflow abort), many steps in flight without losing one, --cuda-graph against the
// launched run bit for bit, and --balance. They skip when no GPU is usable (REQUIRE_GPU).
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>

#include "data/image_list.h"
#include "kernels/gpu.h"
#include "tests/kernels/gpu_compare.h"
#include "tests/test_util.h"
#include "tests/train/train_fixture.h"
#include "train/checkpoint/checkpoint.h"
#include "train/engine/trainer.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {

RunDevice on(Device device, DType dtype) {
  RunDevice d;
  d.device = device;
  d.dtype = dtype;
  return d;
}

// tiny_run_config's run (batches of 32); on the simulator, where the kernels are the host's,
// the same steps of a quarter of the images each (batches of 8, the same short last batch).
TrainConfig gpu_run_config(const std::string& out, int images = 160, int epochs = 3) {
  TrainConfig c = tiny_run_config(out, sim_or(images, images / 4), epochs);
  c.batch = sim_or(32, 8);
  return c;
}

}  // namespace

TEST_CASE("trainer [gpu]: fp32 steps on the GPU follow the CPU's losses and accuracy") {
  REQUIRE_GPU();
  TempDir dir;
  TrainConfig cfg = gpu_run_config(dir / "run", 320, 1);  // 10 steps
  cfg.conv = "direct", cfg.linear = "direct";
  Trainer cpu(cfg, on(Device::cpu, DType::f32)), gpu(cfg, on(Device::cuda, DType::f32));
  // The same start: the model is initialised on the CPU and copied.
  require_same_state(cpu.snapshot(), gpu.snapshot());
  for (int s = 0; s < 6; s++) {
    INFO("step " << s);
    const StepResult a = cpu.step(), b = gpu.step();
    REQUIRE(b.step == a.step);
    REQUIRE(b.images == a.images);
    REQUIRE(b.taken);
    REQUIRE(b.loss_scale == 1);
    // fp32 everywhere; only the order of the sums differs (conv, BN and loss reductions), so
    // after a few steps of SGD the losses agree to ~1e-5 relative. 1e-3 leaves room for the
    // weights' drift while still catching a wrong gradient (which changes the loss by 1e-2).
    REQUIRE(std::abs(b.loss - a.loss) <= 1e-3 * std::abs(a.loss));
    // A near-tie between two logits may flip: at most one image of the batch.
    REQUIRE(std::abs(b.correct - a.correct) <= 1);
  }
  REQUIRE(gpu.step_state().steps_taken == 6);
}

TEST_CASE("trainer [gpu]: --ema's averages on the GPU follow the CPU's; so does their evaluation") {
  REQUIRE_GPU();
  TempDir dir;
  TrainConfig cfg = gpu_run_config(dir / "run", 320, 1);  // 10 steps
  cfg.conv = "direct", cfg.linear = "direct", cfg.ema = 0.9;
  Trainer cpu(cfg, on(Device::cpu, DType::f32)), gpu(cfg, on(Device::cuda, DType::f32));
  require_same_state(cpu.snapshot(), gpu.snapshot());  // the averages start as the weights
  for (int s = 0; s < 6; s++) REQUIRE(cpu.step().taken == gpu.step().taken);
  const Checkpoint a = cpu.snapshot(), b = gpu.snapshot();
  // the weights differ by the order of the sums (as the losses above); their averages as much
  for (const char* name : {"conv1.w.ema", "linear1.w.ema", "bn2.running_var.ema"}) {
    INFO(name);
    const std::vector<float> x = a.tensor(name).to_floats(), y = b.tensor(name).to_floats();
    REQUIRE(x.size() == y.size());
    for (size_t i = 0; i < x.size(); i++)
      REQUIRE(std::fabs(x[i] - y[i]) <= 1e-3f * (1 + std::fabs(x[i])));
    const std::string averaged = std::string(name).substr(0, std::string(name).size() - 4);
    REQUIRE(x != a.tensor(averaged).to_floats());  // an average, not the weights
  }
  const EvalResult ea = cpu.evaluate(true), eb = gpu.evaluate(true);
  REQUIRE(eb.images == ea.images);
  REQUIRE(std::fabs(eb.loss - ea.loss) <= 1e-3 * std::fabs(ea.loss));
  REQUIRE(std::llabs(eb.top1 - ea.top1) <= 2);
}

TEST_CASE("trainer [gpu]: fp16 with dynamic loss scaling trains, and stays near fp32") {
  REQUIRE_GPU();
  TempDir dir;
  // Batches of 32 on the simulator too: the bound below is the CPU's at that batch (fp16 and
  // fp32 drift apart faster on smaller batches).
  const TrainConfig cfg = tiny_run_config(dir / "run", 320, 1);
  Trainer h(cfg, on(Device::cuda, DType::f16)), f(cfg, on(Device::cuda, DType::f32));
  double worst = 0;
  for (int s = 0; s < 8; s++) {
    const StepResult rh = h.step(), rf = f.step();
    REQUIRE(rh.taken);
    REQUIRE(rh.loss_scale == 65536);  // 2^16: no overflow in 8 steps, no growth before 2000
    REQUIRE(std::isfinite(rh.loss));
    worst = std::max(worst, std::abs(rh.loss - rf.loss));
  }
  INFO("largest loss difference fp16 - fp32: " << worst);
  REQUIRE(worst < 0.02);  // the CPU's fp16-vs-fp32 bound (tests/train/engine/trainer_test.cpp)
  REQUIRE(h.step_state().scaler.scale == 65536);
}

TEST_CASE("trainer [gpu]: resume on the GPU gives the unbroken run's losses bit for bit") {
  REQUIRE_GPU();
  for (const DType dtype : {DType::f32, DType::f16}) {
    INFO(dtype_name(dtype));
    TempDir dir;
    TrainConfig cfg = gpu_run_config(dir / "run", 160, 3);  // 15 steps
    cfg.optimizer = dtype == DType::f16 ? "adamw" : "sgd";
    cfg.lr = dtype == DType::f16 ? 3e-3 : 0.05;
    cfg.ema = dtype == DType::f16 ? 0.95 : 0;  // fp16: the averages resume too (in the snapshot)
    const int k = 7, N = 15;
    Trainer a(cfg, on(Device::cuda, dtype));
    std::vector<double> losses;
    for (int s = 0; s < N; s++) {
      if (s == k) write_checkpoint(a.snapshot(), dir / "k.h5");
      losses.push_back(a.step().loss);
    }
    const Checkpoint ck = read_checkpoint(dir / "k.h5");
    Trainer b(config_from_json_text(ck.config_json, "k.h5"), on(Device::cuda, dtype));
    b.restore(ck);
    for (int s = k; s < N; s++) {
      INFO("step " << s);
      REQUIRE(b.step().loss == losses[size_t(s)]);  // every kernel is deterministic
    }
    require_same_state(a.snapshot(), b.snapshot());
    REQUIRE(losses.front() != losses.back());
  }
}

TEST_CASE("trainer [gpu]: a checkpoint taken with steps in flight holds the state after the "
          "last launched one, and training goes on while it completes") {
  REQUIRE_GPU();
  for (const int replicas : {1, 2}) {
    INFO(replicas << " replica(s)");
    TempDir dir;
    TrainConfig cfg = gpu_run_config(dir / "run", 320, 1);  // 10 steps, fp16, AdamW
    cfg.optimizer = "adamw", cfg.lr = 3e-3;
    if (replicas == 2) cfg.devices = "0,0";
    const int k = 5, N = 10;
    // a: k steps launched and not collected, then the snapshot, then more steps queued behind
    // it before it completes. b: the same steps one at a time, the snapshot after step k.
    Trainer a(cfg, on(Device::cuda, DType::f16)), b(cfg, on(Device::cuda, DType::f16));
    for (int s = 0; s < k; s++) a.launch();
    // Replica 0's stream held behind the steps until the test lets it go: a snapshot that
    // waited for the steps would wait for the gate, which then opens only after 30 s and
    // says so (an ordering check, not a clock).
    std::optional<StreamGate> gate;
    {
      const auto on = a.on_replica(0);
      gate.emplace(a.engine().replica(0).lane->stream());
    }
    Checkpoint c = a.snapshot_async({{"best_top1", 0.25}});
    gate->release();
    REQUIRE(!gate->timed_out());  // it returned while the stream was held: it did not wait
    REQUIRE(a.pending() == size_t(k));
    REQUIRE(c.pending);
    REQUIRE(c.step == k);
    for (int s = k; s < N; s++) a.launch();
    c.complete();  // the steps after k were queued in the meantime: they must not show
    REQUIRE(!c.pending);
    std::vector<double> la, lb;
    for (const StepResult& r : a.results(true)) la.push_back(r.loss);
    int taken = 0;  // fp16: a first step may overflow at the initial loss scale and be skipped
    for (int s = 0; s < k; s++) {
      const StepResult r = b.step();
      lb.push_back(r.loss);
      taken += r.taken ? 1 : 0;
    }
    const Checkpoint d = b.snapshot({{"best_top1", 0.25}});
    require_same_state(c, d);
    REQUIRE(c.scalars == d.scalars);  // the device's scaler state and step count, after step k
    REQUIRE(c.scalars.at("optimizer_steps_taken") == taken);
    REQUIRE(taken > 0);
    for (int s = k; s < N; s++) lb.push_back(b.step().loss);
    REQUIRE(la == lb);  // and the run went on unchanged
    // What it saved resumes like the unbroken run.
    Trainer r(cfg, on(Device::cuda, DType::f16));
    r.restore(c);
    for (int s = k; s < N; s++) REQUIRE(r.step().loss == la[size_t(s)]);
  }
}

TEST_CASE("trainer [gpu]: an inf in one gradient skips the step on the device") {
  REQUIRE_GPU();
  TempDir dir;
  const TrainConfig cfg = gpu_run_config(dir / "run");
  Trainer t(cfg, on(Device::cuda, DType::f16));
  for (int s = 0; s < 3; s++) REQUIRE(t.step().taken);
  t.after_backward = [](Trainer& tr) {
    for (const VarPtr& p : tr.model().parameters())
      if (p->name == "conv2.w") {
        const half_t inf(std::numeric_limits<float>::infinity());
        Tensor& g = p->grad_buffer();  // on the device: write one element through a copy
        Tensor h = g.to(Context::cpu());
        h.data<half_t>()[5] = inf;
        g.copy_from(h);
      }
  };
  auto weights = [&] {
    std::vector<std::vector<double>> w;
    for (const auto& [name, tensor] : t.snapshot().tensors)
      if (name.find("running_") == std::string::npos) w.push_back(tensor.to_doubles());
    return w;
  };
  const auto before = weights();
  const StepResult r = t.step();
  REQUIRE(!r.taken);
  REQUIRE(r.overflow == "conv2.w");
  REQUIRE(r.loss_scale == 65536);
  REQUIRE(t.step_state().scaler.scale == 32768);
  REQUIRE(t.step_state().steps_taken == 3);
  REQUIRE(weights() == before);  // masters, fp16 copies and momenta: nothing moved
  t.after_backward = nullptr;
  REQUIRE(t.step().taken);
  REQUIRE(t.step_state().steps_taken == 4);
}

TEST_CASE("trainer [gpu]: a checkpoint taken after the steps that end the run is not written, "
          "even when a clean step came after them") {
  REQUIRE_GPU();
  TempDir dir;
  TrainConfig cfg = gpu_run_config(dir / "run", 320, 1);
  cfg.max_skips = 3;
  Trainer t(cfg, on(Device::cuda, DType::f16));
  REQUIRE(t.step().taken);
  t.after_backward = [](Trainer& tr) {
    Tensor& g = tr.model().parameters().back()->grad_buffer();
    Tensor h = g.to(Context::cpu());
    h.data<half_t>()[0] = half_t(std::nanf(""));
    g.copy_from(h);
  };
  for (int s = 0; s < 3; s++) t.launch();  // steps 1-3 overflow: the run stops at step 3
  t.after_backward = nullptr;
  t.launch();  // step 4 is clean: the device's counter of skips in a row is 0 again
  Checkpoint c = t.snapshot_async();  // none of these steps has been seen by the host
  REQUIRE(c.pending);
  REQUIRE_ERROR(c.complete(), "3 steps in a row overflowed before it");
  REQUIRE_ERROR(t.results(true), "step 3: 3 consecutive");
}

TEST_CASE("trainer [gpu]: fp32 stops at the first inf/NaN gradient, as on the CPU") {
  REQUIRE_GPU();
  TempDir dir;
  Trainer t(gpu_run_config(dir / "run"), on(Device::cuda, DType::f32));
  REQUIRE(t.step().taken);
  t.after_backward = [](Trainer& tr) {
    for (const VarPtr& p : tr.model().parameters())
      if (p->name == "conv2.w") {
        Tensor& g = p->grad_buffer();  // on the device: write one element through a copy
        Tensor h = g.to(Context::cpu());
        h.data<float>()[3] = std::nanf("");
        g.copy_from(h);
      }
  };
  REQUIRE_USER_ERROR(t.step(), "step 1: inf/NaN gradient, first in conv2.w (1 step in a row). "
                               "There is no loss scale to lower in fp32");
}

TEST_CASE("trainer [gpu]: each step's compute, wait and idle on the compute stream's events") {
  REQUIRE_GPU();
  TempDir dir;
  Trainer t(gpu_run_config(dir / "run", 320, 1), on(Device::cuda, DType::f16));
  require_device_clock(t, false);
}

TEST_CASE("trainer [gpu]: the tiny model at batch 8 keeps pace with its launches: host-bound") {
  REQUIRE_GPU();
  if (kSimulated)  // a simulated kernel takes the host's time, a thousand times a GPU's
    return skip("a GPU's speed against the host's launches: timing is not simulated");
  TempDir dir;
  // Microsecond kernels: the GPU waits for each launch inside the step, so its compute takes
  // hardly longer than the host's launches (data/metrics.h, kLaunchBoundPct).
  TrainConfig c = gpu_run_config(dir / "run", 320, 1);
  c.batch = 8, c.accum = 1;
  Trainer t(c, on(Device::cuda, DType::f16));
  DeviceTime sum;
  for (int s = 0; s < 30; s++) {
    t.launch();
    for (const StepResult& r : t.results())
      if (r.step >= 5) sum += r.device;  // after the first steps' set-up
  }
  for (const StepResult& r : t.results(true))
    if (r.step >= 5) sum += r.device;
  INFO("launch " << sum.launch_s << " s, compute " << sum.compute_s << " s, idle " << sum.idle_s
                 << " s, wait " << sum.wait_s << " s");
  REQUIRE(sum.launch_s > 0);
  REQUIRE(run_bound(sum) == Bound::host);
}

TEST_CASE("trainer [gpu]: many steps in flight come back in order, each once") {
  REQUIRE_GPU();
  TempDir dir;
  // 40 steps: the record slots wrap around twice. (How far the host runs ahead is bounded by
  // the loader's ring of 4 batches here, below kMaxInFlight.)
  const TrainConfig cfg = gpu_run_config(dir / "run", 1280, 1);
  Trainer t(cfg, on(Device::cuda, DType::f16)), ref(cfg, on(Device::cuda, DType::f16));
  std::vector<StepResult> got;
  for (int s = 0; s < 40; s++) {
    t.launch();
    for (const StepResult& r : t.results()) got.push_back(r);
    REQUIRE(t.pending() <= size_t(Trainer::kMaxInFlight));  // in flight, after taking the arrived
  }
  for (const StepResult& r : t.results(true)) got.push_back(r);
  REQUIRE(t.pending() == 0);
  REQUIRE(got.size() == 40);
  for (int s = 0; s < 40; s++) {
    INFO("step " << s);
    REQUIRE(got[size_t(s)].step == s);
    // One step at a time gives the same bits: running ahead changes nothing.
    REQUIRE(ref.step().loss == got[size_t(s)].loss);
  }
}

// --cuda-graph: the steps replayed from the graph against the same run launched kernel by
// kernel. The graph runs the very same kernels on the very same data, so everything is equal
// bit for bit; what could go wrong is a frozen address or argument (a batch not copied in, a
// loss scale baked in, a temporary reused by someone else), and any of those changes the bits.
TEST_CASE("trainer [gpu]: --cuda-graph gives the launched run's losses, scales and weights bit "
          "for bit; a short batch runs without it") {
  REQUIRE_GPU();
  for (const DType dtype : {DType::f16, DType::f32}) {
    INFO(dtype_name(dtype));
    TempDir dir;
    TrainConfig cfg = gpu_run_config(dir / "run", 160, 2);  // 5 steps an epoch, 10 in all
    cfg.optimizer = dtype == DType::f16 ? "adamw" : "sgd";
    cfg.lr = dtype == DType::f16 ? 3e-3 : 0.05;
    // One corrupt file among the images: the batch that draws it has one image less (a shape
    // the graph was not captured for) in each epoch.
    const int n = cfg.limit_train;  // 160 (40 on the simulator)
    ImageList list = read_image_list(cfg.train);
    list.samples.resize(size_t(n));
    const std::string bad = dir / "bad.jpg";
    std::ofstream(bad) << "not a JPEG";
    list.samples[size_t(n / 2 - 3)].path = bad;
    cfg.train = dir / "list.txt";
    write_image_list(list, cfg.train);
    TrainConfig with = cfg;
    with.cuda_graph = true;
    Trainer a(cfg, on(Device::cuda, dtype)), b(with, on(Device::cuda, dtype));
    std::vector<std::string> notices;
    b.notice = [&](const std::string& line) { notices.push_back(line); };
    int replayed = 0, short_batches = 0;
    for (int s = 0; s < 10; s++) {
      INFO("step " << s);
      const StepResult x = a.step(), y = b.step();
      REQUIRE(!x.graph);
      REQUIRE(y.images == x.images);
      REQUIRE(y.loss == x.loss);
      REQUIRE(y.correct == x.correct);
      REQUIRE(y.loss_scale == x.loss_scale);
      REQUIRE(y.taken == x.taken);
      if (x.images < cfg.batch) short_batches++;
      // Replayed: every full batch from the third full one on (two launched to warm up).
      REQUIRE(y.graph == (x.images == cfg.batch && s >= 2 + short_batches));
      replayed += y.graph;
    }
    REQUIRE(short_batches == 2);
    REQUIRE(replayed == 6);  // 8 full batches, 2 of them to warm up
    require_same_state(a.snapshot(), b.snapshot());
    REQUIRE(a.evaluate().loss == b.evaluate().loss);
    INFO(notices.size());
    REQUIRE(notices.size() == 1);
    REQUIRE(notices[0].find("captured at step") != std::string::npos);
  }
}

TEST_CASE("trainer [gpu]: --cuda-graph: an inf skips the replayed step, and a resumed run "
          "captures again and continues the unbroken run") {
  REQUIRE_GPU();
  TempDir dir;
  TrainConfig cfg = gpu_run_config(dir / "run", 320, 2);  // 10 steps an epoch
  cfg.cuda_graph = true;
  Trainer t(cfg, on(Device::cuda, DType::f16));
  for (int s = 0; s < 4; s++) REQUIRE(t.step().taken);
  // An inf after the first graph's replay, before the checks (in the second graph).
  t.after_backward = [](Trainer& tr) {
    for (const VarPtr& p : tr.model().parameters())
      if (p->name == "conv1.w") {
        Tensor& g = p->grad_buffer();
        Tensor h = g.to(Context::cpu());
        h.data<half_t>()[0] = half_t(std::numeric_limits<float>::infinity());
        g.copy_from(h);
      }
  };
  const StepResult r = t.step();
  REQUIRE(r.graph);
  REQUIRE(!r.taken);
  REQUIRE(r.overflow == "conv1.w");
  REQUIRE(t.step_state().scaler.scale == 32768);
  t.after_backward = nullptr;
  // The replays read the halved scale from the device.
  std::vector<double> losses;
  Checkpoint k = t.snapshot();
  for (int s = 0; s < 6; s++) {
    const StepResult x = t.step();
    REQUIRE(x.graph);
    REQUIRE(x.taken);
    REQUIRE(x.loss_scale == 32768);
    losses.push_back(x.loss);
  }
  // Resumed into a new trainer: two launched steps, then a new capture, the same losses.
  Trainer u(cfg, on(Device::cuda, DType::f16));
  u.restore(k);
  for (int s = 0; s < 6; s++) {
    INFO("step " << s);
    const StepResult x = u.step();
    REQUIRE(x.graph == (s >= 2));
    REQUIRE(x.loss == losses[size_t(s)]);
  }
  require_same_state(t.snapshot(), u.snapshot());
}

// --balance on the GPU: the weights of `loss` live on the device, uploaded once, and a CUDA
// graph reads them by address; `sampler` only changes which samples the loader copies. On an
// imbalanced list (classes 0-4 kept whole, classes 5-9 cut to 4 images each): the CPU's
// losses in fp32 within the kernels' tolerance, and --cuda-graph against the launched run bit
// for bit in fp16.
TEST_CASE("trainer [gpu]: --balance loss and sampler follow the CPU, and replay from the CUDA "
          "graph bit for bit") {
  REQUIRE_GPU();
  for (const char* mode : {"loss", "sampler"}) {
    INFO(mode);
    TempDir dir;
    TrainConfig cfg = gpu_run_config(dir / "run", 160, 2);  // 5 steps an epoch, 10 in all
    cfg.conv = "direct", cfg.linear = "direct", cfg.balance = mode;
    const ImageList all = read_image_list(cfg.train);
    ImageList list = all;
    list.samples.clear();
    std::vector<int> taken(10, 0);
    for (const Sample& s : all.samples) {
      if (list.samples.size() == size_t(cfg.limit_train)) break;
      if (s.label >= 5 && taken[size_t(s.label)] == 4) continue;
      list.samples.push_back(s);
      taken[size_t(s.label)]++;
    }
    cfg.train = dir / "list.txt", cfg.limit_train = 0;
    write_image_list(list, cfg.train);
    Trainer cpu(cfg, on(Device::cpu, DType::f32)), gpu(cfg, on(Device::cuda, DType::f32));
    for (int s = 0; s < 6; s++) {
      INFO("step " << s);
      const StepResult a = cpu.step(), b = gpu.step();
      REQUIRE(b.images == a.images);
      REQUIRE(std::abs(b.loss - a.loss) <= 1e-3 * std::abs(a.loss));
    }
    cfg.optimizer = "adamw", cfg.lr = 3e-3;
    TrainConfig with = cfg;
    with.cuda_graph = true;
    Trainer x(cfg, on(Device::cuda, DType::f16)), y(with, on(Device::cuda, DType::f16));
    int replayed = 0;
    for (int s = 0; s < 10; s++) {
      INFO("step " << s);
      const StepResult p = x.step(), q = y.step();
      REQUIRE(q.loss == p.loss);
      REQUIRE(q.correct == p.correct);
      REQUIRE(q.loss_scale == p.loss_scale);
      replayed += q.graph;
    }
    REQUIRE(replayed == 8);  // every step after the two that warm up
    require_same_state(x.snapshot(), y.snapshot());
  }
}
