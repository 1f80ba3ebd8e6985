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
//   Tape tape;                                       // on the CPU; Tape tape(gpu) on a GPU
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

  // The gradient buffer, created as zeros the first time something accumulates into it, where
  // the value was made (Tensor::home).
  Tensor& grad_buffer();
  void zero_grad();           // zeroes the buffer if it exists
};
using VarPtr = std::shared_ptr<Var>;

VarPtr make_var(Tensor value, bool requires_grad = false, std::string name = "");

class Tape {
 public:
  // The ops recorded on this tape run in `context` (nn/context.h): their tensors must be on its
  // device; on a GPU, forward and backward are queued on its stream. With enabled = false
  // (evaluation) nothing is recorded and no intermediate is kept alive.
  explicit Tape(const Context& context = Context::cpu(), bool enabled = true)
      : context_(context), enabled_(enabled) {}

  const Context& context() const { return context_; }
  bool enabled() const { return enabled_; }
  // Does an op with these inputs need to record a backward closure? When it does, the
  // inputs are remembered for the record() that follows (every op calls wants() and then,
  // if true, record()), so backward knows which closures add to which gradients.
  bool wants(std::initializer_list<const Var*> inputs);

  // The closure of an op whose output is `output`, which backward runs in reverse order.
  void record(const char* op, const VarPtr& output, std::function<void()> backward);

  // Called during backward() as soon as a variable's gradient is complete: after the last
  // closure that has it as an input (given to wants()) has run. Unset (the default) costs
  // nothing. Data-parallel replicas set it to send each layer's gradients while backward
  // goes on through the layers before it (train/replicas/grad_buckets.h).
  std::function<void(const Var&)> grad_ready;

  // Seeds d(loss) = seed (loss must have one element), runs every recorded closure in reverse,
  // then clears the tape: one backward per forward, as the intermediates are released. The
  // gradients of the ops' outputs (the activations') are zeroed first, all in one buffer per
  // dtype and one memset each, not one each as a closure first asks (grad_buffer), and
  // released after (undefined again); the parameters' persist between backwards and are left
  // as they are.
  void backward(const VarPtr& loss, double seed = 1.0);
  // The general form: seeds d(out) = dout (same shape as out), then as above. dout is copied
  // (into the tape's context); given as a temporary in that context whose storage nothing
  // else shares (Tensor::owns_alone: no copy, reshape or view of it alive), it is taken as it
  // is.
  void backward(const VarPtr& out, const Tensor& dout);
  void backward(const VarPtr& out, Tensor&& dout);

  void clear() { nodes_.clear(); }
  size_t size() const { return nodes_.size(); }

 private:
  struct Node {
    const char* op;
    std::function<void()> backward;
    std::vector<const Var*> inputs;  // those needing a gradient (the closure keeps them alive)
    Var* output;                     // (kept alive by the closure too)
  };
  // The zeroed gradients of every node's output that has none yet, but out's (seeded).
  std::vector<Var*> make_activation_grads(const Var* out);  // the vars it gave a gradient
  Context context_;
  bool enabled_;
  std::vector<Node> nodes_;
  std::vector<const Var*> wanted_;  // the inputs of the last wants() that returned true
};

}  // namespace cutrain
