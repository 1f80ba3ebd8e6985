#include "nn/autograd.h"

#include <climits>
#include <map>
#include <unordered_map>
#include <utility>

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

void Tape::record(const char* op, const VarPtr& output, std::function<void()> backward) {
  if (enabled_) nodes_.push_back(Node{op, std::move(backward), std::move(wanted_), output.get()});
  wanted_.clear();
}

std::vector<Var*> Tape::make_activation_grads(const Var* out) {
  // Each gradient starts on a 128-byte boundary (the kernels' vector loads want 16); a buffer
  // holds at most INT_MAX elements (a Shape's), so a huge step takes a few.
  constexpr size_t kAlign = 128;
  std::map<DType, std::vector<Var*>> by_dtype;
  for (const Node& n : nodes_)
    if (n.output != out && !n.output->grad.defined())
      by_dtype[n.output->value.dtype()].push_back(n.output);
  for (auto& [dtype, vars] : by_dtype) {
    const int64_t align = int64_t(kAlign / dtype_size(dtype));
    size_t first = 0;
    while (first < vars.size()) {
      std::vector<int64_t> at;
      int64_t total = 0;
      size_t end = first;
      for (; end < vars.size(); end++) {
        const int64_t n = (vars[end]->value.numel() + align - 1) / align * align;
        if (end > first && total + n > INT_MAX) break;
        at.push_back(total);
        total += n;
      }
      const Tensor all = Tensor::zeros({int(total)}, dtype, context_);  // one memset
      for (size_t i = first; i < end; i++)
        vars[i]->grad = all.flat_view(at[i - first], vars[i]->value.shape());
      first = end;
    }
  }
  std::vector<Var*> made;
  for (auto& [dtype, vars] : by_dtype) made.insert(made.end(), vars.begin(), vars.end());
  return made;
}

void Tape::backward(const VarPtr& loss, double seed) {
  CHECK(loss && loss->value.numel() == 1,
        "backward needs a one-element loss, got " << (loss ? loss->value.str() : "null"));
  Tensor seed_t = Tensor::empty(loss->value.shape(), loss->value.dtype());
  seed_t.fill_(seed);
  backward(loss, std::move(seed_t));
}

void Tape::backward(const VarPtr& out, const Tensor& dout) {
  Tensor shared = dout;  // shares dout's storage: the overload below copies it
  backward(out, std::move(shared));
}

void Tape::backward(const VarPtr& out, Tensor&& dout) {
  CHECK(enabled_, "backward on a tape that records nothing (created with enabled = false)");
  CHECK(out->requires_grad, "backward: the output does not depend on anything that needs a gradient");
  CHECK(dout.shape() == out->value.shape() && dout.dtype() == out->value.dtype(),
        "backward: seed " << dout.str() << " does not match output " << out->value.str());
  // Taken as it is only when nothing else sees its storage (backward may add into out's
  // gradient); otherwise a copy of its own.
  if (dout.device() != context_.device) out->grad = dout.to(context_);
  else if (dout.owns_alone()) out->grad = std::move(dout);
  else out->grad = dout.clone();
  const std::vector<Var*> activations = make_activation_grads(out.get());
  if (!grad_ready) {
    for (size_t i = nodes_.size(); i-- > 0;) nodes_[i].backward();
  } else {
    // How many closures still have to add to each input's gradient; at zero it is complete.
    std::unordered_map<const Var*, int> pending;
    for (const Node& n : nodes_)
      for (const Var* v : n.inputs) pending[v]++;
    for (size_t i = nodes_.size(); i-- > 0;) {
      nodes_[i].backward();
      for (const Var* v : nodes_[i].inputs)
        if (--pending[v] == 0) grad_ready(*v);
    }
  }
  // The activations' gradients served backward alone. Views of one buffer: an output kept
  // after the step (the logits, for the metrics) would otherwise keep all of it alive.
  // (Before the nodes go: they may hold the last reference to an output.)
  for (Var* v : activations) v->grad = Tensor();
  nodes_.clear();
}

}  // namespace cutrain
