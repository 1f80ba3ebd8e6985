// softmax cross-entropy and top-1 on the GPU.
//
// Math: softmax_xent.h, with its stable formula.
// Launch: one warp per row of logits, 8 rows (warps) per 256-thread block. The lanes stride
// over the row's K logits (lane l takes k = l, l+32, ...), then combine with warp shuffles:
// the row max m, S = sum exp(z - m), and (with smoothing) the gap sum_k (m - z_k).
//   forward:  row_loss_kernel writes each row's loss (times its label's class weight, when
//             given) to scratch, then its last block to finish (block_mean) adds the N
//             losses in a fixed order: one launch, the same bits on every run.
//   backward: each lane writes its own dlogits[k] += dloss/N * w_label * (p_k - q_k).
//   top1:     each lane keeps its first largest logit, the warp keeps the largest value at
//             the smallest k; one integer atomic per block adds the block's count (integer
//             sums are exact, so still deterministic).
// Bytes: logits read once (twice for the backward's read-modify-write of dlogits)
//   (softmax_xent.h: softmax_xent_forward_gpu_cost, softmax_xent_backward_gpu_cost,
//   top1_correct_gpu_cost). Tiny next to the rest of a step (N is the batch size).
// Flops: about 4*N*K plus N*K expf (softmax_xent_forward_gpu_cost; the backward's
//   softmax_xent_backward_gpu_cost twice that).
// Precision: fp32 throughout, expf/logf (not the fast intrinsics); dlogits rounded to T once.
//   Matches softmax_xent_forward_cpu / _backward_cpu within a tolerance (the sums run in a
//   different order), and top1_correct_cpu exactly.
#include <cmath>

#include "kernels/check.h"
#include "kernels/arrival_counters.h"
#include "kernels/cuda_util.cuh"
#include "kernels/softmax_xent.h"

