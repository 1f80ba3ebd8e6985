// The BatchNorm+ReLU ladder's v1 and v3 (batchnorm_ladder.h; v2 is kernels/batchnorm.cu).
//
// Math: batchnorm.h's training forward and backward; the CPU reference of all three rungs is
//   batchnorm_*_cpu. x is (M,C), channel c of pixel m at x[m*C + c], as in batchnorm.h.
// Launch: v1: a thread per channel for the sums ((C + 255) / 256 blocks of 256), then a
//   grid-stride thread per element; v3: G blocks of 256 threads in lanes of C / V threads (a
//   function of M and C), the last block to arrive finishing the statistics, then a thread per
//   vector. Each pass's launch beside its kernel below.
// Bytes: batchnorm_ladder.h's batchnorm_forward_train_rung_gpu_cost (v1 x three times and y,
//   v3 x twice and y) and batchnorm_backward_train_rung_gpu_cost (x, dy, y when fused, twice;
//   dx read and written).
// Flops: ~8 per element forward (v3 ~11: Welford's update), ~14 backward with dx: the same
//   functions (batchnorm_forward_train_rung_gpu_cost, batchnorm_backward_train_rung_gpu_cost).
// Precision: fp32 sums; v1 one running sum a channel (M roundings), v3 Welford on shifted
//   values and Chan's merges (kernels/ladder/welford.h); y and dx rounded to T once; within a
//   tolerance of the CPU, v3 the same bits on every run.
#include <cuda_fp16.h>

#include "kernels/arrival_counters.h"
#include "kernels/blocked_sum.h"
#include "kernels/check.h"
#include "kernels/cuda_util.cuh"
#include "kernels/hd.h"
#include "kernels/ladder/batchnorm_ladder.h"
#include "kernels/ladder/welford.h"

namespace cutrain {

namespace {

constexpr int kBlock = kBnVectorBlock;

// The masked gradient g = dy, or 0 where the fused ReLU's output is not positive.
__device__ __forceinline__ float masked(float y, float dy, bool relu) {
  return relu && !(y > 0.0f) ? 0.0f : dy;
}
// y = gamma * ((x - mean) * invstd) + beta, rounded to S, then the ReLU's rule: v2's formula.
template <typename S>
__device__ __forceinline__ S normalised(float x, float g, float b, float mu, float is, bool relu) {
  S v = from_acc<S>(g * ((x - mu) * is) + b);
  if (relu && !(to_acc(v) > 0.0f)) v = from_acc<S>(0.0f);
  return v;
}
// The batch's variance -> invstd, and the running averages: v2's FinishVariance.
__device__ __forceinline__ void finish_statistics(int c, int64_t count, float mean, float var,
                                                  float eps, float momentum, float* save_mean,
                                                  float* save_invstd, float* running_mean,
                                                  float* running_var) {
  save_mean[c] = mean;
  save_invstd[c] = 1.0f / sqrtf(var + eps);
  const float unbiased = var * float(count) / float(count - 1);
  running_mean[c] = (1.0f - momentum) * running_mean[c] + momentum * mean;
  running_var[c] = (1.0f - momentum) * running_var[c] + momentum * unbiased;
}

// ---- v1 naive ----------------------------------------------------------------------------
// What a first attempt looks like: the statistics of channel c by one thread, two plain loops
// over its M values (one running fp32 sum each: M roundings), then a thread per element.
// What changed: nothing yet; the CPU reference's loops (batchnorm.cpp) with a thread per
// channel. Why it is the floor: the normalise pass uses the whole GPU, but the sums run on C
// threads (32 to 128 in the default models), each reading its channel's M values one after
// another, strided by C: a GPU of 100,000 threads waits on a few dozen.

template <typename S>
__global__ void naive_stats_kernel(int64_t M, int C, const S* x, float eps, float momentum,
                                   float* save_mean, float* save_invstd, float* running_mean,
                                   float* running_var) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float s = 0;
  for (int64_t m = 0; m < M; m++) s += to_acc(x[m * C + c]);
  const float mean = s / float(M);
  float q = 0;
  for (int64_t m = 0; m < M; m++) {
    const float d = to_acc(x[m * C + c]) - mean;
    q += d * d;
  }
  finish_statistics(c, M, mean, q / float(M), eps, momentum, save_mean, save_invstd,
                    running_mean, running_var);
}

template <typename S>
__global__ void naive_normalize_kernel(int64_t M, int C, const S* x, const float* gamma,
                                       const float* beta, const float* mean, const float* invstd,
                                       bool relu, S* y) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < M * C;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int c = int(i % C);
    y[i] = normalised<S>(to_acc(x[i]), gamma[c], beta[c], mean[c], invstd[c], relu);
  }
}

