// Data-parallel replicas on GPUs, all on GPU 0 (--devices 0,0 and 0,0,0,0): the CPU replica
// tests (replicas_test.cpp) again on GPU replicas. R = 2 and 4 against one GPU replica with the
// same global batch (gradients within 1e-6, every replica equal bit for bit after every step),
// GPU replicas against CPU replicas, each sample exactly once per epoch, an inf on one replica
// skipping the step on all, resume from GPU replicas onto GPU and CPU replicas, and the
// all-reduce's event timing. Replica r's tensors are read and written under on_replica(r)
// (replica_fixture.h), so the copies come after the work queued for it. They skip when no GPU
// is usable (REQUIRE_GPU).
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>

#include "nn/model_spec.h"
#include "tests/test_util.h"
#include "tests/train/replica_fixture.h"
#include "train/engine/trainer.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {

RunDevice gpu(DType dtype = DType::f32) { return run_on(Device::cuda, dtype); }
RunDevice cpu(DType dtype = DType::f32) { return run_on(Device::cpu, dtype); }

// R replicas on GPU 0 (R = 1: the plain single-GPU run). fp32 with the direct kernels: the
// same kernels on every replica whatever the shard size, each a fixed-order fp32 sum, so the
// runs repeat bit for bit and differ from one replica only by where the batch is split.
TrainConfig gpu_config(const std::string& out, int replicas, const char* model = kNoBnModel) {
  TrainConfig c = replica_config(out, replicas, model, "0");
  c.conv = "direct", c.linear = "direct";
  return c;
}

// GPU kernels (conv, linear, loss) sum in other orders than the CPU's, so GPU and CPU runs of
// the same configuration differ by fp32 rounding only. How much that moves this run, measured
// on the CPU as fp32 against fp64 on kNoBnModel (R = 1, 2, 4, 14 steps): losses by at most
// 1.3e-7 relative, weights by 1.6e-7 (L2, relative). Two fp32 runs summing in different orders
// differ by about as much, so 1e-5 leaves a margin of ~50x while a wrong gradient or a
// mis-scaled average (which moves the loss by 1e-2 within a few steps) is still caught.
constexpr double kGpuVsCpu = 1e-5;

}  // namespace

TEST_CASE("replicas [gpu]: R = 2 and 4 GPU replicas step like one GPU replica with the same global batch") {
  REQUIRE_GPU();
  TempDir dir;
  require_replicas_step_like_one(
      dir.str(), [](const std::string& out, int R) { return gpu_config(out, R); }, gpu(), {2, 4});
}

TEST_CASE("replicas [gpu]: --sync-bn, R GPU replicas with B/R images each equal one GPU replica "
          "with B, running statistics included") {
  // fp32 with the direct kernels: the CPU test's comparison (replicas_test.cpp), through the
  // GPU kernels' sync path (BatchNormSync) and the peer ring's sums, the replicas' forward and
  // backward on threads of their own.
  REQUIRE_GPU();
  TempDir dir;
  require_sync_bn_like_one(
      dir.str(),
      [](const std::string& out, int R, bool sync_bn) {
        TrainConfig c = gpu_config(out, R, kTinyModel);
        c.sync_bn = sync_bn;
        return c;
      },
      gpu(), {2, 3}, kGpuVsCpu);
}

TEST_CASE("replicas [gpu]: GPU replicas follow CPU replicas (fp32, direct kernels)") {
  REQUIRE_GPU();
  TempDir dir;
  const int steps = 10;
  for (int R : {2, 4}) {
    INFO(R << " replicas");
    const std::string name = std::to_string(R);
    Trainer c(replica_config(dir / ("cpu" + name), R), cpu());
    Trainer g(gpu_config(dir / ("gpu" + name), R), gpu());
    REQUIRE(g.replicas() == R);
    // The same start: every model is initialised on the CPU from the seed (and copied).
    const std::vector<double> w0 = weights(c);
    for (int r = 0; r < R; r++) REQUIRE(weights(g, r) == w0);
    double worst = 0;
    for (int s = 0; s < steps; s++) {
      INFO("step " << s);
      const StepResult a = c.step(), b = g.step();
      REQUIRE(b.step == a.step);
      REQUIRE(b.batch == a.batch);
      REQUIRE(b.images == a.images);
      REQUIRE(b.taken);
      REQUIRE(b.lr == a.lr);
      worst = std::max(worst, std::abs(b.loss - a.loss) / std::abs(a.loss));
      REQUIRE(std::abs(b.correct - a.correct) <= 1);  // a near-tie of two logits may flip
      REQUIRE(c.replicas_difference() == "");
      REQUIRE(g.replicas_difference() == "");
    }
    const double moved = relative(weights(c), w0), off = relative(weights(g), weights(c));
    INFO("losses within " << worst << " (relative), weights moved " << moved << ", differ "
                          << off);
    REQUIRE(worst < kGpuVsCpu);
    REQUIRE(moved > 0.05);
    REQUIRE(off < kGpuVsCpu);
  }
}

