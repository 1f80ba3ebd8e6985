// batchnorm2d: the op pattern of ops_basic.cpp, with two twists.
//  - Mixed precision: x is T (f16, f32, f64), but gamma, beta, the running statistics and the
//    saved batch statistics are acc_t<T> (f32 for f16 activations).
//  - State: training mode updates BatchNormState in place and saves the batch mean / invstd
//    for the backward in tensors that the closure owns.
#include "kernels/batchnorm.h"
#include "kernels/elementwise.h"
#include "nn/dispatch.h"
#include "nn/ops.h"

namespace cutrain {

namespace {
const char* const kOp = "batchnorm2d";

// gamma, beta and the running statistics: defined, on x's device, (C), in x's accumulation
// dtype.
void check_per_channel(const Context& ctx, const Tensor& t, const char* name, const Tensor& x,
                       int C) {
  const DType acc = acc_dtype(x.dtype());
  CHECK(t.defined(), kOp << ": " << name << " is undefined; it must be a (" << C << ") "
                         << dtype_name(acc) << " tensor (running_mean starts as zeros, "
                         << "running_var as ones)");
  op_on_gpu(ctx, kOp, {&t});
  CHECK(t.shape() == Shape{C}, kOp << ": " << name << " must be (" << C << ") to match x "
                                   << x.str() << ", got " << shape_str(t.shape()));
  CHECK(t.dtype() == acc, kOp << ": " << name << " must be " << dtype_name(acc)
                              << " (the accumulation dtype of " << dtype_name(x.dtype())
                              << " activations), got " << t.str());
}
}  // namespace

VarPtr batchnorm2d(Tape& tape, const VarPtr& x, const VarPtr& gamma, const VarPtr& beta,
                   BatchNormState& state, bool training, bool relu) {
  const Context ctx = tape.context();
  CHECK(x && gamma && beta, kOp << ": x, gamma and beta must all be given (got a null Var)");
  const Tensor& X = x->value;
  CHECK(X.dtype() == DType::f32 || X.dtype() == DType::f16 || X.dtype() == DType::f64,
        kOp << ": x must be floating point, got " << X.str());
  CHECK(X.rank() == 4 || X.rank() == 2,
        kOp << ": x must be (N,H,W,C) or (N,C), got " << X.str());
  CHECK(X.numel() > 0, kOp << ": x is empty: " << X.str());
  const int C = X.dim(-1);
  const int64_t M = X.numel() / C;  // N*H*W values per channel
  check_per_channel(ctx, gamma->value, "gamma", X, C);
  check_per_channel(ctx, beta->value, "beta", X, C);
  check_per_channel(ctx, state.running_mean, "running_mean", X, C);
  check_per_channel(ctx, state.running_var, "running_var", X, C);
  CHECK(state.eps > 0, kOp << ": eps must be > 0, got " << state.eps);
  CHECK(state.momentum >= 0 && state.momentum <= 1,
        kOp << ": momentum must lie in [0, 1], got " << state.momentum);
  if (state.step_sums.defined()) {
    op_on_gpu(ctx, kOp, {&state.step_sums});
    CHECK(state.step_sums.shape() == Shape{2 * C} && state.step_sums.dtype() == acc_dtype(X.dtype()),
          kOp << ": step_sums must be (" << 2 * C << ") " << dtype_name(acc_dtype(X.dtype()))
              << ", got " << state.step_sums.str());
  }
  const DType acc = acc_dtype(X.dtype());
  // --sync-bn: the statistics over every replica's batch, count values per channel; the
  // kernels call sync.sum between their passes.
  BatchNormSync sync;
  const bool synced = training && state.sync && state.sync->images > 0;
  if (synced) {
    const int64_t N = X.dim(0);
    sync.count = M / N * state.sync->images;
    sync.sum = [ctx, acc, link = state.sync](void* data, int n) { link->sum(ctx, data, n, acc); };
  }
  const BatchNormSync* sync_p = synced ? &sync : nullptr;
  CHECK(!training || (synced ? sync.count : M) > 1,
        kOp << ": training needs more than one value per channel, but x " << X.str()
            << " has M = N*H*W = 1, for which the batch variance is undefined");

  const double eps = state.eps;
  const bool rg = x->requires_grad || gamma->requires_grad || beta->requires_grad;
  const bool record = tape.wants({x.get(), gamma.get(), beta.get()});
  const bool gpu = op_on_gpu(ctx, kOp, {&X});
  VarPtr y = make_var(Tensor::empty(X.shape(), X.dtype(), ctx), rg);
  // What the backward needs besides x and gamma: in training the batch mean and invstd
  // (C) acc; in eval a copy of the running statistics as this forward saw them, so a later
  // training step that moves them cannot change this op's gradient.
  Tensor saved_mean, saved_invstd;  // training
  Tensor seen_mean, seen_var;        // eval
  // Training with step_sums: the kernel's update, with momentum 1 into zeros, leaves this
  // batch's mean and unbiased variance in batch_stats ((1 - 1) * 0 + 1 * v = v exactly), which are
  // then added to the step's sums.
  const bool sums = training && state.step_sums.defined();
  // The running statistics the kernel moves: the state's, or (2C) zeros for this batch's.
  Tensor batch_stats;  // with step_sums: C means, then C variances, as step_sums holds them
  if (sums) batch_stats = Tensor::zeros({2 * C}, acc, ctx);
  Tensor& run = sums ? batch_stats : state.running_mean;
  Tensor& run_v = sums ? batch_stats : state.running_var;
  const int64_t var_at = sums ? C : 0;  // run_v's first element
  const double momentum = sums ? 1.0 : state.momentum;
  if (training) {
    saved_mean = Tensor::empty({C}, acc, ctx);
    saved_invstd = Tensor::empty({C}, acc, ctx);
  } else if (record) {
    seen_mean = state.running_mean.clone();
    seen_var = state.running_var.clone();
  }

  dispatch_float(X.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const A* g = gamma->value.data<A>();
    const A* b = beta->value.data<A>();
    note_launch(ctx.plan, training ? batchnorm_forward_train_gpu_cost(M, C, sizeof(T), relu, synced)
                                   : batchnorm_forward_eval_gpu_cost(M, C, sizeof(T), relu));
    if (gpu && training)
      ON_GPU(kOp, T, batchnorm_forward_train_gpu<T>(
                         M, C, X.data<T>(), g, b, eps, momentum, relu, y->value.data<T>(),
                         saved_mean.data<A>(), saved_invstd.data<A>(), run.data<A>(),
                         run_v.data<A>() + var_at, ctx.stream, sync_p));
    else if (gpu)
      ON_GPU(kOp, T, batchnorm_forward_eval_gpu<T>(
                         M, C, X.data<T>(), g, b, state.running_mean.data<A>(),
                         state.running_var.data<A>(), eps, relu, y->value.data<T>(),
                         ctx.stream));
    else if (training)
      batchnorm_forward_train_cpu<T>(M, C, X.data<T>(), g, b, eps, momentum, relu,
                                     y->value.data<T>(), saved_mean.data<A>(),
                                     saved_invstd.data<A>(), run.data<A>(),
                                     run_v.data<A>() + var_at, sync_p);
    else
      batchnorm_forward_eval_cpu<T>(M, C, X.data<T>(), g, b, state.running_mean.data<A>(),
                                    state.running_var.data<A>(), eps, relu, y->value.data<T>());
    if (sums) {  // the step's sums: C means, then C variances
      A* into = state.step_sums.data<A>();
      note_launch(ctx.plan, accumulate_gpu_cost(2 * C, sizeof(A)));
      if (gpu)
        ON_GPU(kOp, T, accumulate_gpu<A>(2 * C, batch_stats.data<A>(), into, ctx.stream));
      else
        accumulate_cpu<A>(2 * C, batch_stats.data<A>(), into);
    }
  });

