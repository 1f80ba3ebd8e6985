// defines: what the replica tests on the CPU (replicas_test.cpp) and on GPUs
// (replicas_gpu_test.cpp) share: kNoBnModel, replica_config() (R replicas on "cpu" or on one
// GPU ordinal, repeated), run_on(), gradients() and weights() of one replica, relative(),
// require_replicas_step_like_one() and require_each_sample_once() (the R-against-one tests on
// any device), and set_gradient(),
// which writes one element of a replica's gradient (to inject an inf).
//
// Replica r's tensors were made on its compute stream, so a copy to the host comes after the
// work queued for that replica; they are read and written under Trainer::on_replica(r), which
// makes its GPU the current device (on the CPU it changes nothing). Call these from
// after_backward or between steps.
#pragma once
#include <algorithm>
#include <cmath>
#include <functional>
#include <initializer_list>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tests/train/train_fixture.h"
#include "train/engine/trainer.h"

namespace cutrain_test {

// The tiny model without BatchNorm: its gradient does not depend on how the batch is split.
inline const char* kNoBnModel = "conv 8 3x3 pad=1\nrelu\nmaxpool 2x2\nconv 8 3x3 pad=1 stride=2\n"
                                "relu\nmaxpool 2x2\nflatten\nlinear classes\n";

inline cutrain::RunDevice run_on(cutrain::Device device, cutrain::DType dtype) {
  cutrain::RunDevice d;
  d.device = device;
  d.dtype = dtype;
  return d;
}

// 240 images, batches of 24 (divisible by 1, 2, 3 and 4), 10 steps an epoch, one micro-batch.
// R > 1: --devices is `device` R times ("cpu,cpu", "0,0,0"); R = 1 leaves it unset, the plain
// single-replica run (on the CPU or GPU 0, as the RunDevice says).
inline cutrain::TrainConfig replica_config(const std::string& out, int replicas,
                                           const char* model = kNoBnModel,
                                           const std::string& device = "cpu") {
  cutrain::TrainConfig c = tiny_run_config(out, 240, 2);
  c.model_text = model;
  c.batch = 24, c.accum = 1, c.threads = 1;
  if (replicas > 1) {
    c.devices = device;
    for (int r = 1; r < replicas; r++) c.devices += "," + device;
  }
  return c;
}

// All gradients of replica r as one vector (loss-scaled, as the optimizer sees them).
inline std::vector<double> gradients(cutrain::Trainer& t, int r = 0) {
  const auto on = t.on_replica(r);
  std::vector<double> g;
  for (const cutrain::VarPtr& p : t.model(r).parameters()) {
    const auto v = p->grad.to_doubles();
    g.insert(g.end(), v.begin(), v.end());
  }
  return g;
}

// All weights of replica r as one vector (the working copies: fp16 in an fp16 run).
inline std::vector<double> weights(cutrain::Trainer& t, int r = 0) {
  const auto on = t.on_replica(r);
  std::vector<double> w;
  for (const cutrain::VarPtr& p : t.model(r).parameters()) {
    const auto v = p->value.to_doubles();
    w.insert(w.end(), v.begin(), v.end());
  }
  return w;
}

// |a - b| / |b| in the L2 norm: element-wise relative errors mean nothing where a sum cancels.
inline double relative(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); i++) d += (a[i] - b[i]) * (a[i] - b[i]), n += b[i] * b[i];
  return std::sqrt(d / n);
}

