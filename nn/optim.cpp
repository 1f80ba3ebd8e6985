#include "nn/optim.h"

#include <cmath>
#include <cstring>

#include "nn/dispatch.h"

namespace cutrain {

// ---- Optimizer: masters, the whole-step inf/NaN check, names ----

Optimizer::Optimizer(const char* who, std::vector<VarPtr> params, double lr)
    : who_(who), params_(std::move(params)) {
  CHECK(std::isfinite(lr) && lr > 0, who_ << ": learning rate must be positive, got " << lr);
  CHECK(!params_.empty(), who_ << ": no parameters to optimize");
  for (const VarPtr& p : params_) {
    CHECK(p && p->requires_grad, who_ << ": parameter '" << (p ? p->name : "null")
                                      << "' does not require a gradient");
    CHECK(p->value.device() == params_[0]->value.device(),
          who_ << ": parameters on different devices: " << params_[0]->value.str() << " and "
               << p->value.str());
    const DType acc = acc_dtype(p->value.dtype());
    masters_.push_back(p->value.dtype() == acc ? p->value : p->value.to(acc));
  }
}

void Optimizer::check_step(const DeviceStep& ds) const {
  CHECK(ds.device() == device(), who_ << ": the step state is on " << device_name(ds.device())
                                      << ", the parameters on " << device_name(device()));
  CHECK(ds.params() == int(params_.size()),
        who_ << ": the DeviceStep has " << ds.params() << " flags for " << params_.size()
             << " parameters");
}

ParamTotals Optimizer::totals() const {
  ParamTotals t;
  for (size_t i = 0; i < params_.size(); i++) {
    const Tensor& p = params_[i]->value;
    const double bytes = double(p.bytes());
    t.elements += p.numel();
    t.grad_bytes += bytes;  // the gradient has the parameter's dtype
    if (masters_[i].raw() != p.raw()) t.working_bytes += bytes;
  }
  // an average: read and written, 8 bytes an element; a buffer's also reads the buffer
  for (const Tensor& e : param_ema_) t.ema_elements += e.numel(), t.ema_bytes += 8.0 * e.numel();
  for (const auto& [name, e] : buffer_ema_)
    t.ema_elements += e.numel(), t.ema_bytes += 12.0 * e.numel();
  return t;
}

const ParamTable& Optimizer::table(const DeviceStep& ds) {
  std::vector<ParamSlot> slots(params_.size());
  for (size_t i = 0; i < params_.size(); i++) {
    Tensor& g = grad(i);  // a zero gradient where none was made: its place in the table
    ParamSlot& s = slots[i];
    s.grad = g.raw();
    s.master = masters_[i].data<float>();
    s.working = masters_[i].raw() != params_[i]->value.raw() ? params_[i]->value.raw() : nullptr;
    s.n = g.numel();
    s.half = g.dtype() == DType::f16;
    fill_state(i, s);
    if (ema_decay_ > 0) s.ema = param_ema_[i].data<float>();
  }
  for (size_t j = 0; j < buffers_.size(); j++) {  // averaged-only, after the parameters
    ParamSlot b;
    b.master = buffers_[j]->data<float>();
    b.ema = buffer_ema_[j].second.data<float>();
    b.n = buffers_[j]->numel();
    slots.push_back(b);
  }
  if (!table_.built() || table_.host() != slots) {
    const Context& c = ds.context();
    table_.build(slots, c.gpu >= 0 ? c.gpu : current_device(), c.stream);
  }
  return table_;
}

void Optimizer::check(DeviceStep& ds) { check_flags(ds, false); }
void Optimizer::check_and_decide(DeviceStep& ds) { check_flags(ds, true); }

void Optimizer::check_flags(DeviceStep& ds, bool decide) {
  check_step(ds);
  note_launch(ds.context().plan, multi_grads_nonfinite_gpu_cost(totals(), decide));
  if (device() == Device::cuda) {
#if defined(CUTRAIN_CUDA)
    multi_grads_nonfinite_gpu(table(ds), ds.inv_scale(), ds.flags(),
                              decide ? ds.state() : nullptr, ds.context().stream);
#else
    no_gpu_kernel(who_);  // not reached: a CPU-only build has no cuda tensors
#endif
    return;
  }
  for (size_t i = 0; i < params_.size(); i++) {
    const Tensor& g = params_[i]->grad;
    if (!g.defined()) continue;  // unused this step: a zero gradient, finite
    dispatch_float(g.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if (!grads_finite_cpu<T>(g.numel(), g.template data<T>(), double(ds.state()->inv_scale)))
        *ds.flag(int(i)) = 1;
    });
  }
  // Not ds.decide(): that would note a launch of its own, which a GPU folds into the check.
  if (decide) step_decide_cpu(ds.params(), ds.flags(), ds.state());
}