TEST_CASE("replicas [gpu]: every sample exactly once per epoch across GPU replicas, in the order of one") {
  REQUIRE_GPU();
  TempDir dir;
  require_each_sample_once(
      dir.str(), [](const std::string& out, int R) { return gpu_config(out, R); }, gpu(), {2, 4});
}

TEST_CASE("replicas [gpu]: an inf on one GPU replica skips the step on all of them") {
  REQUIRE_GPU();
  TempDir dir;
  const int R = 3, k = 3;
  // fp16 on the tensor cores (the GPU default), with BatchNorm: a real mixed-precision run.
  const TrainConfig cfg = replica_config(dir / "r3", R, kTinyModel, "0");
  REQUIRE(cfg.devices == "0,0,0");
  // Run A is clean: step k overflows nowhere by itself (fp16 runs overflow now and then while
  // the scaler searches its scale), so what run B sees comes from the injection alone.
  Trainer a(cfg, gpu(DType::f16)), t(cfg, gpu(DType::f16));
  for (int s = 0; s < k; s++) a.step(), t.step();
  REQUIRE(a.step().taken);
  // After the all-reduce (queued, and every replica's compute stream waiting for it), written
  // on replica 1's stream: only replica 1 holds the inf, so the check must be combined.
  t.after_backward = [](Trainer& tr) {
    set_gradient(tr, 1, "conv2.w", 3, std::numeric_limits<float>::infinity());
  };
  // Replica 0's whole state as a checkpoint holds it (fp32 masters, fp16 copies, momenta),
  // BatchNorm's running statistics left out (they move in forward, skipped or not).
  auto state = [&] {
    std::vector<std::vector<double>> s;
    for (const auto& [name, tensor] : t.snapshot().tensors)
      if (name.find("running_") == std::string::npos) s.push_back(tensor.to_doubles());
    return s;
  };
  const std::vector<double> before = weights(t, 0);
  const auto state_before = state();
  const double scale = t.step_state().scaler.scale;
  const int64_t taken = t.step_state(0).steps_taken;
  REQUIRE(taken == a.step_state(0).steps_taken - 1);  // t's k steps were a's (any overflow too)
  const StepResult r = t.step();
  REQUIRE(!r.taken);
  REQUIRE(r.overflow == "replica 1: conv2.w");
  REQUIRE(r.loss_scale == scale);
  REQUIRE(r.scale_after == scale / 2);
  REQUIRE(t.step_state().scaler.scale == scale / 2);
  for (int i = 0; i < R; i++) {
    INFO("replica " << i);
    REQUIRE(weights(t, i) == before);  // bit for bit, on every replica
    REQUIRE(t.step_state(i).steps_taken == taken);
  }
  REQUIRE(state() == state_before);
  REQUIRE(t.replicas_difference() == "");
  t.after_backward = nullptr;
  const StepResult next = t.step();
  REQUIRE(next.taken);
  REQUIRE(next.loss_scale == scale / 2);
  REQUIRE(weights(t, 0) != before);
  for (int i = 0; i < R; i++) REQUIRE(t.step_state(i).steps_taken == taken + 1);
  REQUIRE(t.replicas_difference() == "");
}

TEST_CASE("replicas [gpu]: a checkpoint of GPU replicas resumes exactly on as many, closely on one GPU or on CPU replicas") {
  REQUIRE_GPU();
  TempDir dir;
  const int k = 7, N = 14;
  Trainer a(gpu_config(dir / "a", 2), gpu());
  std::vector<double> losses;
  Checkpoint ck;
  for (int s = 0; s < N; s++) {
    if (s == k) ck = a.snapshot();
    losses.push_back(a.step().loss);
  }
  REQUIRE(ck.step == k);
  REQUIRE(losses.front() != losses.back());
  const std::vector<double> want_w = weights(a);

  {
    INFO("resumed on 2 GPU replicas");
    Trainer b(gpu_config(dir / "b2", 2), gpu());
    b.restore(ck);
    for (int s = k; s < N; s++) {
      INFO("step " << s);
      REQUIRE(b.step().loss == losses[size_t(s)]);  // the same sums in the same order: exact
      REQUIRE(b.replicas_difference() == "");
    }
    require_same_state(a.snapshot(), b.snapshot());
  }
  {
    INFO("resumed on 1 GPU");
    Trainer b(gpu_config(dir / "b1", 1), gpu());
    b.restore(ck);
    for (int s = k; s < N; s++)
      REQUIRE(std::abs(b.step().loss - losses[size_t(s)]) < 1e-5);  // only where sums split
    REQUIRE(relative(weights(b), want_w) < 1e-5);
  }
  {
    INFO("resumed on 2 CPU replicas");
    Trainer b(replica_config(dir / "c2", 2), cpu());
    b.restore(ck);
    for (int s = k; s < N; s++) {
      const double loss = b.step().loss;
      REQUIRE(std::abs(loss - losses[size_t(s)]) < kGpuVsCpu * std::abs(losses[size_t(s)]));
      REQUIRE(b.replicas_difference() == "");
    }
    REQUIRE(relative(weights(b), want_w) < kGpuVsCpu);
  }
}