// R replicas (each of `counts`) against one replica with the same global batch and data order,
// 20 fp32 steps: every replica's averaged gradient within 1e-6 (L2, relative) of the one
// replica's, the losses within 1e-5, the weights after 20 steps within 1e-4 of how far they
// moved, and after every step all replicas equal bit for bit. config(out, R) makes each run's
// configuration (R = 1: the plain run); `where` is the device of all of them.
inline void require_replicas_step_like_one(
    const std::string& dir,
    const std::function<cutrain::TrainConfig(const std::string&, int)>& config,
    const cutrain::RunDevice& where, std::initializer_list<int> counts) {
  using namespace cutrain;
  const int steps = 20;
  Trainer one(config(dir + "/one", 1), where);
  REQUIRE(one.replicas() == 1);
  std::vector<std::vector<double>> want_grads;
  std::vector<double> want_losses;
  one.after_backward = [&](Trainer& t) { want_grads.push_back(gradients(t)); };
  const std::vector<double> w0 = weights(one);
  for (int s = 0; s < steps; s++) want_losses.push_back(one.step().loss);
  REQUIRE(want_grads.size() == size_t(steps));
  const std::vector<double> want_w = weights(one);

  for (int R : counts) {
    INFO(R << " replicas");
    const TrainConfig cfg = config(dir + "/r" + std::to_string(R), R);
    Trainer t(cfg, where);
    REQUIRE(t.replicas() == R);
    REQUIRE(t.replicas_description().find(std::to_string(R) + " replicas (--devices " +
                                          cfg.devices + ")") != std::string::npos);
    REQUIRE(weights(t, R - 1) == w0);  // the same start on every replica
    double worst_grad = 0, worst_loss = 0;
    int s = 0, calls = 0;
    t.after_backward = [&](Trainer& tr) {
      calls++;
      for (int r = 0; r < R; r++)  // each replica's averaged gradient, after its all-reduce
        worst_grad = std::max(worst_grad, relative(gradients(tr, r), want_grads[size_t(s)]));
    };
    for (; s < steps; s++) {
      const StepResult res = t.step();
      REQUIRE(res.step == s);
      REQUIRE(res.taken);
      REQUIRE(res.images == 24);
      REQUIRE(res.loss_scale == 1);  // fp32: no scaling
      worst_loss = std::max(worst_loss, std::abs(res.loss - want_losses[size_t(s)]));
      // After every step: every replica's weights and optimizer state equal bit for bit.
      REQUIRE(t.replicas_difference() == "");
    }
    REQUIRE(calls == steps);
    const double moved = relative(want_w, w0), off = relative(weights(t), want_w);
    INFO("gradients within " << worst_grad << ", losses within " << worst_loss
                             << ", weights moved " << moved << ", differ " << off);
    REQUIRE(worst_grad < 1e-6);
    REQUIRE(worst_loss < 1e-5);
    REQUIRE(moved > 0.05);
    REQUIRE(off < 1e-4 * moved);
  }
}

// R replicas (each of `counts`) over two epochs against one replica: every sample exactly once
// per epoch across the replicas, the shards arriving in rank order (every replica once a
// step) and, put together, in one replica's order; replica 0 sees new images in the second
// epoch (shards are not fixed per replica). config(out, R) as above, 240 images, batch 24.
inline void require_each_sample_once(
    const std::string& dir,
    const std::function<cutrain::TrainConfig(const std::string&, int)>& config,
    const cutrain::RunDevice& where, std::initializer_list<int> counts) {
  using namespace cutrain;
  Trainer one(config(dir + "/one", 1), where);
  std::vector<int64_t> order1;
  one.on_shard = [&](int, const Batch& b) {
    order1.insert(order1.end(), b.indices, b.indices + b.n);
  };
  for (int s = 0; s < 20; s++) one.step();  // 2 epochs of 10 steps
  REQUIRE(order1.size() == 480);

  for (int R : counts) {
    INFO(R << " replicas");
    Trainer t(config(dir + "/r" + std::to_string(R), R), where);
    std::vector<int64_t> orderR;
    std::map<int64_t, std::vector<int64_t>> per_epoch;  // epoch -> indices, all replicas
    std::vector<std::set<int64_t>> per_replica(static_cast<size_t>(R));
    int next = 0;  // shards arrive in rank order, every replica once a step
    t.on_shard = [&](int r, const Batch& b) {
      REQUIRE(r == next);
      next = (next + 1) % R;
      REQUIRE(b.n == 24 / R);
      orderR.insert(orderR.end(), b.indices, b.indices + b.n);  // rank order: the global batch
      per_epoch[b.where.epoch].insert(per_epoch[b.where.epoch].end(), b.indices, b.indices + b.n);
      per_replica[size_t(r)].insert(b.indices, b.indices + b.n);
    };
    for (int s = 0; s < 20; s++) REQUIRE(t.step().taken);
    REQUIRE(orderR == order1);
    REQUIRE(per_epoch.size() == 2);
    for (auto& [epoch, idx] : per_epoch) {
      INFO("epoch " << epoch);
      REQUIRE(idx.size() == 240);  // 10 batches of 24: every image of the 240 ...
      REQUIRE(std::set<int64_t>(idx.begin(), idx.end()).size() == 240);  // ... exactly once
    }
    // Replica 0 takes 240 / R an epoch, so more than that in all means new ones in epoch 2.
    REQUIRE(per_replica[0].size() > size_t(240 / R));
  }
}