// sums[c] = sum g, sums[C + c] = sum g * xhat (dbeta, dgamma += them), one thread a channel.
template <typename S>
__global__ void naive_grad_sums_kernel(int64_t M, int C, const S* x, const S* y, const S* dy,
                                       const float* mean, const float* invstd, bool relu,
                                       float* sums, float* dgamma, float* dbeta) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  float sg = 0, sgx = 0;
  for (int64_t m = 0; m < M; m++) {
    const int64_t i = m * C + c;
    const float g = masked(relu ? to_acc(y[i]) : 0.0f, to_acc(dy[i]), relu);
    sg += g;
    sgx += g * ((to_acc(x[i]) - mean[c]) * invstd[c]);
  }
  sums[c] = sg;
  sums[C + c] = sgx;
  if (dbeta) dbeta[c] += sg;
  if (dgamma) dgamma[c] += sgx;
}

// dx += (gamma*invstd/M) * (M*g - sum g - xhat * sum g*xhat): v2's dx_train_kernel's formula.
template <typename S>
__global__ void naive_dx_kernel(int64_t M, int C, const S* x, const S* y, const S* dy,
                                const float* gamma, const float* mean, const float* invstd,
                                const float* sums, bool relu, S* dx) {
  const float Ma = float(M);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < M * C;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int c = int(i % C);
    const float xhat = (to_acc(x[i]) - mean[c]) * invstd[c];
    const float g = masked(relu ? to_acc(y[i]) : 0.0f, to_acc(dy[i]), relu);
    const float d = gamma[c] * invstd[c] / Ma * (Ma * g - sums[c] - xhat * sums[C + c]);
    dx[i] = from_acc<S>(to_acc(dx[i]) + d);
  }
}

// ---- v3 vector ---------------------------------------------------------------------------
// What changed from v2 (kernels/batchnorm.cu): the mean and the variance in one pass over x
// (Welford's update, Chan's merge: welford.h) instead of two, and 16-byte loads and stores
// (V channels a thread) instead of one element a thread. Why it should be faster than v2:
// the forward reads x twice instead of three times (3n bytes instead of 4n: a quarter less
// traffic), and each memory instruction moves 16 bytes instead of 2 or 4. The backward keeps
// v2's two passes (its sums need the mean first), vectorised the same way.
// A thread owns V consecutive channels (one 16-byte vector: V = 8 halves or 4 floats) of a
// row; a row is O = C / V vectors; a block of 256 threads is L = 256 / O lanes of O threads
// (the threads past L*O idle), lane l of block b taking rows b*L + l, + gridDim.x*L, ...; the
// grid's G blocks are a function of M and C alone (so is every sum's order: the same bits on
// every run and GPU). Shared memory holds each lane's per-channel values, merged pairwise over
// the lanes (stride halving), and the block's result goes to scratch for the last block to
// arrive (last_block_to_arrive), which merges the G results in order and finishes.

template <typename S> constexpr int kVec = Pack128<S>::size;

int vec_lanes(int C, int V) { return kBlock / (C / V); }
int vec_groups(int64_t M, int lanes) {  // at least 16 rows a lane, at most 1024 blocks
  const int64_t g = (M + int64_t(lanes) * 16 - 1) / (int64_t(lanes) * 16);
  return int(g < 1 ? 1 : g > 1024 ? 1024 : g);
}
int next_pow2(int n) {
  int p = 1;
  while (p < n) p *= 2;
  return p;
}