TEST_CASE("replicas [gpu]: the all-reduce's time and its exposed part come from the events") {
  REQUIRE_GPU();
  TempDir dir;
  for (int R : {2, 4}) {
    INFO(R << " GPU replicas");
    // The default model (140,458 fp32 gradients, 549 KiB): two buckets, so the first is
    // all-reduced while backward computes the second (kNoBnModel's gradients make one bucket,
    // ready only when backward ends).
    // (On the simulator, where the default model's direct kernels are the host's, a smaller
    // batch and fewer steps.)
    TrainConfig cfg = gpu_config(dir / ("r" + std::to_string(R)), R);
    cfg.model = "default", cfg.model_text = builtin_model_text("default");
    cfg.batch = sim_or(24, 8);
    Trainer t(cfg, gpu());
    INFO(t.replicas_description());
    REQUIRE(t.replicas_description().find("2 buckets") != std::string::npos);
    // The peer matrix of the one device, with its measured copy bandwidth.
    const std::string peers = t.peer_report();
    INFO(peers);
    REQUIRE(peers.find("gpu0") != std::string::npos);
    REQUIRE(peers.find("copy bandwidth") != std::string::npos);
    for (int s = 0; s < sim_or(5, 2); s++) {
      INFO("step " << s);
      using Clock = std::chrono::steady_clock;
      const auto t0 = Clock::now();
      const StepResult r = t.step();  // launched and finished inside: all its events too
      const double wall = std::chrono::duration<double>(Clock::now() - t0).count();
      INFO("comm " << r.comm_s << " s, exposed " << r.comm_exposed_s << " s, step " << wall
                   << " s");
      REQUIRE(r.taken);
      REQUIRE(r.comm_s > 0);
      // Seconds, not milliseconds: the ring ran within the step.
      REQUIRE(r.comm_s < wall);
      // The compute stream waits from the end of backward, after the first bucket was ready,
      // until the last is reduced: inside the comm interval, give or take the resolution of
      // two event intervals (~0.5 us each) and the cross-stream wait's release.
      REQUIRE(r.comm_exposed_s >= 0);
      REQUIRE(r.comm_exposed_s <= r.comm_s + 5e-6);
    }
  }
  // CPU replicas have no peer matrix.
  Trainer c(replica_config(dir / "cpu", 2), cpu());
  REQUIRE(c.peer_report() == "");
}

TEST_CASE("replicas [gpu]: every replica makes the same BatchNorm statistics update each step "
          "(the ring averages the step's sums), that of one replica with --accum R") {
  REQUIRE_GPU();
  TempDir dir;
  for (const int R : {2, 3}) {
    INFO(R << " GPU replicas");
    TrainConfig cfg = replica_config(dir / ("r" + std::to_string(R)), R, kTinyModel, "0");
    cfg.conv = "direct", cfg.linear = "direct";
    TrainConfig one_cfg = replica_config(dir / ("a" + std::to_string(R)), 1, kTinyModel, "0");
    one_cfg.conv = "direct", one_cfg.linear = "direct", one_cfg.accum = R;
    Trainer t(cfg, gpu()), one(one_cfg, gpu());
    for (int s = 0; s < 3; s++) {
      REQUIRE(t.step().taken);
      REQUIRE(one.step().taken);
    }
    // Every statistic of a trainer's replica r, read after its steps.
    auto stats = [](Trainer& tr, int r) {
      std::vector<std::vector<double>> all;  // [layer x field][channel]
      const auto on = tr.on_replica(r);
      for (const auto& [name, st] : tr.model(r).batchnorm_states()) {
        all.push_back(st->running_mean.to_doubles());
        all.push_back(st->running_var.to_doubles());
      }
      return all;
    };
    const auto s0 = stats(t, 0), ref = stats(one, 0);
    REQUIRE(!s0.empty());
    for (int r = 1; r < R; r++) REQUIRE(stats(t, r) == s0);  // bit for bit
    // The same batch statistics averaged; only the order of fp32 sums differs.
    for (size_t k = 0; k < s0.size(); k++) REQUIRE(relative(s0[k], ref[k]) < 1e-5);
  }
}
