// The Optimizer interface shared by SGD and AdamW, driven by the one step protocol on a CPU
// step state (nn/device_step.h; take_step or its parts): a step with an inf/NaN anywhere
// changes nothing (bit for bit) and names the first parameter at fault, the loss scale halves,
// check only raises flags, the tensors a checkpoint saves plus the step state's count continue
// exactly, lr follows a schedule, the step state must be the optimizer's, make_optimizer.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "nn/device_step.h"
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

// A config whose scale never moves: every step at `scale` (fp32 training: 1).
LossScalerConfig fixed_scale(double scale) {
  LossScalerConfig c;
  c.dynamic = false;
  c.init = scale;
  return c;
}
}  // namespace

TEST_CASE("optim: an inf or NaN in one gradient skips the whole step for SGD and AdamW") {
  for (const char* kind : {"sgd", "nesterov", "adamw"}) {
    INFO("optimizer " << kind);
    const std::vector<VarPtr> ps = make_params();
    auto opt = make_optimizer(kind, ps, 0.01, 0.9, 0.01);
    DeviceStep ds(LossScalerConfig{}, int(ps.size()), Context::cpu());
    ds.reset(loss_scaler_start(ds.config()), 0);
    for (int t = 0; t < 2; t++) {  // two clean steps: the state is no longer zero
      set_grads(ps, ds.read().scaler.scale, t);
      REQUIRE(take_step(*opt, ds, 0.01));
      REQUIRE(ds.read().first_bad == -1);
    }
    REQUIRE(ds.read().steps_taken == 2);
    const std::vector<Tensor> before = snapshot(*opt);
    int64_t step = 2;
    for (float bad : {INFINITY, -INFINITY, NAN}) {
      const double scale = ds.read().scaler.scale;
      set_grads(ps, scale, 5);
      poison(ps[2], bad);
      REQUIRE_FALSE(take_step(*opt, ds, 0.01));
      const StepState st = ds.read();
      REQUIRE(st.skip == 1);
      REQUIRE(opt->parameter_name(size_t(st.first_bad)) == "fc.w");
      REQUIRE(st.scale_used == scale);
      require_same_bytes(*opt, before);
      REQUIRE(st.steps_taken == 2);
      REQUIRE(st.scaler.scale == scale / 2);  // the scale halves
      loss_scaler_check(ds.config(), st.scaler, step++, "fc.w");  // 3 in a row: no abort yet
      opt->zero_grad();
      REQUIRE(ds.read().first_bad == 2);  // still there for the report
    }
    // two bad parameters, the protocol in its parts: check flags both, decide names the first
    set_grads(ps, ds.read().scaler.scale, 6);
    poison(ps[1], NAN);
    poison(ps[2], INFINITY);
    ds.set_lr(0.01);
    ds.begin();
    opt->check(ds);
    REQUIRE(*ds.flag(0) == 0);
    REQUIRE(*ds.flag(1) != 0);
    REQUIRE(*ds.flag(2) != 0);
    ds.decide();
    REQUIRE(ds.read().skip == 1);
    REQUIRE(opt->parameter_name(size_t(ds.read().first_bad)) == "bn.g");
    opt->apply(ds);  // ends in the step's finish
    require_same_bytes(*opt, before);
    // and the next clean step is taken and clears the report
    set_grads(ps, ds.read().scaler.scale, 7);
    REQUIRE(take_step(*opt, ds, 0.01));
    REQUIRE(ds.read().first_bad == -1);
    REQUIRE(ds.read().steps_taken == 3);
  }
}