void Optimizer::apply(DeviceStep& ds) {
  check_step(ds);
  // A GPU queues the update, to be skipped on the device when the state says so, and the
  // step's finish folded into it.
  note_launch(ds.context().plan, update_cost());
  if (device() == Device::cuda) return update_gpu(ds, table(ds), {ds.config(), ds.state()});
  const StepState& s = *ds.state();
  if (!s.skip) {
    CHECK(std::isfinite(s.lr) && s.lr >= 0,
          who_ << ": learning rate must be >= 0, got " << s.lr);
    update_cpu(s);
    if (ema_decay_ > 0) {  // the averages, of the updated weights, at step t
      auto average = [&](const Tensor& of, Tensor& avg) {
        if (of.dtype() == DType::f64)
          ema_update_cpu<double>(of.numel(), of.data<double>(), avg.data<double>(), ema_decay_,
                                 s.t);
        else
          ema_update_cpu<float>(of.numel(), of.data<float>(), avg.data<float>(), ema_decay_, s.t);
      };
      for (size_t i = 0; i < params_.size(); i++) average(masters_[i], param_ema_[i]);
      for (size_t j = 0; j < buffers_.size(); j++) average(*buffers_[j], buffer_ema_[j].second);
    }
  }
  // Zeroed in place, not by Tensor::zero_: a GPU's update zeroes them as it reads them, so there
  // is no memset to note in a LaunchPlan.
  for (VarPtr& p : params_)
    if (p->grad.defined()) std::memset(p->grad.raw(), 0, p->grad.bytes());
  step_finish_cpu(ds.config(), ds.state());  // not ds.finish(), whose launch a GPU folds in
}

bool take_step(Optimizer& opt, DeviceStep& ds, double lr) {
  ds.set_lr(lr);
  ds.begin();
  opt.check_and_decide(ds);
  opt.apply(ds);
  return ds.read().skip == 0;
}

void Optimizer::zero_grad() {
  for (VarPtr& p : params_) p->zero_grad();
}

void Optimizer::add_masters(std::vector<std::pair<std::string, Tensor*>>& out, size_t i) {
  if (masters_[i].raw() != params_[i]->value.raw())
    out.emplace_back(parameter_name(i) + ".master", &masters_[i]);
}

void Optimizer::enable_ema(double decay, std::vector<std::pair<std::string, Tensor*>> buffers) {
  CHECK(std::isfinite(decay) && decay > 0 && decay < 1,
        who_ << ": the moving average's decay must be in (0, 1), got " << decay);
  CHECK(ema_decay_ == 0, who_ << ": the moving average is already kept");
  CHECK(!table_.built(), who_ << ": the moving average must be asked for before the first step");
  for (const Tensor& m : masters_) param_ema_.push_back(m.clone());
  for (auto& [name, t] : buffers) {
    CHECK(t && t->dtype() == masters_[0].dtype() && t->device() == device(),
          who_ << ": buffer '" << name << "' to average is " << (t ? t->str() : "null")
               << ", expected " << dtype_name(masters_[0].dtype()) << " on "
               << device_name(device()));
    buffers_.push_back(t);
    buffer_ema_.emplace_back(name, t->clone());
  }
  ema_decay_ = decay;
}

void Optimizer::add_averages(std::vector<std::pair<std::string, Tensor*>>& out) {
  for (size_t i = 0; i < param_ema_.size(); i++)
    out.emplace_back(parameter_name(i) + ".ema", &param_ema_[i]);
  for (auto& [name, t] : buffer_ema_) out.emplace_back(name + ".ema", &t);
}

std::vector<Tensor> Optimizer::acc_zeros() const {
  std::vector<Tensor> out;
  for (const Tensor& m : masters_)
    out.push_back(Tensor::zeros(m.shape(), m.dtype(), m.home()));
  return out;
}

std::string Optimizer::parameter_name(size_t i) const {
  const std::string& n = params_[i]->name;
  return n.empty() ? "parameter " + std::to_string(i) : n;
}

// ---- SGD ----

SGD::SGD(std::vector<VarPtr> params, SgdParams h)
    : Optimizer("SGD", std::move(params), h.lr), hp_(h) {
  CHECK(h.momentum >= 0 && h.momentum < 1, "SGD: momentum must be in [0, 1), got " << h.momentum);
  CHECK(h.weight_decay >= 0, "SGD: weight decay must be >= 0, got " << h.weight_decay);
  CHECK(!h.nesterov || h.momentum > 0, "SGD: Nesterov needs a momentum > 0");
  velocity_ = acc_zeros();
}

void SGD::update_cpu(const StepState& s) {
  SgdParams p = hp_;
  p.lr = s.lr;
  const double inv_scale = s.inv_scale;
  for (size_t i = 0; i < params_.size(); i++) {
    Tensor& g = grad(i);
    dispatch_float(g.dtype(), [&](auto tag) {
      using T = decltype(tag);
      using A = acc_t<T>;
      sgd_step_cpu<T>(g.numel(), g.template data<T>(), inv_scale, masters_[i].template data<A>(),
                      velocity_[i].template data<A>(), working<T>(i), p);
    });
  }
}

