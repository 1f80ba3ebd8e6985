#include "nn/autograd.h"

#include <unordered_map>

#include "kernels/check.h"

namespace cutrain {

Tensor& Var::grad_buffer() {
  if (!grad.defined()) grad = Tensor::zeros(value.shape(), value.dtype(), value.home());
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

bool Tape::wants(std::initializer_list<const Var*> inputs) {
  wanted_.clear();
  if (!enabled_) return false;
  for (const Var* v : inputs)
    if (v && v->requires_grad) wanted_.push_back(v);
  return !wanted_.empty();
}

void Tape::record(const char* op, std::function<void()> backward) {
  if (enabled_) nodes_.push_back(Node{op, std::move(backward), std::move(wanted_)});
  wanted_.clear();
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
  out->grad = dout.to(context_).clone();
  if (!grad_ready) {
    for (size_t i = nodes_.size(); i-- > 0;) nodes_[i].backward();
    nodes_.clear();
    return;
  }
  // How many closures still have to add to each input's gradient; at zero it is complete.
  std::unordered_map<const Var*, int> pending;
  for (const Node& n : nodes_)
    for (const Var* v : n.inputs) pending[v]++;
  for (size_t i = nodes_.size(); i-- > 0;) {
    nodes_[i].backward();
    for (const Var* v : nodes_[i].inputs)
      if (--pending[v] == 0) grad_ready(*v);
  }
  nodes_.clear();
}

}  // namespace cutrain
