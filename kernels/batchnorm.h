// defines: batch normalisation forward (training and eval) and backward, CPU reference and GPU.
//
// Math: the formulas of each entry point are beside its CPU declaration below (training
//   forward: normalise with the batch's mean and variance, update the running averages; eval:
//   the running ones; backward: dx, dgamma, dbeta).
//   Layout: x is viewed as (M, C) with M = N*H*W, because activations are NHWC: channel c of
//   pixel m is x[m*C + c]. A (N,C) input (after a linear layer) is the same thing with M = N.
//   Statistics are per channel, over all M pixels of the batch.
//   Types: x, y, dx, dy are stored as T (f16, f32 or f64). Everything per channel -- gamma,
//   beta, dgamma, dbeta, running_mean, running_var and the saved batch mean / invstd -- is in
//   A = acc_t<T> (fp32 for fp16 activations): the mixed-precision rule keeps BN statistics in
//   fp32, since a batch of fp16 values summed in fp16 overflows at 65504 and a variance taken
//   in fp16 has three significant digits at best.
//   Backward functions *accumulate* (dx += ..., dgamma += ..., dbeta += ...), like every
//   backward in kernels/; any of dx, dgamma, dbeta may be null when that gradient is not wanted.
//   relu = true fuses the ReLU that follows BN in a model, on both devices. The forward writes
//   y = relu(bn(x)): bn rounded to T, then relu_forward_cpu's rule (kernels/elementwise.h: y if
//   y > 0, else +0). The backward reads dy masked by that fused output, g = y > 0 ? dy : +0,
//   where the separate ops would run relu_backward_cpu into a zeroed buffer and BN's backward
//   on it: the same values, and (the masked zeros meeting sums and an accumulated dx that
//   start at +0) the same bits. y is read only when relu is true (else it may be null). Fusing
//   saves a pass over the activation each way and the zeroed buffer between the two.
// Launch: batchnorm.cu launches them (32 channels x 8 row lanes a block); the launches of each
//   entry point are counted beside its GPU declaration below.
// Bytes: n = M*C elements of sizeof(T); the per-channel arrays are noise beside them. The CPU
//   loops move the same bytes as the GPU's passes.
//   batchnorm_forward_train_gpu_cost   x read three times (mean, variance, y), y written: 4n
//   batchnorm_forward_eval_gpu_cost    x read, y written: 2n
//   batchnorm_backward_train_gpu_cost  the sums read x, dy (and y when fused): 2n (3n); with
//                                      dx, its pass reads them again and dx, writes dx: +4n (+5n)
//   batchnorm_backward_eval_gpu_cost   the sums (when dgamma or dbeta is wanted): 2n (3n); dx:
//                                      dy, dx read (y too when fused), dx written: +3n (+4n)
//   batchnorm_running_update_gpu_cost  6*C floats (sums and running arrays read, those written)
// Flops: per element, +1 with the fused ReLU where the cost says so:
//   batchnorm_forward_train_gpu_cost ~8; batchnorm_forward_eval_gpu_cost ~4;
//   batchnorm_backward_train_gpu_cost ~6 for the sums, ~8 more with dx;
//   batchnorm_backward_eval_gpu_cost ~6 for the sums, ~4 for dx;
//   batchnorm_running_update_gpu_cost 8 per channel. Memory bound.
// Precision: x is widened to A on every read, every sum over the M pixels runs in A, blocked
//   pairwise (kernels/blocked_sum.h: at worst ~(64 + log2(M/64)) u relative instead of M u;
//   the fp32 mean of 2^20 values near 100 is off by 3e-8 instead of 3e-5), y and dx are
//   rounded to T once per element. The GPU sums in another order than the CPU (blocks of
//   pixels, then pairwise): it agrees within a tolerance, not bit for bit, but gives the same
//   bits on every run; batchnorm_running_update_gpu gives the CPU's bits.
#pragma once
#include <cstdint>
#include <functional>

#include "kernels/gpu.h"
#include "kernels/half.h"
#include "kernels/launch_plan.h"

