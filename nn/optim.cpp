#include "nn/optim.h"

#include "nn/dispatch.h"

namespace cutrain {

SGD::SGD(std::vector<VarPtr> params, SgdParams h) : hp(h) {
  CHECK(h.lr > 0, "SGD: learning rate must be positive, got " << h.lr);
  CHECK(h.momentum >= 0 && h.momentum < 1, "SGD: momentum must be in [0, 1), got " << h.momentum);
  CHECK(h.weight_decay >= 0, "SGD: weight decay must be >= 0, got " << h.weight_decay);
  for (VarPtr& p : params) {
    CHECK(p && p->requires_grad, "SGD: parameter '" << (p ? p->name : "null")
                                                    << "' does not require a gradient");
    check_cpu("SGD", p->value);
    const DType acc = acc_dtype(p->value.dtype());
    Slot s;
    s.param = p;
    s.master = p->value.dtype() == acc ? p->value : p->value.to(acc);
    s.velocity = Tensor::zeros(p->value.shape(), acc);
    slots_.push_back(std::move(s));
  }
}

bool SGD::step(double loss_scale) {
  CHECK(loss_scale > 0, "SGD: loss scale must be positive, got " << loss_scale);
  const double inv = 1.0 / loss_scale;
  // First decide for the whole model, then update: a skipped step changes nothing at all.
  for (const Slot& s : slots_) {
    if (!s.param->grad.defined()) continue;  // unused this step: zero gradient
    bool finite = true;
    dispatch_float(s.param->value.dtype(), [&](auto tag) {
      using T = decltype(tag);
      finite = grads_finite_cpu<T>(s.param->grad.numel(), s.param->grad.template data<T>(), inv);
    });
    if (!finite) return false;
  }
  for (Slot& s : slots_) {
    Tensor& g = s.param->grad_buffer();
    dispatch_float(s.param->value.dtype(), [&](auto tag) {
      using T = decltype(tag);
      using A = acc_t<T>;
      const bool separate = s.master.raw() != s.param->value.raw();
      sgd_step_cpu<T>(g.numel(), g.template data<T>(), inv, s.master.template data<A>(),
                      s.velocity.template data<A>(),
                      separate ? s.param->value.template data<T>() : nullptr, hp);
    });
  }
  return true;
}

void SGD::zero_grad() {
  for (Slot& s : slots_) s.param->zero_grad();
}

}  // namespace cutrain
