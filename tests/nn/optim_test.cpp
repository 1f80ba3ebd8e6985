// The Optimizer interface shared by SGD and AdamW: a step with an inf/NaN anywhere changes
// nothing (bit for bit) and names the parameter, the loss scale halves, the state a
// checkpoint saves is enough to continue exactly, lr follows a schedule, make_optimizer.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "nn/loss_scaler.h"
#include "nn/optim.h"
#include "tests/test_util.h"

using namespace cutrain;

namespace {
// Three parameters of mixed dtypes, like a model: fp16 weights with fp32 masters, an fp32
// BN scale whose master is the parameter itself.
std::vector<VarPtr> make_params() {
  return {make_var(Tensor::from_floats({0.5f, -1, 2, 0.25f}, {4}, DType::f16), true, "conv1.w"),
          make_var(Tensor::from_floats({1, 1.5f, 0.75f}, {3}, DType::f32), true, "bn.g"),
          make_var(Tensor::from_floats({-0.5f, 1, 0, 3, -2}, {5}, DType::f16), true, "fc.w")};
}

// Gradients as backward would leave them at loss scale `scale`; `t` varies them per step.
void set_grads(const std::vector<VarPtr>& ps, double scale, int t) {
  for (size_t i = 0; i < ps.size(); i++) {
    std::vector<float> g;
    for (int64_t j = 0; j < ps[i]->value.numel(); j++)
      g.push_back(float(scale * 0.01 * std::sin(double(t * 7 + int64_t(i) * 3 + j))));
    ps[i]->grad = Tensor::from_floats(g, ps[i]->value.shape(), ps[i]->value.dtype());
  }
}

// Puts `bad` into element 1 of parameter i's gradient, in its own dtype.
void poison(const VarPtr& p, float bad) {
  if (p->grad.dtype() == DType::f16)
    p->grad.data<half_t>()[1] = half_t(bad);
  else
    p->grad.data<float>()[1] = bad;
}

// Every byte an optimizer step may change: the parameters and all state tensors.
std::vector<Tensor> snapshot(Optimizer& opt) {
  std::vector<Tensor> out;
  for (const VarPtr& p : opt.params()) out.push_back(p->value.clone());
  for (auto& [name, t] : opt.state_tensors()) out.push_back(t->clone());
  return out;
}

void require_same_bytes(Optimizer& opt, const std::vector<Tensor>& before) {
  const std::vector<Tensor> now = snapshot(opt);
  REQUIRE(now.size() == before.size());
  for (size_t i = 0; i < now.size(); i++) {
    INFO("tensor " << i << " " << now[i].str());
    REQUIRE(now[i].bytes() == before[i].bytes());
    REQUIRE(std::memcmp(now[i].raw(), before[i].raw(), now[i].bytes()) == 0);
  }
}
}  // namespace

TEST_CASE("optim: an inf or NaN in one gradient skips the whole step for SGD and AdamW") {
  for (const char* kind : {"sgd", "nesterov", "adamw"}) {
    INFO(kind);
    const std::vector<VarPtr> ps = make_params();
    auto opt = make_optimizer(kind, ps, 0.01, 0.9, 0.01);
    LossScaler scaler;
    for (int t = 0; t < 2; t++) {  // two clean steps: the state is no longer zero
      set_grads(ps, scaler.scale(), t);
      REQUIRE(opt->step(scaler.scale()));
      REQUIRE(opt->first_nonfinite().empty());
      scaler.update(false, t);
    }
    REQUIRE(opt->steps_taken == 2);
    const std::vector<Tensor> before = snapshot(*opt);
    int64_t step = 2;
    for (float bad : {INFINITY, -INFINITY, NAN}) {
      set_grads(ps, scaler.scale(), 5);
      poison(ps[2], bad);
      const double scale = scaler.scale();
      const bool taken = opt->step(scale);
      REQUIRE_FALSE(taken);
      REQUIRE(opt->first_nonfinite() == "fc.w");
      require_same_bytes(*opt, before);
      REQUIRE(opt->steps_taken == 2);
      scaler.update(!taken, step++);
      REQUIRE(scaler.scale() == scale / 2);  // the scale halves
      opt->zero_grad();
      REQUIRE(opt->first_nonfinite() == "fc.w");  // still there for the report
    }
    // two bad parameters: the first in parameter order is named
    set_grads(ps, scaler.scale(), 6);
    poison(ps[1], NAN);
    poison(ps[2], INFINITY);
    REQUIRE_FALSE(opt->step(scaler.scale()));
    REQUIRE(opt->first_nonfinite() == "bn.g");
    require_same_bytes(*opt, before);
    // and the next clean step is taken and clears the report
    set_grads(ps, scaler.scale(), 7);
    REQUIRE(opt->step(scaler.scale()));
    REQUIRE(opt->first_nonfinite().empty());
    REQUIRE(opt->steps_taken == 3);
  }
}

TEST_CASE("optim: a gradient that overflows only when unscaled by a scale below 1 is caught") {
  VarPtr w = make_var(Tensor::from_floats({1, 2}, {2}), true, "");
  auto opt = make_optimizer("adamw", {w}, 1e-3, 0.9, 0.0);
  w->grad = Tensor::from_floats({1e30f, 1}, {2});
  REQUIRE_FALSE(opt->step(1e-10));
  REQUIRE(opt->first_nonfinite() == "parameter 0");  // unnamed parameters get their index
  REQUIRE(opt->step(1.0));
}

