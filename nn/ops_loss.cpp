// softmax_cross_entropy and top1_correct: the op pattern of ops_basic.cpp over
// kernels/softmax_xent.h. The loss is kept in the accumulation dtype (f32 for f16 logits).
#include "kernels/softmax_xent.h"
#include "nn/dispatch.h"
#include "nn/ops.h"

namespace cutrain {

namespace {
// logits (N,K) floating, labels (N) i32, both on the CPU.
void check_logits_labels(const char* op, const Tensor& logits, const Tensor& labels) {
  check_cpu(op, logits);
  check_cpu(op, labels);
  CHECK(logits.rank() == 2, op << ": logits must be (N,K), got " << logits.str());
  CHECK(logits.dtype() != DType::i32, op << ": logits must be floating, got " << logits.str());
  CHECK(labels.dtype() == DType::i32, op << ": labels must be i32, got " << labels.str());
  CHECK(labels.shape() == Shape{logits.dim(0)},
        op << ": labels must be (N) = (" << logits.dim(0) << ") for logits "
           << shape_str(logits.shape()) << ", got " << shape_str(labels.shape()));
}
}  // namespace

VarPtr softmax_cross_entropy(Tape& tape, const VarPtr& logits, const Tensor& labels,
                             double smoothing) {
  const char* op = "softmax_cross_entropy";
  const Tensor& Z = logits->value;  // (N,K)
  check_logits_labels(op, Z, labels);
  const int N = Z.dim(0), K = Z.dim(1);
  softmax_xent_check(N, K, labels.data<int32_t>(), smoothing, op);  // here, to name the op
  VarPtr loss = make_var(Tensor::empty({1}, acc_dtype(Z.dtype())), logits->requires_grad);
  dispatch_float(Z.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    softmax_xent_forward_cpu<T>(N, K, Z.data<T>(), labels.data<int32_t>(), A(smoothing),
                                loss->value.data<A>());
  });
  if (tape.wants({logits.get()})) {
    // A copy: the caller may refill its label buffer with the next batch before backward.
    const Tensor y = labels.clone();
    tape.record(op, [logits, loss, y, smoothing, N, K] {
      dispatch_float(logits->value.dtype(), [&](auto tag) {
        using T = decltype(tag);
        using A = acc_t<T>;
        const A dloss = loss->grad_buffer().data<A>()[0];  // the seed: 1, or the loss scale
        softmax_xent_backward_cpu<T>(N, K, logits->value.data<T>(), y.data<int32_t>(),
                                     A(smoothing), dloss, logits->grad_buffer().data<T>());
      });
    });
  }
  return loss;
}

int64_t top1_correct(const Tensor& logits, const Tensor& labels) {
  check_logits_labels("top1_correct", logits, labels);
  softmax_xent_check(logits.dim(0), logits.dim(1), labels.data<int32_t>(), 0.0, "top1_correct");
  int64_t correct = 0;
  dispatch_float(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    correct = top1_correct_cpu<T>(logits.dim(0), logits.dim(1), logits.data<T>(),
                                  labels.data<int32_t>());
  });
  return correct;
}

}  // namespace cutrain
