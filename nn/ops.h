// defines: the differentiable ops. Each one checks its arguments (a clear cutrain::Error
// naming the op and the shapes), computes its output with the kernels of kernels/, and
// records on the tape a closure that adds its gradient contributions to its inputs' grads.
// Each runs in its tape's Context (nn/context.h): its tensors are on the context's device, and
// on a GPU its kernels, forward and backward, are queued on the context's stream.
//
// Shapes (activations NHWC; letters as in kernels/):
//   conv2d      x (N,H,W,C), w (K,R,S,C), b (K) or null        -> (N,P,Q,K)
//   batchnorm2d x (N,H,W,C) or (N,C), gamma/beta (C) acc dtype  -> same as x
//   relu, add   any shape (add: both the same)                  -> same
//   maxpool2d   x (N,H,W,C)                                     -> (N,P,Q,C)
//   global_avgpool x (N,H,W,C)                                  -> (N,C)
//   flatten     x (N,...)                                       -> (N, prod(...))
//   linear      x (N,C), w (K,C), b (K) or null                 -> (N,K)
//   softmax_cross_entropy logits (N,K), labels (N) i32 [, class weights (K) acc dtype]
//                                                               -> (1) in the acc dtype
// All floating inputs of one op share a dtype (f32, f16 or f64), except BatchNorm's
// parameters and statistics and the loss, which are kept in the accumulation dtype
// (f32 for f16 activations): that is the mixed-precision rule.
#pragma once
#include <functional>

#include "nn/autograd.h"
#include "nn/context.h"

namespace cutrain {

// choice: on a GPU, this layer's implementation of each pass (kernels/impl.h); null: the
// context's for all three. The CPU runs its own rule (nn/context.h, conv_impl) either way.
VarPtr conv2d(Tape& tape, const VarPtr& x, const VarPtr& w, const VarPtr& b,
              int stride_h, int stride_w, int pad_h, int pad_w,
              const ConvChoice* choice = nullptr);

// Synchronised BatchNorm's link to the other replicas (--sync-bn; the engine sets it,
// train/replicas/REPLICAS.md): images, this micro-batch's images over every replica (0: not
// synchronised); sum(ctx, data, n, dtype) turns this replica's n per-channel sums (in ctx, the
// op's context) into the sums over every replica, as an all-reduce in ctx's stream order.
struct BatchSync {
  int64_t images = 0;
  std::function<void(const Context& ctx, void* data, int n, DType dtype)> sum;
};

// Running statistics of a BatchNorm layer: not parameters (no gradient), but state that is
// saved in checkpoints. mean/var are (C) in the acc dtype.
struct BatchNormState {
  Tensor running_mean;
  Tensor running_var;
  double momentum = 0.1;  // running = (1 - momentum) * running + momentum * batch
  double eps = 1e-5;
  // One update of the running statistics per optimizer step, however many micro-batches
  // (--accum) and replicas the step has (train/replicas/REPLICAS.md, "BatchNorm"). When defined
  // ((2C), the accumulation dtype, zeros at a step's start), each training forward adds its
  // batch's mean and unbiased variance here instead of updating running_*; the step's end
  // averages them (over the replicas too) and makes the one update
  // (batchnorm_running_update_cpu/gpu). Undefined: each training forward updates running_*
  // itself, which is the same thing when a step is one micro-batch of one replica.
  Tensor step_sums;
  // --sync-bn: set, a training forward takes the statistics of the batch over every replica
  // (sync->images of them), and its backward the gradient's sums likewise
  // (BatchNormSync, kernels/batchnorm.h). Null: this replica's batch alone.
  const BatchSync* sync = nullptr;
};

// training = true: normalise with the batch statistics (biased variance) and update the
// running averages (with the unbiased variance, as PyTorch does). false: use the running ones.
// relu = true: relu(batchnorm2d(...)) as one op, the ReLU fused into BN's kernels forward and
// backward (kernels/batchnorm.h): the same values and bits as the two ops, one pass and one
// gradient buffer fewer each way. The model fuses every `bn` followed by `relu` (nn/model.h).
VarPtr batchnorm2d(Tape& tape, const VarPtr& x, const VarPtr& gamma, const VarPtr& beta,
                   BatchNormState& state, bool training, bool relu = false);

// The one update of state's running statistics from its step_sums (defined), which hold
// 1/scale micro-batches' worth of batch statistics: running = (1 - momentum) * running +
// momentum * sums * scale (batchnorm_running_update_cpu/gpu), in ctx (the state's device). The
// sums are left as they are.
void batchnorm_step_update(const Context& ctx, BatchNormState& state, double scale);

VarPtr relu(Tape& tape, const VarPtr& x);
VarPtr add(Tape& tape, const VarPtr& a, const VarPtr& b);
VarPtr maxpool2d(Tape& tape, const VarPtr& x, int r, int s, int stride_h, int stride_w,
                 int pad_h, int pad_w);
VarPtr global_avgpool(Tape& tape, const VarPtr& x);
VarPtr flatten(Tape& tape, const VarPtr& x);
VarPtr linear(Tape& tape, const VarPtr& x, const VarPtr& w, const VarPtr& b);

// Mean over the batch of the cross-entropy between softmax(logits) and the smoothed target
// q = (1 - smoothing) * onehot(label) + smoothing / K. Labels must lie in [0, K), and keep
// their values until backward: the op keeps the tensor (its storage), not a copy.
// class_weight (K), in the logits' accumulation dtype on their device, or undefined (none):
// each row's cross-entropy times its label's weight, still divided by N (not by the sum of the
// weights: kernels/softmax_xent.h). The op keeps the tensor, so its storage stays put while
// the backward may read it (a CUDA graph captures its address).
VarPtr softmax_cross_entropy(Tape& tape, const VarPtr& logits, const Tensor& labels,
                             double smoothing = 0.0, const Tensor& class_weight = Tensor());

// Number of rows whose largest logit is at the label (ties: the first largest). Not
// differentiable: nothing is recorded. On a GPU the count is read back to the host after the
// work queued on the logits' stream (Tensor::home).
int64_t top1_correct(const Tensor& logits, const Tensor& labels);

// (a + b) / 2, elementwise (kernels/elementwise.h: average_cpu/gpu), in ctx (a GPU's stream),
// a new tensor of a's shape and dtype. Not differentiable: for inference, where test-time
// flips average an image's logits with its mirror's (train/engine/evaluate.h).
Tensor average(const Context& ctx, const Tensor& a, const Tensor& b);

}  // namespace cutrain