// Forward statistics in one pass: per thread Welford over its rows, then Chan's merges. Every
// value is first shifted by its channel's first value x[0][c] (exact where x is within a factor
// 2 of it, else rounded once; the mean gets it back), so that
// Welford works on deviations of the data's own scale: unshifted, fp32 Welford loses three
// digits of the variance on activations far from 0 (tests/kernels/welford_test.cpp).
// part: (3, G, C) floats: n, mean (shifted), m2 of each block and channel.
template <typename S>
__global__ void vec_stats_kernel(int64_t M, int C, int L, int P2, const S* x, float eps,
                                 float momentum, float* part, float* save_mean,
                                 float* save_invstd, float* running_mean, float* running_var,
                                 unsigned* arrivals) {
  constexpr int V = kVec<S>;
  extern __shared__ float sh[];  // (3, L, C): n, mean, m2 of each lane and channel
  const int O = C / V, o = threadIdx.x % O, lane = threadIdx.x / O;
  const bool active = lane < L;
  float* sn = sh;
  float* smean = sh + L * C;
  float* sm2 = sh + 2 * L * C;
  if (active) {
    Welford<float> w[V];
    const Pack128<S> pivot = load128(x + int64_t(o) * V);  // row 0: the shifts
    for (int64_t m = int64_t(blockIdx.x) * L + lane; m < M; m += int64_t(gridDim.x) * L) {
      const Pack128<S> p = load128(x + m * C + int64_t(o) * V);
      const float inv = div_rn(1.0f, add_rn(w[0].n, 1.0f));  // the same count in every channel
#pragma unroll
      for (int j = 0; j < V; j++)
        welford_add(w[j], sub_rn(to_acc(p.v[j]), to_acc(pivot.v[j])), inv);
    }
#pragma unroll
    for (int j = 0; j < V; j++) {
      const int at = lane * C + o * V + j;
      sn[at] = w[j].n, smean[at] = w[j].mean, sm2[at] = w[j].m2;
    }
  }
  __syncthreads();
  for (int stride = P2 / 2; stride >= 1; stride /= 2) {
    if (active && lane < stride && lane + stride < L)
      for (int j = 0; j < V; j++) {
        const int a = lane * C + o * V + j, b = (lane + stride) * C + o * V + j;
        const Welford<float> r = welford_merge(Welford<float>{sn[a], smean[a], sm2[a]},
                                               Welford<float>{sn[b], smean[b], sm2[b]});
        sn[a] = r.n, smean[a] = r.mean, sm2[a] = r.m2;
      }
    __syncthreads();
  }
  const int G = int(gridDim.x);
  if (active && lane == 0)
    for (int j = 0; j < V; j++) {
      const int c = o * V + j;
      part[(0 * int64_t(G) + blockIdx.x) * C + c] = sn[c];
      part[(1 * int64_t(G) + blockIdx.x) * C + c] = smean[c];
      part[(2 * int64_t(G) + blockIdx.x) * C + c] = sm2[c];
    }
  if (!last_block_to_arrive(arrivals, gridDim.x)) return;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    Welford<float> all;
    for (int g = 0; g < G; g++)
      all = welford_merge(all, Welford<float>{__ldcg(&part[(0 * int64_t(G) + g) * C + c]),
                                              __ldcg(&part[(1 * int64_t(G) + g) * C + c]),
                                              __ldcg(&part[(2 * int64_t(G) + g) * C + c])});
    finish_statistics(c, M, add_rn(all.mean, to_acc(x[c])), all.m2 / float(M), eps, momentum,
                      save_mean, save_invstd, running_mean, running_var);
  }
}

template <typename S>
__global__ void vec_normalize_kernel(int64_t M, int C, const S* x, const float* gamma,
                                     const float* beta, const float* mean, const float* invstd,
                                     bool relu, S* y) {
  constexpr int V = kVec<S>;
  const int O = C / V;
  for (int64_t q = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; q < M * O;
       q += int64_t(gridDim.x) * blockDim.x) {
    const int c0 = int(q % O) * V;
    const Pack128<S> in = load128(x + q * V);  // vector q of the (M, C) array: row q / O
    Pack128<S> out;
#pragma unroll
    for (int j = 0; j < V; j++) {
      const int c = c0 + j;
      out.v[j] = normalised<S>(to_acc(in.v[j]), gamma[c], beta[c], mean[c], invstd[c], relu);
    }
    store128(y + q * V, out);
  }
}

