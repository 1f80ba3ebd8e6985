// relu, add, flatten, linear: the op pattern in its plainest form.
//   1. check the arguments, 2. allocate the output, 3. run the forward kernel,
//   4. if any input needs a gradient, record a closure that accumulates into the inputs' grads.
#include "kernels/elementwise.h"
#include "kernels/linear.h"
#include "nn/dispatch.h"
#include "nn/ops.h"

namespace cutrain {

namespace {
// dx += dy in context ctx: the backward of add and flatten.
void accumulate_into(const Context& ctx, int64_t n, Tensor& dy, Tensor& dx) {
  const bool gpu = op_on_gpu(ctx, "accumulate", {&dy, &dx});
  dispatch_float(dx.dtype(), [&](auto tag) {
    using T = decltype(tag);
    note_launch(ctx.plan, accumulate_gpu_cost(n, sizeof(T)));
    if (gpu)
      ON_GPU("accumulate", T, accumulate_gpu<T>(n, dy.data<T>(), dx.data<T>(), ctx.stream));
    else
      accumulate_cpu<T>(n, dy.data<T>(), dx.data<T>());
  });
}
}  // namespace

VarPtr relu(Tape& tape, const VarPtr& x) {
  const Context ctx = tape.context();
  const Tensor& X = x->value;
  const bool gpu = op_on_gpu(ctx, "relu", {&X});
  VarPtr y = make_var(Tensor::empty(X.shape(), X.dtype(), ctx), x->requires_grad);
  dispatch_float(X.dtype(), [&](auto tag) {
    using T = decltype(tag);
    note_launch(ctx.plan, relu_forward_gpu_cost(X.numel(), sizeof(T)));
    if (gpu)
      ON_GPU("relu", T, relu_forward_gpu<T>(X.numel(), X.data<T>(), y->value.data<T>(),
                                            ctx.stream));
    else
      relu_forward_cpu<T>(X.numel(), X.data<T>(), y->value.data<T>());
  });
  if (tape.wants({x.get()}))
    tape.record("relu", y, [x, y, gpu, ctx] {
      dispatch_float(y->value.dtype(), [&](auto tag) {
        using T = decltype(tag);
        const int64_t n = y->value.numel();
        const T* yv = y->value.data<T>();
        const T* dy = y->grad_buffer().data<T>();
        T* dx = x->grad_buffer().data<T>();
        note_launch(ctx.plan, relu_backward_gpu_cost(n, sizeof(T)));
        if (gpu)
          ON_GPU("relu", T, relu_backward_gpu<T>(n, yv, dy, dx, ctx.stream));
        else
          relu_backward_cpu<T>(n, yv, dy, dx);
      });
    });
  return y;
}

VarPtr add(Tape& tape, const VarPtr& a, const VarPtr& b) {
  const Context ctx = tape.context();
  const bool gpu = op_on_gpu(ctx, "add", {&a->value, &b->value});
  check_same_dtype("add", a->value, b->value);
  CHECK(a->value.shape() == b->value.shape(), "add: shapes differ: "
                                                  << shape_str(a->value.shape()) << " and "
                                                  << shape_str(b->value.shape()));
  const Tensor &A = a->value, &B = b->value;
  VarPtr y = make_var(Tensor::empty(A.shape(), A.dtype(), ctx),
                      a->requires_grad || b->requires_grad);
  dispatch_float(A.dtype(), [&](auto tag) {
    using T = decltype(tag);
    note_launch(ctx.plan, add_forward_gpu_cost(A.numel(), sizeof(T)));
    if (gpu)
      ON_GPU("add", T, add_forward_gpu<T>(A.numel(), A.data<T>(), B.data<T>(),
                                          y->value.data<T>(), ctx.stream));
    else
      add_forward_cpu<T>(A.numel(), A.data<T>(), B.data<T>(), y->value.data<T>());
  });
  if (tape.wants({a.get(), b.get()}))
    tape.record("add", y, [a, b, y, ctx] {
      for (const VarPtr& in : {a, b})
        if (in->requires_grad) accumulate_into(ctx, y->value.numel(), y->grad_buffer(), in->grad_buffer());
    });
  return y;
}

Tensor average(const Context& ctx, const Tensor& a, const Tensor& b) {
  const bool gpu = op_on_gpu(ctx, "average", {&a, &b});
  check_same_dtype("average", a, b);
  CHECK(a.shape() == b.shape(), "average: shapes differ: " << shape_str(a.shape()) << " and "
                                                           << shape_str(b.shape()));
  Tensor y = Tensor::empty(a.shape(), a.dtype(), ctx);
  dispatch_float(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    note_launch(ctx.plan, average_gpu_cost(a.numel(), sizeof(T)));
    if (gpu)
      ON_GPU("average", T, average_gpu<T>(a.numel(), a.data<T>(), b.data<T>(), y.data<T>(),
                                          ctx.stream));
    else
      average_cpu<T>(a.numel(), a.data<T>(), b.data<T>(), y.data<T>());
  });
  return y;
}

