// conv2d as a differentiable op, in the pattern of ops_basic.cpp:
//   1. check the arguments, 2. allocate the output, 3. run the forward kernel,
//   4. if any input needs a gradient, record a closure that accumulates into the inputs' grads.
#include "kernels/conv2d.h"
#include "nn/dispatch.h"
#include "nn/ops.h"

namespace cutrain {

VarPtr conv2d(Tape& tape, const VarPtr& x, const VarPtr& w, const VarPtr& b,
              int stride_h, int stride_w, int pad_h, int pad_w, const ConvChoice* choice) {
  const Context ctx = tape.context();
  // Each pass's implementation on a GPU: the layer's choice, else the context's.
  const ConvChoice on_gpu = choice ? *choice : ConvChoice{ctx.conv, ctx.conv, ctx.conv};
  const Tensor &X = x->value, &Wt = w->value;  // (N,H,W,C), (K,R,S,C)
  const bool gpu = op_on_gpu(ctx, "conv2d", {&X, &Wt, b ? &b->value : nullptr});
  CHECK(X.rank() == 4, "conv2d: x must be (N,H,W,C), got " << X.str());
  CHECK(Wt.rank() == 4, "conv2d: w must be (K,R,S,C), got " << Wt.str());
  CHECK(Wt.dim(3) == X.dim(3), "conv2d: x " << shape_str(X.shape()) << " has C = " << X.dim(3)
                                            << " but w " << shape_str(Wt.shape())
                                            << " expects C = " << Wt.dim(3));
  check_same_dtype("conv2d", X, Wt);
  Conv2dShape s;
  s.N = X.dim(0), s.H = X.dim(1), s.W = X.dim(2), s.C = X.dim(3);
  s.K = Wt.dim(0), s.R = Wt.dim(1), s.S = Wt.dim(2);
  s.stride_h = stride_h, s.stride_w = stride_w, s.pad_h = pad_h, s.pad_w = pad_w;
  if (b) {
    check_same_dtype("conv2d", X, b->value);
    CHECK(b->value.shape() == Shape{s.K},
          "conv2d: bias must be (" << s.K << "), got " << shape_str(b->value.shape()));
  }
  conv2d_check_shape(s);  // sizes, stride, padding, filter fits the padded input

  const bool rg = x->requires_grad || w->requires_grad || (b && b->requires_grad);
  VarPtr y = make_var(Tensor::empty({s.N, s.P(), s.Q(), s.K}, X.dtype(), ctx),
                      rg);  // (N,P,Q,K)
  dispatch_float(X.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* bv = b ? b->value.data<T>() : nullptr;
    const ConvImpl fwd = gpu_conv_impl<T>(on_gpu.forward);
    note_launch(ctx.plan, conv2d_forward_gpu_cost(fwd, s, sizeof(T), bv != nullptr));
    if (gpu)
      ON_GPU("conv2d", T, conv2d_forward_gpu<T>(fwd, s, X.data<T>(), Wt.data<T>(), bv,
                                                y->value.data<T>(), ctx.stream));
    else
      conv2d_forward_cpu<T>(conv_impl<T>(ctx), s, X.data<T>(), Wt.data<T>(), bv,
                            y->value.data<T>());
  });
  if (tape.wants({x.get(), w.get(), b.get()}))
    tape.record("conv2d", y, [x, w, b, y, s, gpu, ctx, on_gpu] {
      dispatch_float(y->value.dtype(), [&](auto tag) {
        using T = decltype(tag);
        const T* dy = y->grad_buffer().data<T>();
        const T* wv = w->value.data<T>();
        const T* xv = x->value.data<T>();
        T* dx = x->requires_grad ? x->grad_buffer().data<T>() : nullptr;
        T* dw = w->requires_grad ? w->grad_buffer().data<T>() : nullptr;
        T* db = b && b->requires_grad ? b->grad_buffer().data<T>() : nullptr;
        const ConvImpl data = gpu_conv_impl<T>(on_gpu.data);
        const ConvImpl filter = gpu_conv_impl<T>(on_gpu.filter);
        if (dx) note_launch(ctx.plan, conv2d_backward_data_gpu_cost(data, s, sizeof(T)));
        if (dw || db)
          note_launch(ctx.plan, conv2d_backward_filter_gpu_cost(filter, s, sizeof(T),
                                                                dw != nullptr, db != nullptr));
        if (gpu) {
          if (dx) ON_GPU("conv2d", T, conv2d_backward_data_gpu<T>(data, s, dy, wv, dx, ctx.stream));
          if (dw || db)
            ON_GPU("conv2d", T, conv2d_backward_filter_gpu<T>(filter, s, xv, dy, dw, db, ctx.stream));
        } else {
          if (dx) conv2d_backward_data_cpu<T>(conv_impl<T>(ctx), s, dy, wv, dx);
          if (dw || db)
            conv2d_backward_filter_cpu<T>(conv_impl<T>(ctx), s, xv, dy, dw, db);
        }
      });
    });
  return y;
}

}  // namespace cutrain