// Backward sums in one pass (g and g*xhat), plain fp32 in each thread (about 16 rows), the
// lanes pairwise, the G partials pairwise (blocked_sum) in the last block: v2's FinishGrad.
// part: (2, G, C).
template <typename S>
__global__ void vec_grad_sums_kernel(int64_t M, int C, int L, int P2, const S* x, const S* y,
                                     const S* dy, const float* mean, const float* invstd,
                                     bool relu, float* part, float* sums, float* dgamma,
                                     float* dbeta, unsigned* arrivals) {
  constexpr int V = kVec<S>;
  extern __shared__ float sh[];  // (2, L, C)
  const int O = C / V, o = threadIdx.x % O, lane = threadIdx.x / O;
  const bool active = lane < L;
  if (active) {
    float sg[V] = {}, sgx[V] = {};
    for (int64_t m = int64_t(blockIdx.x) * L + lane; m < M; m += int64_t(gridDim.x) * L) {
      const int64_t at = m * C + int64_t(o) * V;
      const Pack128<S> px = load128(x + at), pd = load128(dy + at);
      Pack128<S> py = pd;
      if (relu) py = load128(y + at);
#pragma unroll
      for (int j = 0; j < V; j++) {
        const int c = o * V + j;
        const float g = masked(relu ? to_acc(py.v[j]) : 0.0f, to_acc(pd.v[j]), relu);
        sg[j] += g;
        sgx[j] += g * ((to_acc(px.v[j]) - mean[c]) * invstd[c]);
      }
    }
    for (int j = 0; j < V; j++) {
      sh[lane * C + o * V + j] = sg[j];
      sh[(L + lane) * C + o * V + j] = sgx[j];
    }
  }
  __syncthreads();
  for (int stride = P2 / 2; stride >= 1; stride /= 2) {
    if (active && lane < stride && lane + stride < L)
      for (int j = 0; j < V; j++)
        for (int k = 0; k < 2; k++)
          sh[(k * L + lane) * C + o * V + j] += sh[(k * L + lane + stride) * C + o * V + j];
    __syncthreads();
  }
  const int G = int(gridDim.x);
  if (active && lane == 0)
    for (int j = 0; j < V; j++)
      for (int k = 0; k < 2; k++)
        part[(k * int64_t(G) + blockIdx.x) * C + o * V + j] = sh[(k * L) * C + o * V + j];
  if (!last_block_to_arrive(arrivals, gridDim.x)) return;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float t[2];
    for (int k = 0; k < 2; k++)
      t[k] = blocked_sum<float, 1>(G, [&](int64_t g) {
        return __ldcg(&part[(k * int64_t(G) + g) * C + c]);
      });
    sums[c] = t[0];
    sums[C + c] = t[1];
    if (dbeta) dbeta[c] += t[0];
    if (dgamma) dgamma[c] += t[1];
  }
}

template <typename S>
__global__ void vec_dx_kernel(int64_t M, int C, const S* x, const S* y, const S* dy,
                              const float* gamma, const float* mean, const float* invstd,
                              const float* sums, bool relu, S* dx) {
  constexpr int V = kVec<S>;
  const int O = C / V;
  const float Ma = float(M);
  for (int64_t q = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; q < M * O;
       q += int64_t(gridDim.x) * blockDim.x) {
    const int c0 = int(q % O) * V;
    const Pack128<S> px = load128(x + q * V), pd = load128(dy + q * V);
    const Pack128<S> py = relu ? load128(y + q * V) : pd;
    Pack128<S> out = load128(dx + q * V);
#pragma unroll
    for (int j = 0; j < V; j++) {
      const int c = c0 + j;
      const float is = invstd[c], k = gamma[c] * is / Ma;
      const float xhat = (to_acc(px.v[j]) - mean[c]) * is;
      const float g = masked(relu ? to_acc(py.v[j]) : 0.0f, to_acc(pd.v[j]), relu);
      const float d = k * (Ma * g - sums[c] - xhat * sums[C + c]);
      out.v[j] = from_acc<S>(to_acc(out.v[j]) + d);
    }
    store128(dx + q * V, out);
  }
}

}  // namespace