namespace cutrain {

namespace {

constexpr int kRowsPerBlock = 8;  // warps per block

__device__ float warp_max(float v) {
  for (int off = 16; off > 0; off /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}
// Every lane ends with the same bits: lane l adds a_l + a_(l^off) and lane l^off adds the same
// two numbers, and floating-point addition is commutative.
__device__ float warp_sum(float v) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// The row max m (fmax: a NaN logit is passed over here, and makes S NaN below, as on the CPU),
// log S with S = sum_k exp(z_k - m), and gap = sum_k (m - z_k). Called by all 32 lanes.
template <typename S>
__device__ void row_stats(int K, const S* z, int lane, float& m, float& log_s, float& gap) {
  m = -INFINITY;
  for (int k = lane; k < K; k += 32) m = fmaxf(m, to_acc(z[k]));
  m = warp_max(m);
  float s = 0, g = 0;
  for (int k = lane; k < K; k += 32) {
    const float v = to_acc(z[k]);
    s += expf(v - m);
    g += m - v;
  }
  log_s = logf(warp_sum(s));
  gap = warp_sum(g);
}

// *loss = (sum of the N row losses) / N, by the 256 threads of one block: each adds rows t,
// t+256, ... in order, then a tree over the threads in shared memory. A fixed order:
// deterministic.
static_assert(32 * kRowsPerBlock == 256, "the mean is taken by one block of 256 threads");
__device__ void block_mean(int N, const float* row_loss, float* loss) {
  __shared__ float part[256];
  const int t = threadIdx.x;
  float s = 0;
  for (int i = t; i < N; i += 256) s += __ldcg(&row_loss[i]);  // other blocks' rows: past L1
  part[t] = s;
  __syncthreads();
  for (int half = 128; half > 0; half /= 2) {
    if (t < half) part[t] += part[t + half];
    __syncthreads();
  }
  if (t == 0) *loss = part[0] / float(N);
}

// row_loss[n] = w_label * (log S + (1 - eps)(m - z_label) + (eps/K) * gap) (gap only when
// eps > 0; w_label only with weights), or NaN when the label is outside [0,K). One warp per
// row. Then the last block to finish its rows takes the mean (block_mean; arrivals: one
// counter, arrival_counters): one launch.
template <typename S>
__global__ void row_loss_kernel(int N, int K, const S* logits, const int32_t* labels,
                                const float* class_weight, float smoothing, float* row_loss,
                                float* loss, unsigned* arrivals) {
  const int n = blockIdx.x * kRowsPerBlock + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (n < N) {  // whole warps: the shuffles in row_stats see full warps. No early return:
                // every thread must reach last_block_to_arrive
    const S* z = logits + int64_t(n) * K;
    float m, log_s, gap;
    row_stats(K, z, lane, m, log_s, gap);
    const int32_t label = labels[n];
    if (lane == 0) {
      if (label < 0 || label >= K) {
        row_loss[n] = NAN;
      } else {
        float row = log_s + (1.0f - smoothing) * (m - to_acc(z[label]));
        if (smoothing > 0) row += smoothing / float(K) * gap;
        if (class_weight) row *= class_weight[label];  // none: the unweighted bits
        row_loss[n] = row;
      }
    }
  }
  if (last_block_to_arrive(arrivals, gridDim.x)) block_mean(N, row_loss, loss);
}

// dz[k] += (dloss/N) * w_label * (p_k - q_k), p_k = exp(z_k - m - log S); q_k = NaN for a bad
// label (whose weight is never read).
template <typename S>
__global__ void backward_kernel(int N, int K, const S* logits, const int32_t* labels,
                                const float* class_weight, float smoothing, const float* dloss,
                                S* dlogits) {
  const int n = blockIdx.x * kRowsPerBlock + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (n >= N) return;
  const S* z = logits + int64_t(n) * K;
  S* dz = dlogits + int64_t(n) * K;
  float m, log_s, gap;
  row_stats(K, z, lane, m, log_s, gap);
  const float off = smoothing / float(K), on = 1.0f - smoothing + off;
  const float g = *dloss / float(N);
  const int32_t label = labels[n];
  const bool bad = label < 0 || label >= K;
  const float gn = class_weight && !bad ? g * class_weight[label] : g;  // this row's dloss / N
  for (int k = lane; k < K; k += 32) {
    const float p = expf(to_acc(z[k]) - m - log_s);
    const float q = bad ? NAN : k == label ? on : off;
    dz[k] = from_acc<S>(to_acc(dz[k]) + gn * (p - q));
  }
}

// One warp per row: the first largest logit, as top1_correct_cpu's strict '>' scan finds it:
// NaNs at k > 0 never win (every comparison with them is false); a NaN at k = 0 is never
// beaten, so the answer is 0. The block's correct rows go to *count with one atomic.
template <typename S>
__global__ void top1_kernel(int N, int K, const S* logits, const int32_t* labels,
                            unsigned long long* count) {
  const int n = blockIdx.x * kRowsPerBlock + threadIdx.x / 32, lane = threadIdx.x % 32;
  bool correct = false;
  if (n < N) {  // no early return: every thread must reach __syncthreads_count
    const S* z = logits + int64_t(n) * K;
    float best = 0;
    int best_k = -1;  // none yet
    for (int k = lane; k < K; k += 32) {
      const float v = to_acc(z[k]);
      if (!isnan(v) && (best_k < 0 || v > best)) {
        best = v;
        best_k = k;
      }
    }
    // The larger value wins; equal values go to the smaller k. An order on (value, k), so
    // every lane ends with the same pair.
    for (int off = 16; off > 0; off /= 2) {
      const float ov = __shfl_xor_sync(0xffffffffu, best, off);
      const int ok = __shfl_xor_sync(0xffffffffu, best_k, off);
      if (ok >= 0 && (best_k < 0 || ov > best || (ov == best && ok < best_k))) {
        best = ov;
        best_k = ok;
      }
    }
    if (isnan(to_acc(z[0]))) best_k = 0;
    correct = lane == 0 && best_k == labels[n];  // a bad label never equals a k in [0,K)
  }
  const int block_count = __syncthreads_count(correct);
  if (threadIdx.x == 0 && block_count > 0) atomicAdd(count, (unsigned long long)block_count);
}

void check_args(const char* op, int N, int K, float smoothing) {
  CHECK(N > 0 && K > 0, op << ": needs N > 0 rows and K > 0 classes, got N = " << N
                           << ", K = " << K);
  CHECK(smoothing >= 0 && smoothing < 1,
        op << ": label smoothing must be in [0,1), got " << smoothing);
}

int row_blocks(int N) { return (N + kRowsPerBlock - 1) / kRowsPerBlock; }

}  // namespace

template <typename T>
void softmax_xent_forward_gpu(int N, int K, const T* logits, const int32_t* labels,
                              float smoothing, float* loss, cudaStream_t stream,
                              const float* class_weight) {
  check_args("softmax_xent_forward_gpu", N, K, smoothing);
  DeviceBuffer row_loss(sizeof(float) * size_t(N), current_device(), stream);
  float* rl = static_cast<float*>(row_loss.data());
  row_loss_kernel<<<row_blocks(N), 32 * kRowsPerBlock, 0, stream>>>(
      N, K, dev(logits), labels, class_weight, smoothing, rl, loss, arrival_counters(stream, 1));
  LAUNCH_CHECK();
}

template <typename T>
void softmax_xent_backward_gpu(int N, int K, const T* logits, const int32_t* labels,
                               float smoothing, const float* dloss, T* dlogits,
                               cudaStream_t stream, const float* class_weight) {
  check_args("softmax_xent_backward_gpu", N, K, smoothing);
  backward_kernel<<<row_blocks(N), 32 * kRowsPerBlock, 0, stream>>>(
      N, K, dev(logits), labels, class_weight, smoothing, dloss, dev(dlogits));
  LAUNCH_CHECK();
}

template <typename T>
void top1_correct_gpu(int N, int K, const T* logits, const int32_t* labels, int64_t* count,
                      cudaStream_t stream) {
  check_args("top1_correct_gpu", N, K, 0.0f);
  static_assert(sizeof(int64_t) == sizeof(unsigned long long), "count is a 64-bit integer");
  top1_kernel<<<row_blocks(N), 32 * kRowsPerBlock, 0, stream>>>(
      N, K, dev(logits), labels, reinterpret_cast<unsigned long long*>(count));
  LAUNCH_CHECK();
}

#define CUTRAIN_INSTANTIATE(T)                                                                 \
  template void softmax_xent_forward_gpu<T>(int, int, const T*, const int32_t*, float, float*, \
                                            cudaStream_t, const float*);                       \
  template void softmax_xent_backward_gpu<T>(int, int, const T*, const int32_t*, float,        \
                                             const float*, T*, cudaStream_t, const float*);    \
  template void top1_correct_gpu<T>(int, int, const T*, const int32_t*, int64_t*, cudaStream_t);
CUTRAIN_INSTANTIATE(float)
CUTRAIN_INSTANTIATE(half_t)
#undef CUTRAIN_INSTANTIATE

}  // namespace cutrain
