// defines: Var (a tensor with its gradient), Tape (the recorded backward closures) and
// backward(loss, seed).
//
// How it works (micrograd, with tensors): each differentiable op computes its output and, if
// any input needs a gradient, appends one closure to the tape. The closure knows its inputs
// and output and *adds* its contribution to the inputs' grad tensors (dx += ...). Because ops
// are recorded in the order they ran, running the closures in reverse is a valid reverse
// topological order: when a closure runs, every use of its output has already contributed
// to the output's gradient. Adding instead of assigning is what makes a tensor used twice
// (a residual connection) and gradient accumulation over micro-batches come out right.
//
//   Tape tape;
//   VarPtr y = relu(tape, conv2d(tape, x, w, b, p));
//   VarPtr loss = softmax_cross_entropy(tape, y, labels, 0.1);
//   tape.backward(loss, 65536.0);   // seed = the loss scale; w->grad now holds dloss/dw * seed
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nn/tensor.h"

namespace cutrain {

struct Var {
  Tensor value;
  Tensor grad;                // same shape, dtype and device as value; allocated on first use
  bool requires_grad = false;
  std::string name;           // parameters are named ("conv1.w") for tables and messages

  // The gradient buffer, created as zeros the first time something accumulates into it.
  Tensor& grad_buffer();
  void zero_grad();           // zeroes the buffer if it exists
};
using VarPtr = std::shared_ptr<Var>;

VarPtr make_var(Tensor value, bool requires_grad = false, std::string name = "");

class Tape {
 public:
  // With enabled = false (evaluation) nothing is recorded and no intermediate is kept alive.
  explicit Tape(bool enabled = true) : enabled_(enabled) {}

  bool enabled() const { return enabled_; }
  // Does an op with these inputs need to record a backward closure?
  bool wants(std::initializer_list<const Var*> inputs) const;

  void record(const char* op, std::function<void()> backward);

  // Seeds d(loss) = seed (loss must have one element), runs every recorded closure in reverse,
  // then clears the tape: one backward per forward, as the intermediates are released.
  void backward(const VarPtr& loss, double seed = 1.0);
  // The general form: seeds d(out) = dout (same shape as out), then as above.
  void backward(const VarPtr& out, const Tensor& dout);

  void clear() { nodes_.clear(); }
  size_t size() const { return nodes_.size(); }

 private:
  struct Node {
    const char* op;
    std::function<void()> backward;
  };
  bool enabled_;
  std::vector<Node> nodes_;
};

}  // namespace cutrain
