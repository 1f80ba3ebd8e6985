// softmax_cross_entropy and top1_correct: the op pattern of ops_basic.cpp over
// kernels/softmax_xent.h. The loss is kept in the accumulation dtype (f32 for f16 logits).
#include "kernels/softmax_xent.h"
#include "nn/dispatch.h"
#include "nn/ops.h"

namespace cutrain {

namespace {
// logits (N,K) floating, labels (N) i32, both on one device. Labels on the CPU are checked
// against [0, K) here; labels on a GPU cannot be without a copy back, so whoever put them
// there checked them on the host (the loader's labels come from a checked image list), and the
// GPU kernels do not read out of bounds on a bad one (kernels/softmax_xent.h).
bool check_logits_labels(const Context& ctx, const char* op, const Tensor& logits,
                         const Tensor& labels, double smoothing) {
  const bool gpu = op_on_gpu(ctx, op, {&logits, &labels});
  CHECK(logits.rank() == 2, op << ": logits must be (N,K), got " << logits.str());
  CHECK(logits.dtype() != DType::i32, op << ": logits must be floating, got " << logits.str());
  CHECK(labels.dtype() == DType::i32, op << ": labels must be i32, got " << labels.str());
  CHECK(labels.shape() == Shape{logits.dim(0)},
        op << ": labels must be (N) = (" << logits.dim(0) << ") for logits "
           << shape_str(logits.shape()) << ", got " << shape_str(labels.shape()));
  if (!gpu)
    softmax_xent_check(logits.dim(0), logits.dim(1), labels.data<int32_t>(), smoothing, op);
  return gpu;
}
}  // namespace

VarPtr softmax_cross_entropy(Tape& tape, const VarPtr& logits, const Tensor& labels,
                             double smoothing, const Tensor& class_weight) {
  const Context ctx = tape.context();
  const char* op = "softmax_cross_entropy";
  const Tensor& Z = logits->value;  // (N,K)
  const bool gpu = check_logits_labels(ctx, op, Z, labels, smoothing);
  const int N = Z.dim(0), K = Z.dim(1);
  const Tensor w = class_weight;  // (K) in the acc dtype, or undefined: no weights
  if (w.defined()) {
    CHECK(w.shape() == Shape{K} && w.dtype() == acc_dtype(Z.dtype()) && w.device() == ctx.device,
          op << ": class weights must be (" << K << ") " << dtype_name(acc_dtype(Z.dtype()))
             << " on the logits' device for logits " << Z.str() << ", got " << w.str());
  }
  VarPtr loss = make_var(Tensor::empty({1}, acc_dtype(Z.dtype()), ctx),
                         logits->requires_grad);  // (1) f32 for f16 logits
  dispatch_float(Z.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const A* wk = w.defined() ? w.data<A>() : nullptr;
    note_launch(ctx.plan, softmax_xent_forward_gpu_cost(N, K, sizeof(T), wk != nullptr));
    if (gpu)
      ON_GPU(op, T, softmax_xent_forward_gpu<T>(N, K, Z.data<T>(), labels.data<int32_t>(),
                                                float(smoothing), loss->value.data<A>(),
                                                ctx.stream, wk));
    else
      softmax_xent_forward_cpu<T>(N, K, Z.data<T>(), labels.data<int32_t>(), A(smoothing),
                                  loss->value.data<A>(), wk);
  });
  if (tape.wants({logits.get()})) {
    // The labels and the weights are kept, not copied: they must keep their values until
    // backward (ops.h). Training's labels are the micro-batch's own copy (model_input).
    const Tensor y = labels;
    tape.record(op, loss, [logits, loss, y, w, smoothing, N, K, gpu, op, ctx] {
      dispatch_float(logits->value.dtype(), [&](auto tag) {
        using T = decltype(tag);
        using A = acc_t<T>;
        const T* z = logits->value.data<T>();
        T* dz = logits->grad_buffer().data<T>();
        const A* wk = w.defined() ? w.data<A>() : nullptr;
        // The seed: 1, or the loss scale. On a GPU it stays there: the kernel reads it.
        const A* dloss = loss->grad_buffer().data<A>();
        note_launch(ctx.plan, softmax_xent_backward_gpu_cost(N, K, sizeof(T), wk != nullptr));
        if (gpu)
          ON_GPU(op, T, softmax_xent_backward_gpu<T>(N, K, z, y.data<int32_t>(), float(smoothing),
                                                     dloss, dz, ctx.stream, wk));
        else
          softmax_xent_backward_cpu<T>(N, K, z, y.data<int32_t>(), A(smoothing), dloss[0], dz,
                                       wk);
      });
    });
  }
  return loss;
}

int64_t top1_correct(const Tensor& logits, const Tensor& labels) {
  const Context ctx = logits.home();  // a read on the host: after the logits' stream
  const bool gpu = check_logits_labels(ctx, "top1_correct", logits, labels, 0.0);
  const int N = logits.dim(0), K = logits.dim(1);
  int64_t correct = 0;
  dispatch_float(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (gpu) {
      // The count comes back to the host: evaluation reads it once per batch.
      ON_GPU("top1_correct", T, {
        const cudaStream_t st = ctx.stream;
        DeviceBuffer count(sizeof(int64_t), ctx.gpu, st);  // the kernel adds to it
        memset_async(count.data(), 0, sizeof(int64_t), st);
        top1_correct_gpu<T>(N, K, logits.data<T>(), labels.data<int32_t>(),
                            static_cast<int64_t*>(count.data()), st);
        copy_async(&correct, count.data(), sizeof(correct), st);
        Event done;
        done.record(st);
        done.synchronize();
      });
    } else {
      correct = top1_correct_cpu<T>(N, K, logits.data<T>(), labels.data<int32_t>());
    }
  });
  return correct;
}

}  // namespace cutrain