  if (record)
    tape.record(kOp, y, [x, gamma, beta, y, M, C, training, relu, eps, saved_mean, saved_invstd,
                      seen_mean, seen_var, gpu, ctx, sync, synced] {
      const BatchNormSync* sync_p = synced ? &sync : nullptr;
      dispatch_float(y->value.dtype(), [&](auto tag) {
        using T = decltype(tag);
        using A = acc_t<T>;
        const T* xv = x->value.data<T>();
        const T* yv = relu ? y->value.data<T>() : nullptr;  // the fused ReLU's mask
        const T* dy = y->grad_buffer().data<T>();
        const A* g = gamma->value.data<A>();
        T* dx = x->requires_grad ? x->grad_buffer().data<T>() : nullptr;
        A* dg = gamma->requires_grad ? gamma->grad_buffer().data<A>() : nullptr;
        A* db = beta->requires_grad ? beta->grad_buffer().data<A>() : nullptr;
        note_launch(ctx.plan, training ? batchnorm_backward_train_gpu_cost(M, C, sizeof(T), relu,
                                                                           dx != nullptr, synced)
                                       : batchnorm_backward_eval_gpu_cost(M, C, sizeof(T), relu,
                                                                          dx != nullptr,
                                                                          dg || db));
        if (gpu && training)
          ON_GPU(kOp, T, batchnorm_backward_train_gpu<T>(
                             M, C, xv, yv, dy, g, saved_mean.data<A>(), saved_invstd.data<A>(),
                             relu, dx, dg, db, ctx.stream, sync_p));
        else if (gpu)
          ON_GPU(kOp, T, batchnorm_backward_eval_gpu<T>(
                             M, C, xv, yv, dy, g, seen_mean.data<A>(), seen_var.data<A>(), eps,
                             relu, dx, dg, db, ctx.stream));
        else if (training)
          batchnorm_backward_train_cpu<T>(M, C, xv, yv, dy, g, saved_mean.data<A>(),
                                          saved_invstd.data<A>(), relu, dx, dg, db, sync_p);
        else
          batchnorm_backward_eval_cpu<T>(M, C, xv, yv, dy, g, seen_mean.data<A>(),
                                         seen_var.data<A>(), eps, relu, dx, dg, db);
      });
    });
  return y;
}