namespace cutrain {

// Synchronised BatchNorm (--sync-bn): one batch spread over several replicas, its statistics
// taken over all of them. The training functions take an optional sync: between their passes
// they call sum(data, n) with this replica's per-channel sums (acc_t<T>: float, or double on
// the CPU), which must leave in data the sums over every replica's (an all-reduce; on a GPU
// queued in stream order). The forward calls it twice (n = C: sum x, then sum (x - mean)^2),
// the backward once (n = 2C: sum dy, then sum dy*xhat). count, the values per channel over
// every replica, stands where the formulas below say M (this replica's M still bounds the
// loops). dgamma and dbeta stay this replica's own sums: the gradients' all-reduce averages
// them like every weight's. Null: the batch is this replica's alone.
struct BatchNormSync {
  int64_t count = 0;
  std::function<void(void* data, int n)> sum;
};

// Training forward: normalise with the statistics of this batch.
//   mean[c]   = (1/M) sum_m x[m][c]
//   var[c]    = (1/M) sum_m (x[m][c] - mean[c])^2           (biased: what the batch is)
//   invstd[c] = 1 / sqrt(var[c] + eps)
//   y[m][c]   = gamma[c] * (x[m][c] - mean[c]) * invstd[c] + beta[c]
// saves mean and invstd (C) for the backward, and updates the running averages in place:
//   running_mean = (1 - momentum) * running_mean + momentum * mean
//   running_var  = (1 - momentum) * running_var  + momentum * var * M / (M - 1)
// The running variance takes the unbiased estimate, as PyTorch does: it stands for the
// variance of the whole data set, which the batch variance underestimates by (M-1)/M.
// Requires M >= 2 (one value has no variance), eps >= 0, var + eps > 0.
// x (M,C) T, gamma/beta (C) A -> y (M,C) T; save_mean/save_invstd (C) A written;
// running_mean/running_var (C) A read and written.
// cost: ~8 flops per element; reads x three times (the mean, the variance, y: three passes,
// see the .cpp) and writes y, so ~4*M*C*sizeof(T) bytes: memory-bound.
template <typename T>
void batchnorm_forward_train_cpu(int64_t M, int C, const T* x, const acc_t<T>* gamma,
                                 const acc_t<T>* beta, double eps, double momentum, bool relu,
                                 T* y, acc_t<T>* save_mean, acc_t<T>* save_invstd,
                                 acc_t<T>* running_mean, acc_t<T>* running_var,
                                 const BatchNormSync* sync = nullptr);

// One update of the running statistics from batch statistics summed over a step's
// micro-batches (and averaged over replicas): nn/ops.h, BatchNormState::step_sums. sums holds C
// means then C unbiased variances; scale turns them into their mean (1/K for K micro-batches;
// R/K after R replicas' average). The same formula as the training forward's update:
//   stat_mean = sums[c] * scale,  stat_var = sums[C + c] * scale
//   running_mean = (1 - momentum) * running_mean + momentum * stat_mean
//   running_var  = (1 - momentum) * running_var  + momentum * stat_var
// A = float or double. GPU twin batchnorm_running_update_gpu (float): the same bits (each
// operation rounded once, never fused: kernels/hd.h).
template <typename A>
void batchnorm_running_update_cpu(int C, const A* sums, double scale, double momentum,
                                  A* running_mean, A* running_var);
void batchnorm_running_update_gpu(int C, const float* sums, double scale, double momentum,
                                  float* running_mean, float* running_var, cudaStream_t stream);
// 1 launch; reads sums (2C) and both running arrays, writes them back, fp32.
inline LaunchCost batchnorm_running_update_gpu_cost(int C) {
  return {"batchnorm_running_update", 1, 6 * nbytes(C, sizeof(float)), 8.0 * C};
}

// Eval forward: the same normalisation with the running statistics; nothing is updated.
//   y[m][c] = gamma[c] * (x[m][c] - running_mean[c]) / sqrt(running_var[c] + eps) + beta[c]
// cost: ~3 flops per element, ~2*M*C*sizeof(T) bytes.
template <typename T>
void batchnorm_forward_eval_cpu(int64_t M, int C, const T* x, const acc_t<T>* gamma,
                                const acc_t<T>* beta, const acc_t<T>* running_mean,
                                const acc_t<T>* running_var, double eps, bool relu, T* y);

// Training backward, with xhat[m][c] = (x[m][c] - mean[c]) * invstd[c] rebuilt from the saved
// statistics. Because mean and var depend on every x of the channel, dx has two terms beyond
// the direct one (the derivation: dL/dxhat = gamma*dy, then through mean and var):
//   dx[m][c]  += (gamma[c] * invstd[c] / M) *
//                (M * dy[m][c] - sum_m' dy[m'][c] - xhat[m][c] * sum_m' dy[m'][c] * xhat[m'][c])
//   dgamma[c] += sum_m dy[m][c] * xhat[m][c]
//   dbeta[c]  += sum_m dy[m][c]
// x, dy (M,C) T; gamma, save_mean, save_invstd (C) A; dx (M,C) T; dgamma, dbeta (C) A.
// cost: ~10 flops per element; reads x and dy twice, reads and writes dx: ~6*M*C*sizeof(T).
template <typename T>
void batchnorm_backward_train_cpu(int64_t M, int C, const T* x, const T* y, const T* dy,
                                  const acc_t<T>* gamma, const acc_t<T>* save_mean,
                                  const acc_t<T>* save_invstd, bool relu, T* dx,
                                  acc_t<T>* dgamma, acc_t<T>* dbeta,
                                  const BatchNormSync* sync = nullptr);

// Eval backward: the running statistics are constants, so BN is a per-channel affine map.
//   invstd[c]  = 1 / sqrt(running_var[c] + eps)
//   xhat[m][c] = (x[m][c] - running_mean[c]) * invstd[c]
//   dx[m][c]  += dy[m][c] * gamma[c] * invstd[c]
//   dgamma[c] += sum_m dy[m][c] * xhat[m][c]
//   dbeta[c]  += sum_m dy[m][c]
// cost: ~5 flops per element, ~4*M*C*sizeof(T) bytes.
template <typename T>
void batchnorm_backward_eval_cpu(int64_t M, int C, const T* x, const T* y, const T* dy,
                                 const acc_t<T>* gamma, const acc_t<T>* running_mean,
                                 const acc_t<T>* running_var, double eps, bool relu, T* dx,
                                 acc_t<T>* dgamma, acc_t<T>* dbeta);

// --- GPU (CUDA builds only; device pointers; queued on `stream`, never synchronising) ---
// kernels/batchnorm.cu. T = float or half_t; every per-channel array is float (acc_t<T>).
// The same math, running-statistics update, fused ReLU and accumulate rule (+=; dx, dgamma,
// dbeta may be null) as the CPU functions above, and the same arguments plus the stream.
// Determinism: every per-channel sum runs over a fixed grid (a function of M and C only): each
// block sums a fixed set of rows into a partial per channel, written to scratch, and the last
// block to finish (an atomic counts arrivals, nothing else) adds the partials in a fixed order
// and finishes the statistic. So the same bits on every run. The
// order differs from the CPU's sequential sums, so results agree within a tolerance.
// Precision: fp32 statistics, two passes for the variance (as the CPU), y and dx rounded to T
// once.
template <typename T>
void batchnorm_forward_train_gpu(int64_t M, int C, const T* x, const float* gamma,
                                 const float* beta, double eps, double momentum, bool relu,
                                 T* y, float* save_mean, float* save_invstd,
                                 float* running_mean, float* running_var, cudaStream_t stream,
                                 const BatchNormSync* sync = nullptr);
// 3 launches: the sums of x (ending in the mean), the squared deviations (ending in the
// variance and the running averages), normalize. synced: 2 more, each finishing a statistic
// from the C sums that sync->sum added over the replicas; what the sum callback queues (the
// collective) is not counted here.
// bytes: x read by three passes, y written; the per-channel arrays and partials are noise.
inline LaunchCost batchnorm_forward_train_gpu_cost(int64_t M, int C, size_t elem, bool relu,
                                                   bool synced) {
  const int64_t n = M * C;
  return {"batchnorm_forward_train", synced ? 5 : 3, 4 * nbytes(n, elem), (8.0 + relu) * n};
}
template <typename T>
void batchnorm_forward_eval_gpu(int64_t M, int C, const T* x, const float* gamma,
                                const float* beta, const float* running_mean,
                                const float* running_var, double eps, bool relu, T* y,
                                cudaStream_t stream);
// 2 launches: invstd from the running variance, normalize (x read, y written).
inline LaunchCost batchnorm_forward_eval_gpu_cost(int64_t M, int C, size_t elem, bool relu) {
  const int64_t n = M * C;
  return {"batchnorm_forward_eval", 2, 2 * nbytes(n, elem), (4.0 + relu) * n};
}
template <typename T>
void batchnorm_backward_train_gpu(int64_t M, int C, const T* x, const T* y, const T* dy,
                                  const float* gamma, const float* save_mean,
                                  const float* save_invstd, bool relu, T* dx, float* dgamma,
                                  float* dbeta, cudaStream_t stream,
                                  const BatchNormSync* sync = nullptr);
// 1 launch, + 1 with dx: the sums of (dy, dy*xhat), ending in dgamma, dbeta +=; then dx.
// The sums run whether or not dgamma and dbeta are wanted (dx needs them). synced
// adds no kernel of this code: only the sum callback's collective, not counted here.
// bytes: the sums read x, dy (and y when fused); dx's pass reads them again and dx, writes dx.
inline LaunchCost batchnorm_backward_train_gpu_cost(int64_t M, int C, size_t elem, bool relu,
                                                    bool dx, bool synced) {
  (void)synced;
  const int64_t n = M * C;
  LaunchCost c{"batchnorm_backward_train", 1, (2 + relu) * nbytes(n, elem), 6.0 * n};
  if (dx) c.launches += 1, c.bytes += (4 + relu) * nbytes(n, elem), c.flops += 8.0 * n;
  return c;
}
template <typename T>
void batchnorm_backward_eval_gpu(int64_t M, int C, const T* x, const T* y, const T* dy,
                                 const float* gamma, const float* running_mean,
                                 const float* running_var, double eps, bool relu, T* dx,
                                 float* dgamma, float* dbeta, cudaStream_t stream);
// 1 launch (invstd), + 1 when dgamma or dbeta is wanted (dparams: the sums, ending in them),
// + 1 with dx (dx += masked dy * gamma * invstd: reads dy, y when fused, dx; writes dx).
inline LaunchCost batchnorm_backward_eval_gpu_cost(int64_t M, int C, size_t elem, bool relu,
                                                   bool dx, bool dparams = true) {
  const int64_t n = M * C;
  LaunchCost c{"batchnorm_backward_eval", 1, 0, 0};
  if (dparams) c.launches += 1, c.bytes += (2 + relu) * nbytes(n, elem), c.flops += 6.0 * n;
  if (dx) c.launches += 1, c.bytes += (3 + relu) * nbytes(n, elem), c.flops += 4.0 * n;
  return c;
}

}  // namespace cutrain
