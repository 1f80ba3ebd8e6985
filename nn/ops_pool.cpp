// maxpool2d and global_avgpool: the op pattern of ops_basic.cpp over kernels/pool.h.
#include "kernels/pool.h"
#include "nn/dispatch.h"
#include "nn/ops.h"

namespace cutrain {

VarPtr maxpool2d(Tape& tape, const VarPtr& x, int r, int s, int stride_h, int stride_w,
                 int pad_h, int pad_w) {
  const Context ctx = tape.context();
  const Tensor& X = x->value;  // (N,H,W,C)
  const bool gpu = op_on_gpu(ctx, "maxpool2d", {&X});
  CHECK(X.rank() == 4, "maxpool2d: x must be (N,H,W,C), got " << X.str());
  Pool2dShape sh;
  sh.N = X.dim(0), sh.H = X.dim(1), sh.W = X.dim(2), sh.C = X.dim(3);
  sh.R = r, sh.S = s;
  sh.stride_h = stride_h, sh.stride_w = stride_w;
  sh.pad_h = pad_h, sh.pad_w = pad_w;
  pool2d_check_shape(sh, "maxpool2d");
  VarPtr y = make_var(Tensor::empty({sh.N, sh.P(), sh.Q(), sh.C}, X.dtype(), ctx),
                      x->requires_grad);  // (N,P,Q,C)
  dispatch_float(X.dtype(), [&](auto tag) {
    using T = decltype(tag);
    note_launch(ctx.plan, maxpool2d_forward_gpu_cost(sh, sizeof(T)));
    if (gpu)
      ON_GPU("maxpool2d", T, maxpool2d_forward_gpu<T>(sh, X.data<T>(), y->value.data<T>(),
                                                      ctx.stream));
    else
      maxpool2d_forward_cpu<T>(sh, X.data<T>(), y->value.data<T>());
  });
  if (tape.wants({x.get()}))
    tape.record("maxpool2d", y, [x, y, sh, gpu, ctx] {
      dispatch_float(x->value.dtype(), [&](auto tag) {
        using T = decltype(tag);
        const T* xv = x->value.data<T>();
        const T* dy = y->grad_buffer().data<T>();
        T* dx = x->grad_buffer().data<T>();
        note_launch(ctx.plan, maxpool2d_backward_gpu_cost(sh, sizeof(T)));
        if (gpu)
          ON_GPU("maxpool2d", T, maxpool2d_backward_gpu<T>(sh, xv, dy, dx, ctx.stream));
        else
          maxpool2d_backward_cpu<T>(sh, xv, dy, dx);
      });
    });
  return y;
}

VarPtr global_avgpool(Tape& tape, const VarPtr& x) {
  const Context ctx = tape.context();
  const Tensor& X = x->value;  // (N,H,W,C)
  const bool gpu = op_on_gpu(ctx, "global_avgpool", {&X});
  CHECK(X.rank() == 4, "global_avgpool: x must be (N,H,W,C), got " << X.str());
  const int N = X.dim(0), H = X.dim(1), W = X.dim(2), C = X.dim(3);
  CHECK(H > 0 && W > 0, "global_avgpool: needs at least one pixel to average, got " << X.str());
  VarPtr y = make_var(Tensor::empty({N, C}, X.dtype(), ctx), x->requires_grad);  // (N,C)
  dispatch_float(X.dtype(), [&](auto tag) {
    using T = decltype(tag);
    note_launch(ctx.plan, global_avgpool_forward_gpu_cost(N, H, W, C, sizeof(T)));
    if (gpu)
      ON_GPU("global_avgpool", T,
             global_avgpool_forward_gpu<T>(N, H, W, C, X.data<T>(), y->value.data<T>(),
                                           ctx.stream));
    else
      global_avgpool_forward_cpu<T>(N, H, W, C, X.data<T>(), y->value.data<T>());
  });
  if (tape.wants({x.get()}))
    tape.record("global_avgpool", y, [x, y, N, H, W, C, gpu, ctx] {
      dispatch_float(x->value.dtype(), [&](auto tag) {
        using T = decltype(tag);
        const T* dy = y->grad_buffer().data<T>();
        T* dx = x->grad_buffer().data<T>();
        note_launch(ctx.plan, global_avgpool_backward_gpu_cost(N, H, W, C, sizeof(T)));
        if (gpu)
          ON_GPU("global_avgpool", T,
                 global_avgpool_backward_gpu<T>(N, H, W, C, dy, dx, ctx.stream));
        else
          global_avgpool_backward_cpu<T>(N, H, W, C, dy, dx);
      });
    });
  return y;
}

}  // namespace cutrain