// Element i of replica r's gradient of `param` set to `value` (f16 or f32 gradients). On a
// GPU through a host copy: read after the replica's queued work, written back in its order.
inline void set_gradient(cutrain::Trainer& t, int r, const std::string& param, int64_t i,
                         float value) {
  using namespace cutrain;
  const auto on = t.on_replica(r);
  for (const VarPtr& p : t.model(r).parameters()) {
    if (p->name != param) continue;
    Tensor& g = p->grad_buffer();
    REQUIRE(i < g.numel());
    const bool host = g.device() == Device::cpu;
    Tensor h = host ? g : g.to(Context::cpu());  // on the CPU: g itself
    if (h.dtype() == DType::f16)
      h.data<half_t>()[i] = half_t(value);
    else
      h.data<float>()[i] = value;
    if (!host) g.copy_from(h);
    return;
  }
  FAIL("replica " << r << " has no parameter " << param);
}


// The largest relative difference (L2) between replica r's BatchNorm running statistics and
// the one replica's, over every layer.
inline double batchnorm_stats_difference(cutrain::Trainer& one, cutrain::Trainer& t, int r) {
  const auto on = t.on_replica(r);
  const auto& want = one.model().batchnorm_states();
  const auto& got = t.model(r).batchnorm_states();
  REQUIRE(!want.empty());
  REQUIRE(got.size() == want.size());
  double worst = 0;
  for (size_t i = 0; i < want.size(); i++) {
    worst = std::max(worst, relative(got[i].second->running_mean.to_doubles(),
                                     want[i].second->running_mean.to_doubles()));
    worst = std::max(worst, relative(got[i].second->running_var.to_doubles(),
                                     want[i].second->running_var.to_doubles()));
  }
  return worst;
}

// --sync-bn: R replicas (each of `counts`) of a model with BatchNorm, each with B/R images,
// against one replica with the whole batch B (the same data order, one micro-batch a step),
// 5 steps in `where`'s precision: the losses, every replica's averaged gradient, the weights
// and the BatchNorm running statistics within `tol` (relative, L2); after every step every
// replica equal bit for bit. And the control: without --sync-bn the same replicas are farther
// than 100 tol from the one replica (each normalises its own shard), so the test sees the
// synchronisation and not a coincidence. config(out, R, sync_bn) makes each run's
// configuration (R = 1: the plain run).
inline void require_sync_bn_like_one(
    const std::string& dir,
    const std::function<cutrain::TrainConfig(const std::string&, int, bool)>& config,
    const cutrain::RunDevice& where, std::initializer_list<int> counts, double tol) {
  using namespace cutrain;
  const int steps = 5;
  for (int R : counts) {
    INFO(R << " replicas");
    const std::string r = std::to_string(R);
    Trainer one(config(dir + "/one" + r, 1, false), where);
    Trainer t(config(dir + "/sync" + r, R, true), where);
    Trainer plain(config(dir + "/plain" + r, R, false), where);
    REQUIRE(t.replicas_description().find("--sync-bn") != std::string::npos);
    REQUIRE(plain.replicas_description().find("--sync-bn") == std::string::npos);
    std::vector<double> g1;
    double worst_grad = 0;
    one.after_backward = [&](Trainer& tr) { g1 = gradients(tr); };
    t.after_backward = [&](Trainer& tr) {
      for (int k = 0; k < R; k++) worst_grad = std::max(worst_grad, relative(gradients(tr, k), g1));
    };
    double worst_loss = 0, worst_stats = 0, plain_off = 0;
    for (int s = 0; s < steps; s++) {
      const StepResult a = one.step(), b = t.step(), c = plain.step();
      REQUIRE(b.taken);
      worst_loss = std::max(worst_loss, std::abs(b.loss - a.loss) / std::abs(a.loss));
      REQUIRE(t.replicas_difference() == "");  // every replica alike, statistics included
      for (int k = 0; k < R; k++)
        worst_stats = std::max(worst_stats, batchnorm_stats_difference(one, t, k));
      plain_off = std::max(plain_off, std::abs(c.loss - a.loss) / std::abs(a.loss));
    }
    const double off = relative(weights(t), weights(one));
    plain_off = std::max(plain_off, relative(weights(plain), weights(one)));
    INFO("losses within " << worst_loss << ", gradients " << worst_grad << ", weights " << off
                          << ", statistics " << worst_stats << "; without --sync-bn "
                          << plain_off);
    REQUIRE(worst_loss < tol);
    REQUIRE(worst_grad < tol);
    REQUIRE(off < tol);
    REQUIRE(worst_stats < tol);
    REQUIRE(plain_off > 100 * tol);
  }
}

}  // namespace cutrain_test
