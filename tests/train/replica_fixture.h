// defines: what the replica tests on the CPU (replicas_test.cpp) and on GPUs
// (replicas_gpu_test.cpp) share: kNoBnModel, replica_config() (R replicas on "cpu" or on one
// GPU ordinal, repeated), run_on(), gradients() and weights() of one replica, relative(), and
// set_gradient(), which writes one element of a replica's gradient (to inject an inf).
//
// Replica r's tensors are read and written under Trainer::on_replica(r): on a GPU its compute
// stream and device, so a copy to the host comes after the work queued for that replica (on
// the CPU the scope changes nothing). Call these from after_backward or between steps.
#pragma once
#include <cmath>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "tests/train/train_fixture.h"
#include "train/trainer.h"

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
    Tensor h = host ? g : g.to(Device::cpu);  // on the CPU: g itself
    if (h.dtype() == DType::f16)
      h.data<half_t>()[i] = half_t(value);
    else
      h.data<float>()[i] = value;
    if (!host) g.copy_from(h);
    return;
  }
  FAIL("replica " << r << " has no parameter " << param);
}

}  // namespace cutrain_test