void batchnorm_step_update(const Context& ctx, BatchNormState& state, double scale) {
  const Tensor& sums = state.step_sums;
  CHECK(sums.defined(), "batchnorm_step_update: the state has no step_sums");
  const int C = int(state.running_mean.numel());
  CHECK(sums.numel() == 2 * C && sums.dtype() == state.running_mean.dtype(),
        "batchnorm_step_update: step_sums " << sums.str() << " for running_mean "
                                            << state.running_mean.str());
  const bool gpu = op_on_gpu(ctx, "batchnorm_step_update",
                             {&sums, &state.running_mean, &state.running_var});
  note_launch(ctx.plan, batchnorm_running_update_gpu_cost(C));
  if (sums.dtype() == DType::f64) {
    CHECK(!gpu, "batchnorm_step_update: f64 statistics on a GPU");
    batchnorm_running_update_cpu<double>(C, sums.data<double>(), scale, state.momentum,
                                         state.running_mean.data<double>(),
                                         state.running_var.data<double>());
  } else if (gpu) {
    ON_GPU("batchnorm_step_update", float,
           batchnorm_running_update_gpu(C, sums.data<float>(), scale, state.momentum,
                                        state.running_mean.data<float>(),
                                        state.running_var.data<float>(), ctx.stream));
  } else {
    batchnorm_running_update_cpu<float>(C, sums.data<float>(), scale, state.momentum,
                                        state.running_mean.data<float>(),
                                        state.running_var.data<float>());
  }
}

}  // namespace cutrain