TEST_CASE("optim: state_tensors names masters only where separate, then the optimizer state") {
  const std::vector<VarPtr> ps = make_params();
  auto names = [](Optimizer& opt) {
    std::vector<std::string> out;
    for (auto& [name, t] : opt.state_tensors()) out.push_back(name);
    return out;
  };
  SGD sgd(ps, SgdParams{});
  REQUIRE(names(sgd) == std::vector<std::string>{"conv1.w.master", "conv1.w.momentum",
                                                 "bn.g.momentum", "fc.w.master",
                                                 "fc.w.momentum"});
  AdamW adamw(ps, AdamWParams{});
  REQUIRE(names(adamw) ==
          std::vector<std::string>{"conv1.w.master", "conv1.w.adam_m", "conv1.w.adam_v",
                                   "bn.g.adam_m", "bn.g.adam_v", "fc.w.master", "fc.w.adam_m",
                                   "fc.w.adam_v"});
  for (auto& [name, t] : adamw.state_tensors()) REQUIRE(t->dtype() == DType::f32);
}

TEST_CASE("optim: restoring state_tensors and steps_taken continues bit for bit") {
  for (const char* kind : {"sgd", "nesterov", "adamw"}) {
    INFO(kind);
    const std::vector<VarPtr> pa = make_params();
    auto a = make_optimizer(kind, pa, 0.01, 0.9, 0.01);
    for (int t = 0; t < 3; t++) {
      set_grads(pa, 1024, t);
      REQUIRE(a->step(1024));
    }
    // "checkpoint": the parameters and the optimizer state, into fresh objects
    std::vector<VarPtr> pb;
    for (const VarPtr& p : pa) pb.push_back(make_var(p->value.clone(), true, p->name));
    auto b = make_optimizer(kind, pb, 0.01, 0.9, 0.01);
    auto sa = a->state_tensors(), sb = b->state_tensors();
    REQUIRE(sa.size() == sb.size());
    for (size_t i = 0; i < sa.size(); i++) {
      REQUIRE(sa[i].first == sb[i].first);
      std::memcpy(sb[i].second->raw(), sa[i].second->raw(), sa[i].second->bytes());
    }
    b->steps_taken = a->steps_taken;
    for (int t = 3; t < 6; t++) {
      set_grads(pa, 1024, t);
      set_grads(pb, 1024, t);
      REQUIRE(a->step(1024));
      REQUIRE(b->step(1024));
    }
    require_same_bytes(*b, snapshot(*a));
  }
}

TEST_CASE("optim: AdamW needs steps_taken restored: its bias correction depends on it") {
  const std::vector<VarPtr> pa = make_params(), pb = make_params();
  auto a = make_optimizer("adamw", pa, 0.01, 0.9, 0.0);
  auto b = make_optimizer("adamw", pb, 0.01, 0.9, 0.0);
  set_grads(pa, 1, 0);
  set_grads(pb, 1, 0);
  REQUIRE(a->step());
  b->steps_taken = 100;  // same state otherwise: only t differs
  REQUIRE(b->step());
  REQUIRE(std::memcmp(pa[1]->value.raw(), pb[1]->value.raw(), pa[1]->value.bytes()) != 0);
}

TEST_CASE("optim: lr may change between steps, as a schedule does") {
  VarPtr w = make_var(Tensor::from_doubles({1}, {1}), true, "w");
  auto opt = make_optimizer("sgd", {w}, 0.1, 0.0, 0.0);  // w -= lr * g
  w->grad = Tensor::from_doubles({1}, {1});
  REQUIRE(opt->step());
  REQUIRE(w->value.item() == doctest::Approx(0.9).epsilon(1e-15));
  opt->lr = 0.5;
  REQUIRE(opt->step());
  REQUIRE(w->value.item() == doctest::Approx(0.4).epsilon(1e-15));
  opt->lr = 0;  // the end of a decay to zero: allowed, moves nothing
  REQUIRE(opt->step());
  REQUIRE(w->value.item() == doctest::Approx(0.4).epsilon(1e-15));
  opt->lr = -1;
  REQUIRE_ERROR(opt->step(), "SGD: learning rate must be >= 0");
}

TEST_CASE("optim: make_optimizer by name, and a clear error for others") {
  VarPtr w = make_var(Tensor::from_floats({1}, {1}), true, "w");
  REQUIRE(make_optimizer("sgd", {w}, 0.1, 0.9, 0)->name() == "sgd");
  REQUIRE(make_optimizer("nesterov", {w}, 0.1, 0.9, 0)->name() == "nesterov");
  auto adamw = make_optimizer("adamw", {w}, 1e-3, 0.9, 0.05);
  REQUIRE(adamw->name() == "adamw");
  REQUIRE(dynamic_cast<AdamW&>(*adamw).hyper().weight_decay == 0.05);
  REQUIRE(dynamic_cast<AdamW&>(*adamw).hyper().beta1 == 0.9);
  REQUIRE(adamw->lr == 1e-3);
  REQUIRE_ERROR(make_optimizer("adam", {w}, 0.1, 0.9, 0),
                "unknown optimizer 'adam' (expected sgd, nesterov or adamw)");
  REQUIRE_ERROR(make_optimizer("nesterov", {w}, 0.1, 0.0, 0), "Nesterov needs a momentum > 0");
}
