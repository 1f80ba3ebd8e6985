// relu, add, flatten, linear: the op pattern in its plainest form.
//   1. check the arguments, 2. allocate the output, 3. run the forward kernel,
//   4. if any input needs a gradient, record a closure that accumulates into the inputs' grads.
#include "kernels/elementwise.h"
#include "kernels/linear.h"
#include "nn/dispatch.h"
#include "nn/ops.h"

namespace cutrain {

VarPtr relu(Tape& tape, const VarPtr& x) {
  check_cpu("relu", x->value);
  const Tensor& X = x->value;
  VarPtr y = make_var(Tensor::empty(X.shape(), X.dtype()), x->requires_grad);
  dispatch_float(X.dtype(), [&](auto tag) {
    using T = decltype(tag);
    relu_forward_cpu<T>(X.numel(), X.data<T>(), y->value.data<T>());
  });
  if (tape.wants({x.get()}))
    tape.record("relu", [x, y] {
      dispatch_float(y->value.dtype(), [&](auto tag) {
        using T = decltype(tag);
        relu_backward_cpu<T>(y->value.numel(), y->value.data<T>(), y->grad_buffer().data<T>(),
                             x->grad_buffer().data<T>());
      });
    });
  return y;
}

VarPtr add(Tape& tape, const VarPtr& a, const VarPtr& b) {
  check_cpu("add", a->value);
  check_cpu("add", b->value);
  check_same_dtype("add", a->value, b->value);
  CHECK(a->value.shape() == b->value.shape(), "add: shapes differ: "
                                                  << shape_str(a->value.shape()) << " and "
                                                  << shape_str(b->value.shape()));
  const Tensor &A = a->value, &B = b->value;
  VarPtr y = make_var(Tensor::empty(A.shape(), A.dtype()), a->requires_grad || b->requires_grad);
  dispatch_float(A.dtype(), [&](auto tag) {
    using T = decltype(tag);
    add_forward_cpu<T>(A.numel(), A.data<T>(), B.data<T>(), y->value.data<T>());
  });
  if (tape.wants({a.get(), b.get()}))
    tape.record("add", [a, b, y] {
      dispatch_float(y->value.dtype(), [&](auto tag) {
        using T = decltype(tag);
        const T* dy = y->grad_buffer().data<T>();
        if (a->requires_grad) accumulate_cpu<T>(y->value.numel(), dy, a->grad_buffer().data<T>());
        if (b->requires_grad) accumulate_cpu<T>(y->value.numel(), dy, b->grad_buffer().data<T>());
      });
    });
  return y;
}

VarPtr flatten(Tape& tape, const VarPtr& x) {
  const Tensor& X = x->value;
  CHECK(X.rank() >= 1, "flatten: needs a batch dimension, got " << X.str());
  const int N = X.dim(0);
  const int rest = N > 0 ? int(X.numel() / N) : 0;
  // The output shares x's storage (a view); its gradient is a separate buffer.
  VarPtr y = make_var(X.reshape({N, rest}), x->requires_grad);
  if (tape.wants({x.get()}))
    tape.record("flatten", [x, y] {
      dispatch_float(y->value.dtype(), [&](auto tag) {
        using T = decltype(tag);
        accumulate_cpu<T>(y->value.numel(), y->grad_buffer().data<T>(),
                          x->grad_buffer().data<T>());
      });
    });
  return y;
}

VarPtr linear(Tape& tape, const VarPtr& x, const VarPtr& w, const VarPtr& b) {
  const Tensor &X = x->value, &Wt = w->value;
  check_cpu("linear", X);
  check_cpu("linear", Wt);
  CHECK(X.rank() == 2, "linear: x must be (N,C), got " << X.str());
  CHECK(Wt.rank() == 2, "linear: w must be (K,C), got " << Wt.str());
  CHECK(Wt.dim(1) == X.dim(1), "linear: x " << shape_str(X.shape()) << " has C = " << X.dim(1)
                                            << " but w " << shape_str(Wt.shape())
                                            << " expects C = " << Wt.dim(1));
  check_same_dtype("linear", X, Wt);
  const int N = X.dim(0), C = X.dim(1), K = Wt.dim(0);
  if (b) {
    check_cpu("linear", b->value);
    check_same_dtype("linear", X, b->value);
    CHECK(b->value.shape() == Shape{K},
          "linear: bias must be (" << K << "), got " << shape_str(b->value.shape()));
  }
  const bool rg = x->requires_grad || w->requires_grad || (b && b->requires_grad);
  VarPtr y = make_var(Tensor::empty({N, K}, X.dtype()), rg);
  dispatch_float(X.dtype(), [&](auto tag) {
    using T = decltype(tag);
    linear_forward_cpu<T>(N, C, K, X.data<T>(), Wt.data<T>(), b ? b->value.data<T>() : nullptr,
                          y->value.data<T>());
  });
  if (tape.wants({x.get(), w.get(), b.get()}))
    tape.record("linear", [x, w, b, y, N, C, K] {
      dispatch_float(y->value.dtype(), [&](auto tag) {
        using T = decltype(tag);
        linear_backward_cpu<T>(N, C, K, x->value.data<T>(), w->value.data<T>(),
                               y->grad_buffer().data<T>(),
                               x->requires_grad ? x->grad_buffer().data<T>() : nullptr,
                               w->requires_grad ? w->grad_buffer().data<T>() : nullptr,
                               b && b->requires_grad ? b->grad_buffer().data<T>() : nullptr);
      });
    });
  return y;
}

}  // namespace cutrain