template <typename T>
void batchnorm_forward_train_rung_gpu(BnRung r, int64_t M, int C, const T* x, const float* gamma,
                                      const float* beta, double eps, double momentum, bool relu,
                                      T* y, float* save_mean, float* save_invstd,
                                      float* running_mean, float* running_var,
                                      cudaStream_t stream) {
  CHECK(M >= 2 && C > 0, "batchnorm ladder: needs M >= 2 and C > 0, got M = " << M << ", C = "
                                                                              << C);
  using S = storage_t<T>;
  const void* tensors[2] = {x, y};
  r = bn_rung_runs(r, M, C, sizeof(T), tensors, 2);
  if (r == BnRung::blocked)
    return batchnorm_forward_train_gpu<T>(M, C, x, gamma, beta, eps, momentum, relu, y,
                                          save_mean, save_invstd, running_mean, running_var,
                                          stream);
  if (r == BnRung::naive) {
    naive_stats_kernel<<<(C + 255) / 256, 256, 0, stream>>>(
        M, C, dev(x), float(eps), float(momentum), save_mean, save_invstd, running_mean,
        running_var);
    LAUNCH_CHECK();
    naive_normalize_kernel<<<grid_size(M * C, kBlock), kBlock, 0, stream>>>(
        M, C, dev(x), gamma, beta, save_mean, save_invstd, relu, dev(y));
    LAUNCH_CHECK();
    return;
  }
  constexpr int V = kVec<S>;
  const int L = vec_lanes(C, V), G = vec_groups(M, L);
  DeviceBuffer part(sizeof(float) * 3 * size_t(G) * size_t(C), current_device(), stream);
  vec_stats_kernel<<<G, kBlock, sizeof(float) * 3 * size_t(L) * size_t(C), stream>>>(
      M, C, L, next_pow2(L), dev(x), float(eps), float(momentum), static_cast<float*>(part.data()),
      save_mean, save_invstd, running_mean, running_var, arrival_counters(stream, 1));
  LAUNCH_CHECK();
  vec_normalize_kernel<<<grid_size(M * (C / V), kBlock), kBlock, 0, stream>>>(
      M, C, dev(x), gamma, beta, save_mean, save_invstd, relu, dev(y));
  LAUNCH_CHECK();
}

template <typename T>
void batchnorm_backward_train_rung_gpu(BnRung r, int64_t M, int C, const T* x, const T* y,
                                       const T* dy, const float* gamma, const float* save_mean,
                                       const float* save_invstd, bool relu, T* dx, float* dgamma,
                                       float* dbeta, cudaStream_t stream) {
  CHECK(M >= 1 && C > 0 && (!relu || y), "batchnorm ladder: needs M, C > 0 (and y when fused)");
  using S = storage_t<T>;
  const void* tensors[4] = {x, y, dy, dx};
  r = bn_rung_runs(r, M, C, sizeof(T), tensors, 4);
  if (r == BnRung::blocked)
    return batchnorm_backward_train_gpu<T>(M, C, x, y, dy, gamma, save_mean, save_invstd, relu,
                                           dx, dgamma, dbeta, stream);
  DeviceBuffer sums(sizeof(float) * 2 * size_t(C), current_device(), stream);
  float* s = static_cast<float*>(sums.data());
  if (r == BnRung::naive) {
    naive_grad_sums_kernel<<<(C + 255) / 256, 256, 0, stream>>>(
        M, C, dev(x), dev(y), dev(dy), save_mean, save_invstd, relu, s, dgamma, dbeta);
    LAUNCH_CHECK();
    if (!dx) return;
    naive_dx_kernel<<<grid_size(M * C, kBlock), kBlock, 0, stream>>>(
        M, C, dev(x), dev(y), dev(dy), gamma, save_mean, save_invstd, s, relu, dev(dx));
    LAUNCH_CHECK();
    return;
  }
  constexpr int V = kVec<S>;
  const int L = vec_lanes(C, V), G = vec_groups(M, L);
  DeviceBuffer part(sizeof(float) * 2 * size_t(G) * size_t(C), current_device(), stream);
  vec_grad_sums_kernel<<<G, kBlock, sizeof(float) * 2 * size_t(L) * size_t(C), stream>>>(
      M, C, L, next_pow2(L), dev(x), dev(y), dev(dy), save_mean, save_invstd, relu,
      static_cast<float*>(part.data()), s, dgamma, dbeta, arrival_counters(stream, 1));
  LAUNCH_CHECK();
  if (!dx) return;
  vec_dx_kernel<<<grid_size(M * (C / V), kBlock), kBlock, 0, stream>>>(
      M, C, dev(x), dev(y), dev(dy), gamma, save_mean, save_invstd, s, relu, dev(dx));
  LAUNCH_CHECK();
}

#define CUTRAIN_INSTANTIATE(T)                                                                 \
  template void batchnorm_forward_train_rung_gpu<T>(BnRung, int64_t, int, const T*,            \
                                                    const float*, const float*, double, double, \
                                                    bool, T*, float*, float*, float*, float*,  \
                                                    cudaStream_t);                             \
  template void batchnorm_backward_train_rung_gpu<T>(BnRung, int64_t, int, const T*, const T*, \
                                                     const T*, const float*, const float*,     \
                                                     const float*, bool, T*, float*, float*,   \
                                                     cudaStream_t);
CUTRAIN_INSTANTIATE(float)
CUTRAIN_INSTANTIATE(half_t)
#undef CUTRAIN_INSTANTIATE

}  // namespace cutrain
