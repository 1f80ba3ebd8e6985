// defines: softmax cross-entropy with label smoothing and optional per-class weights,
// forward and backward, and top-1 counting, CPU reference.
//
// Math: logits z (N,K) in T, labels y (N) int32 in [0,K), smoothing eps in [0,1), class
// weights w (K) or none (then every w_k = 1):
//   q[n][k]   = (1 - eps) * [k == y[n]] + eps / K           the smoothed target; sums to 1
//   p[n][k]   = exp(z[n][k]) / sum_j exp(z[n][j])           softmax
//   l[n]      = sum_k -q[n][k] * log p[n][k]                the row's cross-entropy
//   loss      = (1/N) * sum_n w[y[n]] * l[n]
//   dz[n][k] += dloss * w[y[n]] * (p[n][k] - q[n][k]) / N   dloss: the upstream gradient of
//                                                           the loss (the loss scale in fp16)
// The weighted loss divides by N, not by the batch's sum of weights: it is PyTorch's
// CrossEntropyLoss(weight=w, reduction='sum') / N, not its reduction='mean' (which divides by
// sum_n w[y[n]]), so a micro-batch's share of a batch stays n / N whatever its labels. With
// smoothing, the whole row l[n] is weighted by its label's w; PyTorch weights the smoothing
// term's class k by w_k instead, so the two agree only at eps = 0. No weights (a null
// pointer) computes exactly the unweighted formulas, bit for bit.
// stability: with m = max_k z[n][k] and S = sum_k exp(z[n][k] - m) (so 1 <= S <= K),
//   -log p[n][k] = log S + (m - z[n][k]), a sum of two non-negative terms, so
//   loss_n = log S + sum_k q[n][k] * (m - z[n][k]).
//   No exp ever sees a positive argument and nothing cancels, so logits of 1e4 in f32 or
//   60000 in f16 give the exact finite answer. An inf or NaN logit gives a NaN loss, which is
//   what the loss scaler must see.
// Launch: softmax_xent.cu launches them: one warp per row, 8 rows a 256-thread block; one
//   launch each (the forward's mean by its last block).
// Bytes: softmax_xent_forward_gpu_cost: the logits read once, N labels and N row losses (and
//   N weights); softmax_xent_backward_gpu_cost: the logits read, dz read and written, the
//   labels (and weights); top1_correct_gpu_cost: the logits and labels read. Memory bound.
// Flops: softmax_xent_forward_gpu_cost ~5*N*K (about 4 plus an exp an element),
//   softmax_xent_backward_gpu_cost ~10*N*K, top1_correct_gpu_cost N*K compares.
// Precision: everything in acc_t<T> (f32 for f16 logits); the loss is acc_t<T> too, and dz
//   is rounded to T once. Labels outside [0,K) throw cutrain::Error naming the row. The GPU
//   agrees within a tolerance (its sums run in another order), top-1 exactly.
#pragma once
#include <cstdint>

#include "kernels/gpu.h"
#include "kernels/half.h"
#include "kernels/launch_plan.h"

namespace cutrain {

// Throws cutrain::Error, naming `op`, when N or K is not positive, the smoothing is outside
// [0,1), or a label is outside [0,K) (naming the row and the value). Every function below
// calls it first.
void softmax_xent_check(int N, int K, const int32_t* labels, double smoothing,
                        const char* op = "softmax_xent");

// *loss = the mean (weighted) loss over the N rows. class_weight: (K) finite weights >= 0, or
// null for none.
template <typename T>
void softmax_xent_forward_cpu(int N, int K, const T* logits, const int32_t* labels,
                              acc_t<T> smoothing, acc_t<T>* loss,
                              const acc_t<T>* class_weight = nullptr);

// dlogits += dloss * w[label] * (softmax - q) / N
template <typename T>
void softmax_xent_backward_cpu(int N, int K, const T* logits, const int32_t* labels,
                               acc_t<T> smoothing, acc_t<T> dloss, T* dlogits,
                               const acc_t<T>* class_weight = nullptr);

// The number of rows whose largest logit is at the label; a tie counts for the first largest.
template <typename T>
int64_t top1_correct_cpu(int N, int K, const T* logits, const int32_t* labels);

// --- GPU (CUDA builds only; device pointers; queued on `stream`, never synchronising) ---
// kernels/softmax_xent.cu. T = float or half_t; the same stable formula as the CPU functions
// above, in fp32. One warp per row; the row sums run in a different order from the CPU's, so
// results agree within a tolerance (top-1 counts exactly).
//
// Labels: a kernel cannot throw, so the caller checks the host copy of the labels with
// softmax_xent_check first (the trainer has them on the host before uploading). A label
// outside [0,K) that slips through is never used as an index: its row's loss is NaN (so the
// mean loss is NaN), its row of dlogits gets += NaN (so the loss scaler's inf/NaN check skips
// the step), and it never counts as correct in top1_correct_gpu.
// N and K must be positive and smoothing in [0,1) (checked on the host; throws).

// class_weight: (K) fp32 on the device, or null for none (the kernels then run the
// unweighted formulas exactly as before weights existed). A kernel reads it by address, so a
// CUDA graph that captured a launch keeps reading the same buffer.

// *loss = the mean (weighted) loss over the N rows (a device scalar, written, not
// accumulated). Per-row losses go to scratch, then the last block adds them in a fixed order:
// deterministic.
template <typename T>
void softmax_xent_forward_gpu(int N, int K, const T* logits, const int32_t* labels,
                              float smoothing, float* loss, cudaStream_t stream,
                              const float* class_weight = nullptr);
// 1 launch: the row losses (logits and labels read, N floats written; weighted: N weights
// gathered), then the mean over them by the block that finishes last.
inline LaunchCost softmax_xent_forward_gpu_cost(int N, int K, size_t elem, bool weighted) {
  const int64_t z = int64_t(N) * K;
  return {"softmax_xent_forward", 1, nbytes(z, elem) + nbytes(N, 4) * (3 + weighted) + 4,
          5.0 * double(z)};
}

// dlogits += dloss * w[label] * (softmax - q) / N, with dloss a device scalar (the loss scale
// stays on the device).
template <typename T>
void softmax_xent_backward_gpu(int N, int K, const T* logits, const int32_t* labels,
                               float smoothing, const float* dloss, T* dlogits,
                               cudaStream_t stream, const float* class_weight = nullptr);
// 1 launch: logits and labels read, dlogits read and written.
inline LaunchCost softmax_xent_backward_gpu_cost(int N, int K, size_t elem, bool weighted) {
  const int64_t z = int64_t(N) * K;
  return {"softmax_xent_backward", 1, 3 * nbytes(z, elem) + nbytes(N, 4) * (1 + weighted),
          10.0 * double(z)};
}

// *count (a device int64) += the rows whose first largest logit is at the label (the CPU's
// rule: a NaN logit at k > 0 never wins; a NaN at k = 0 makes the row's answer 0).
template <typename T>
void top1_correct_gpu(int N, int K, const T* logits, const int32_t* labels, int64_t* count,
                      cudaStream_t stream);
// 1 launch: logits and labels read, one atomic add per block.
inline LaunchCost top1_correct_gpu_cost(int N, int K, size_t elem) {
  const int64_t z = int64_t(N) * K;
  return {"top1_correct", 1, nbytes(z, elem) + nbytes(N, 4), double(z)};
}

}  // namespace cutrain