VarPtr flatten(Tape& tape, const VarPtr& x) {
  const Context ctx = tape.context();
  const Tensor& X = x->value;
  CHECK(X.rank() >= 1, "flatten: needs a batch dimension, got " << X.str());
  const int N = X.dim(0);
  const int rest = N > 0 ? int(X.numel() / N) : 0;
  // The output shares x's storage (a view); its gradient is a separate buffer.
  VarPtr y = make_var(X.reshape({N, rest}), x->requires_grad);
  if (tape.wants({x.get()}))
    tape.record("flatten", y, [x, y, ctx] {
      accumulate_into(ctx, y->value.numel(), y->grad_buffer(), x->grad_buffer());
    });
  return y;
}

VarPtr linear(Tape& tape, const VarPtr& x, const VarPtr& w, const VarPtr& b) {
  const Context ctx = tape.context();
  const Tensor &X = x->value, &Wt = w->value;
  const bool gpu = op_on_gpu(ctx, "linear", {&X, &Wt, b ? &b->value : nullptr});
  CHECK(X.rank() == 2, "linear: x must be (N,C), got " << X.str());
  CHECK(Wt.rank() == 2, "linear: w must be (K,C), got " << Wt.str());
  CHECK(Wt.dim(1) == X.dim(1), "linear: x " << shape_str(X.shape()) << " has C = " << X.dim(1)
                                            << " but w " << shape_str(Wt.shape())
                                            << " expects C = " << Wt.dim(1));
  check_same_dtype("linear", X, Wt);
  const int N = X.dim(0), C = X.dim(1), K = Wt.dim(0);
  if (b) {
    check_same_dtype("linear", X, b->value);
    CHECK(b->value.shape() == Shape{K},
          "linear: bias must be (" << K << "), got " << shape_str(b->value.shape()));
  }
  const bool rg = x->requires_grad || w->requires_grad || (b && b->requires_grad);
  VarPtr y = make_var(Tensor::empty({N, K}, X.dtype(), ctx), rg);  // (N,K)
  dispatch_float(X.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* bv = b ? b->value.data<T>() : nullptr;
    note_launch(ctx.plan, linear_forward_gpu_cost(gpu_linear_impl<T>(ctx), N, C, K, sizeof(T),
                                                  bv != nullptr));
    if (gpu)
      ON_GPU("linear", T, linear_forward_gpu<T>(linear_impl<T>(ctx), N, C, K, X.data<T>(),
                                                Wt.data<T>(), bv, y->value.data<T>(),
                                                ctx.stream));
    else
      linear_forward_cpu<T>(linear_impl<T>(ctx), N, C, K, X.data<T>(), Wt.data<T>(), bv,
                            y->value.data<T>());
  });
  if (tape.wants({x.get(), w.get(), b.get()}))
    tape.record("linear", y, [x, w, b, y, N, C, K, gpu, ctx] {
      dispatch_float(y->value.dtype(), [&](auto tag) {
        using T = decltype(tag);
        const T* xv = x->value.data<T>();
        const T* wv = w->value.data<T>();
        const T* dy = y->grad_buffer().data<T>();
        T* dx = x->requires_grad ? x->grad_buffer().data<T>() : nullptr;
        T* dw = w->requires_grad ? w->grad_buffer().data<T>() : nullptr;
        T* db = b && b->requires_grad ? b->grad_buffer().data<T>() : nullptr;
        note_launch(ctx.plan, linear_backward_gpu_cost(gpu_linear_impl<T>(ctx), N, C, K, sizeof(T),
                                                       dx != nullptr, dw != nullptr,
                                                       db != nullptr));
        if (gpu)
          ON_GPU("linear", T, linear_backward_gpu<T>(linear_impl<T>(ctx), N, C, K, xv, wv, dy, dx,
                                                     dw, db, ctx.stream));
        else
          linear_backward_cpu<T>(linear_impl<T>(ctx), N, C, K, xv, wv, dy, dx, dw, db);
      });
    });
  return y;
}

}  // namespace cutrain