LaunchCost SGD::update_cost() const {
  return multi_step_gpu_cost(hp_.nesterov ? "multi_nesterov_step" : "multi_sgd_step", totals(), 1,
                             7, true);
}

void SGD::fill_state(size_t i, ParamSlot& s) { s.state1 = velocity_[i].data<float>(); }

void SGD::update_gpu(DeviceStep& ds, const ParamTable& table, const StepFinish& finish) {
#if defined(CUTRAIN_CUDA)
  // the learning rate is ds.lr(), on the device
  multi_sgd_step_gpu(table, ds.inv_scale(), ds.skip(), ds.lr(), hp_, ds.t(), ema_decay(),
                     &finish, ds.context().stream);
#else
  (void)ds, (void)table, (void)finish;
  no_gpu_kernel(who_);  // not reached: a CPU-only build has no cuda tensors
#endif
}

std::vector<std::pair<std::string, Tensor*>> SGD::state_tensors() {
  std::vector<std::pair<std::string, Tensor*>> out;
  for (size_t i = 0; i < params_.size(); i++) {
    add_masters(out, i);
    out.emplace_back(parameter_name(i) + ".momentum", &velocity_[i]);
  }
  add_averages(out);
  return out;
}

// ---- AdamW ----

AdamW::AdamW(std::vector<VarPtr> params, AdamWParams h)
    : Optimizer("AdamW", std::move(params), h.lr), hp_(h) {
  CHECK(h.beta1 >= 0 && h.beta1 < 1, "AdamW: beta1 must be in [0, 1), got " << h.beta1);
  CHECK(h.beta2 >= 0 && h.beta2 < 1, "AdamW: beta2 must be in [0, 1), got " << h.beta2);
  CHECK(h.eps > 0, "AdamW: eps must be positive, got " << h.eps);
  CHECK(h.weight_decay >= 0, "AdamW: weight decay must be >= 0, got " << h.weight_decay);
  m_ = acc_zeros();
  v_ = acc_zeros();
}

void AdamW::update_cpu(const StepState& s) {
  AdamWParams p = hp_;
  p.lr = s.lr;
  const double inv_scale = s.inv_scale;
  for (size_t i = 0; i < params_.size(); i++) {
    Tensor& g = grad(i);
    dispatch_float(g.dtype(), [&](auto tag) {
      using T = decltype(tag);
      using A = acc_t<T>;
      adamw_step_cpu<T>(g.numel(), g.template data<T>(), inv_scale,
                        masters_[i].template data<A>(), m_[i].template data<A>(),
                        v_[i].template data<A>(), working<T>(i), p, s.t);
    });
  }
}

LaunchCost AdamW::update_cost() const {
  return multi_step_gpu_cost("multi_adamw_step", totals(), 2, 15, true);
}

void AdamW::fill_state(size_t i, ParamSlot& s) {
  s.state1 = m_[i].data<float>();
  s.state2 = v_[i].data<float>();
}

void AdamW::update_gpu(DeviceStep& ds, const ParamTable& table, const StepFinish& finish) {
#if defined(CUTRAIN_CUDA)
  // the learning rate is ds.lr(), on the device
  multi_adamw_step_gpu(table, ds.inv_scale(), ds.skip(), ds.lr(), hp_, ds.t(), ema_decay(),
                       &finish, ds.context().stream);
#else
  (void)ds, (void)table, (void)finish;
  no_gpu_kernel(who_);  // not reached: a CPU-only build has no cuda tensors
#endif
}

std::vector<std::pair<std::string, Tensor*>> AdamW::state_tensors() {
  std::vector<std::pair<std::string, Tensor*>> out;
  for (size_t i = 0; i < params_.size(); i++) {
    add_masters(out, i);
    out.emplace_back(parameter_name(i) + ".adam_m", &m_[i]);
    out.emplace_back(parameter_name(i) + ".adam_v", &v_[i]);
  }
  add_averages(out);
  return out;
}

// ---- make_optimizer ----

std::unique_ptr<Optimizer> make_optimizer(const std::string& name, std::vector<VarPtr> params,
                                          double lr, double momentum, double weight_decay) {
  if (name == "sgd" || name == "nesterov")
    return std::make_unique<SGD>(std::move(params),
                                 SgdParams{lr, momentum, weight_decay, name == "nesterov"});
  if (name == "adamw") {
    AdamWParams h;
    h.lr = lr;
    h.weight_decay = weight_decay;
    return std::make_unique<AdamW>(std::move(params), h);
  }
  CHECK(false, "unknown optimizer '" << name << "' (expected sgd, nesterov or adamw)");
  return nullptr;
}

}  // namespace cutrain