TEST_CASE("optim: check only raises flags; a flag raised elsewhere (a replica's) skips the step") {
  const std::vector<VarPtr> ps = make_params();
  auto opt = make_optimizer("adamw", ps, 0.01, 0.9, 0.01);
  DeviceStep ds(fixed_scale(1), int(ps.size()), Context::cpu());
  ds.reset(loss_scaler_start(ds.config()), 0);
  set_grads(ps, 1, 0);
  const std::vector<Tensor> before = snapshot(*opt);
  ds.set_lr(0.01);
  ds.begin();
  *ds.flag(1) = 1;  // what OR-ing another replica's flags leaves
  opt->check(ds);   // every gradient here is finite: the flag stays
  REQUIRE(*ds.flag(1) == 1);
  ds.decide();
  opt->apply(ds);
  REQUIRE(ds.read().skip == 1);
  REQUIRE(ds.read().first_bad == 1);
  require_same_bytes(*opt, before);
  // begin clears the flags: the same gradients make a clean step
  REQUIRE(take_step(*opt, ds, 0.01));
  REQUIRE(ds.read().steps_taken == 1);
}

TEST_CASE("optim: a gradient that overflows only when unscaled by a scale below 1 is caught") {
  VarPtr w = make_var(Tensor::from_floats({1, 2}, {2}), true, "");
  auto opt = make_optimizer("adamw", {w}, 1e-3, 0.9, 0.0);
  DeviceStep ds(fixed_scale(1e-10), 1, Context::cpu());
  ds.reset(loss_scaler_start(ds.config()), 0);
  w->grad = Tensor::from_floats({1e30f, 1}, {2});
  REQUIRE_FALSE(take_step(*opt, ds, 1e-3));
  REQUIRE(opt->parameter_name(size_t(ds.read().first_bad)) == "parameter 0");  // unnamed: index
  LossScalerState one;
  one.scale = 1;
  ds.reset(one, 0);
  REQUIRE(take_step(*opt, ds, 1e-3));
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

TEST_CASE("optim: restoring state_tensors and the step state continues bit for bit") {
  // x2 after 2 clean steps: the scale moves during the run, so the scaler's state matters too
  LossScalerConfig c;
  c.init = 1024, c.growth_interval = 2;
  for (const char* kind : {"sgd", "nesterov", "adamw"}) {
    INFO("optimizer " << kind);
    const std::vector<VarPtr> pa = make_params();
    auto a = make_optimizer(kind, pa, 0.01, 0.9, 0.01);
    DeviceStep da(c, int(pa.size()), Context::cpu());
    da.reset(loss_scaler_start(c), 0);
    for (int t = 0; t < 3; t++) {
      set_grads(pa, da.read().scaler.scale, t);
      REQUIRE(take_step(*a, da, 0.01));
    }
    // "checkpoint": the parameters, the optimizer's tensors and the step state's scaler and
    // count, into fresh objects
    std::vector<VarPtr> pb;
    for (const VarPtr& p : pa) pb.push_back(make_var(p->value.clone(), true, p->name));
    auto b = make_optimizer(kind, pb, 0.01, 0.9, 0.01);
    auto sa = a->state_tensors(), sb = b->state_tensors();
    REQUIRE(sa.size() == sb.size());
    for (size_t i = 0; i < sa.size(); i++) {
      REQUIRE(sa[i].first == sb[i].first);
      std::memcpy(sb[i].second->raw(), sa[i].second->raw(), sa[i].second->bytes());
    }
    const StepState saved = da.read();
    DeviceStep db(c, int(pb.size()), Context::cpu());
    db.reset(loss_scaler_restored(c, saved.scaler), saved.steps_taken);
    for (int t = 3; t < 6; t++) {
      REQUIRE(db.read().scaler.scale == da.read().scaler.scale);
      set_grads(pa, da.read().scaler.scale, t);
      set_grads(pb, db.read().scaler.scale, t);
      REQUIRE(take_step(*a, da, 0.01));
      REQUIRE(take_step(*b, db, 0.01));
    }
    require_same_bytes(*b, snapshot(*a));
    REQUIRE(db.read().steps_taken == 6);
    REQUIRE(da.read().steps_taken == 6);
    REQUIRE(db.read().scaler.scale == da.read().scaler.scale);
    REQUIRE(db.read().scaler.scale == 8192);  // grew after steps 2, 4 and 6
    REQUIRE(db.read().scaler.clean_steps == da.read().scaler.clean_steps);
  }
}

TEST_CASE("optim: AdamW needs the step count restored: its bias correction depends on it") {
  const std::vector<VarPtr> pa = make_params(), pb = make_params();
  auto a = make_optimizer("adamw", pa, 0.01, 0.9, 0.0);
  auto b = make_optimizer("adamw", pb, 0.01, 0.9, 0.0);
  DeviceStep da(fixed_scale(1), int(pa.size()), Context::cpu());
  DeviceStep db(fixed_scale(1), int(pb.size()), Context::cpu());
  da.reset(loss_scaler_start(da.config()), 0);
  db.reset(loss_scaler_start(db.config()), 100);  // same state otherwise: only t differs
  set_grads(pa, 1, 0);
  set_grads(pb, 1, 0);
  REQUIRE(take_step(*a, da, 0.01));
  REQUIRE(take_step(*b, db, 0.01));
  REQUIRE(da.read().steps_taken == 1);
  REQUIRE(db.read().steps_taken == 101);
  REQUIRE(std::memcmp(pa[1]->value.raw(), pb[1]->value.raw(), pa[1]->value.bytes()) != 0);
}

TEST_CASE("optim: lr may change between steps, as a schedule does") {
  VarPtr w = make_var(Tensor::from_doubles({1}, {1}), true, "w");
  auto opt = make_optimizer("sgd", {w}, 0.1, 0.0, 0.0);  // w -= lr * g
  DeviceStep ds(fixed_scale(1), 1, Context::cpu());
  ds.reset(loss_scaler_start(ds.config()), 0);
  w->grad = Tensor::from_doubles({1}, {1});
  REQUIRE(take_step(*opt, ds, 0.1));
  REQUIRE(w->value.item() == doctest::Approx(0.9).epsilon(1e-15));
  REQUIRE(w->grad.item() == 0);  // the update consumed the gradient: zeroed for the next backward
  w->grad = Tensor::from_doubles({1}, {1});
  REQUIRE(take_step(*opt, ds, 0.5));  // the state's rate is used, not the initial one
  REQUIRE(ds.read().lr == 0.5);
  REQUIRE(w->value.item() == doctest::Approx(0.4).epsilon(1e-15));
  w->grad = Tensor::from_doubles({1}, {1});
  REQUIRE(take_step(*opt, ds, 0));  // the end of a decay to zero: allowed, moves nothing
  REQUIRE(w->value.item() == doctest::Approx(0.4).epsilon(1e-15));
  REQUIRE_ERROR(take_step(*opt, ds, -1), "the learning rate must be >= 0, got -1");
  REQUIRE_ERROR(take_step(*opt, ds, std::nan("")), "the learning rate must be >= 0");
  // refused before anything moved
  REQUIRE(w->value.item() == doctest::Approx(0.4).epsilon(1e-15));
  REQUIRE(ds.read().lr == 0);
  REQUIRE(ds.read().steps_taken == 3);
}

TEST_CASE("optim: the step state must be the optimizer's: one flag per parameter") {
  const std::vector<VarPtr> ps = make_params();
  auto opt = make_optimizer("sgd", ps, 0.1, 0.9, 0);
  DeviceStep wrong(LossScalerConfig{}, int(ps.size()) + 1, Context::cpu());
  wrong.reset(loss_scaler_start(wrong.config()), 0);
  set_grads(ps, 1, 0);
  const std::vector<Tensor> before = snapshot(*opt);
  REQUIRE_ERROR(opt->check(wrong), "SGD: the DeviceStep has 4 flags for 3 parameters");
  REQUIRE_ERROR(opt->apply(wrong), "SGD: the DeviceStep has 4 flags for 3 parameters");
  REQUIRE_ERROR(take_step(*opt, wrong, 0.1), "SGD: the DeviceStep has 4 flags for 3 parameters");
  require_same_bytes(*opt, before);
}

TEST_CASE("optim: make_optimizer by name, and a clear error for others") {
  VarPtr w = make_var(Tensor::from_floats({1}, {1}), true, "w");
  REQUIRE(make_optimizer("sgd", {w}, 0.1, 0.9, 0)->name() == "sgd");
  REQUIRE(make_optimizer("nesterov", {w}, 0.1, 0.9, 0)->name() == "nesterov");
  auto adamw = make_optimizer("adamw", {w}, 1e-3, 0.9, 0.05);
  REQUIRE(adamw->name() == "adamw");
  REQUIRE(dynamic_cast<AdamW&>(*adamw).hyper().weight_decay == 0.05);
  REQUIRE(dynamic_cast<AdamW&>(*adamw).hyper().beta1 == 0.9);
  REQUIRE(dynamic_cast<AdamW&>(*adamw).hyper().lr == 1e-3);  // the initial rate
  REQUIRE_ERROR(make_optimizer("adam", {w}, 0.1, 0.9, 0),
                "unknown optimizer 'adam' (expected sgd, nesterov or adamw)");
  REQUIRE_ERROR(make_optimizer("nesterov", {w}, 0.1, 0.0, 0), "Nesterov needs a momentum > 0");
}

TEST_CASE("optim: --ema's averages move on a step taken, by their definition, never on a skip") {
  for (const char* kind : {"sgd", "adamw"}) {
    INFO("optimizer " << kind);
    const std::vector<VarPtr> ps = make_params();
    auto opt = make_optimizer(kind, ps, 0.01, 0.9, 0.01);
    Tensor stat = Tensor::from_floats({1, 2, 3}, {3}, DType::f32);  // a BatchNorm statistic
    opt->enable_ema(0.9, {{"bn.running_var", &stat}});
    REQUIRE(opt->ema_decay() == 0.9);
    // the names a checkpoint saves, after the optimizer's own state
    std::vector<std::string> names;
    for (auto& [name, t] : opt->state_tensors()) names.push_back(name);
    REQUIRE(names.size() >= 4);
    REQUIRE(std::vector<std::string>(names.end() - 4, names.end()) ==
            std::vector<std::string>{"conv1.w.ema", "bn.g.ema", "fc.w.ema", "bn.running_var.ema"});
    // they start as the masters (fp32) and the statistic
    REQUIRE(opt->param_average(0).dtype() == DType::f32);
    REQUIRE(opt->param_average(1).to_floats() == ps[1]->value.to_floats());
    DeviceStep ds(fixed_scale(1), int(ps.size()), Context::cpu());
    ds.reset(loss_scaler_start(ds.config()), 0);
    std::vector<double> want = ps[1]->value.to_doubles(), want_stat = {1, 2, 3};
    for (int t = 1; t <= 3; t++) {
      set_grads(ps, 1, t);
      stat.copy_from(Tensor::from_floats({float(t), 2, 3}, {3}, DType::f32));  // as a forward
      REQUIRE(take_step(*opt, ds, 0.01));
      const double d = std::min(0.9, (1.0 + t) / (10.0 + t));
      const std::vector<double> w = ps[1]->value.to_doubles();
      for (size_t i = 0; i < want.size(); i++) want[i] = d * want[i] + (1 - d) * w[i];
      want_stat[0] = d * want_stat[0] + (1 - d) * t;
      const std::vector<double> got = opt->param_average(1).to_doubles();
      for (size_t i = 0; i < want.size(); i++) REQUIRE(std::fabs(got[i] - want[i]) < 1e-6);
      REQUIRE(std::fabs(opt->buffer_averages()[0].second.to_doubles()[0] - want_stat[0]) < 1e-6);
    }
    // a skipped step: nothing moves, the averages included
    const std::vector<Tensor> before = snapshot(*opt);
    set_grads(ps, 1, 9);
    poison(ps[0], NAN);
    REQUIRE_FALSE(take_step(*opt, ds, 0.01));
    require_same_bytes(*opt, before);
    // asked twice, or of a bad decay: refused
    REQUIRE_ERROR(opt->enable_ema(0.9, {}), "already kept");
    auto other = make_optimizer(kind, make_params(), 0.01, 0.9, 0.01);
    REQUIRE_ERROR(other->enable_ema(1.0, {}), "must be in (0, 1)");
  }
}
