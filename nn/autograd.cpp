#include "nn/autograd.h"

#include "kernels/check.h"

namespace cutrain {

Tensor& Var::grad_buffer() {
  if (!grad.defined()) grad = Tensor::zeros(value.shape(), value.dtype(), value.device());
  return grad;
}

void Var::zero_grad() {
  if (grad.defined()) grad.zero_();
}

VarPtr make_var(Tensor value, bool requires_grad, std::string name) {
  auto v = std::make_shared<Var>();
  v->value = std::move(value);
  v->requires_grad = requires_grad;
  v->name = std::move(name);
  return v;
}

bool Tape::wants(std::initializer_list<const Var*> inputs) const {
  if (!enabled_) return false;
  for (const Var* v : inputs)
    if (v && v->requires_grad) return true;
  return false;
}

void Tape::record(const char* op, std::function<void()> backward) {
  if (enabled_) nodes_.push_back(Node{op, std::move(backward)});
}

void Tape::backward(const VarPtr& loss, double seed) {
  CHECK(loss && loss->value.numel() == 1,
        "backward needs a one-element loss, got " << (loss ? loss->value.str() : "null"));
  Tensor seed_t = Tensor::empty(loss->value.shape(), loss->value.dtype());
  seed_t.fill_(seed);
  backward(loss, seed_t);
}

void Tape::backward(const VarPtr& out, const Tensor& dout) {
  CHECK(enabled_, "backward on a tape that records nothing (created with enabled = false)");
  CHECK(out->requires_grad, "backward: the output does not depend on anything that needs a gradient");
  CHECK(dout.shape() == out->value.shape() && dout.dtype() == out->value.dtype(),
        "backward: seed " << dout.str() << " does not match output " << out->value.str());
  out->grad = dout.to(out->value.device()).clone();
  for (size_t i = nodes_.size(); i-- > 0;) nodes_[i].backward();
  nodes_.clear();
}

}  // namespace cutrain
