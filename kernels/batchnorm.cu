// batch normalisation on the GPU, optionally fused with the ReLU after it.
//
// These are the BatchNorm ladder's v2 (kernels/ladder/README.md; v1 and v3 in
// kernels/ladder/batchnorm_ladder.cu). What changed from v1 (a thread per channel sums its M
// values, then a thread per element): the sums are spread over the whole GPU, a block of 32
// channels by 8 row lanes, the rows split over gridDim.y blocks, their partials added
// pairwise by the last block to arrive (below), and each thread's own sum blocked pairwise.
// Why it should be faster than v1: v1's sums run on C threads (32 for the default model's
// first layers) while the GPU holds 100,000; here every SM reads x, coalesced (a warp is a
// row of 32 neighbouring channels). And a term of a sum meets at most about a hundred
// roundings (below) instead of up to M.
// What it leaves to v3: x is read three times (mean, variance, y), one element a thread.
//
// Math: batchnorm.h (batchnorm_*_cpu). x is (M,C): channel c of pixel m is x[m*C + c].
// Launch: every kernel here runs on the same 2-D geometry: a block is 32 channels (threadIdx.x) by
//   8 row lanes (threadIdx.y); gridDim.x covers the channels, gridDim.y splits the rows, and each
//   thread walks its rows m = blockIdx.y*8 + threadIdx.y, + gridDim.y*8, ... for one channel c. A
//   warp is one row of 32 neighbouring channels: coalesced reads in NHWC, and no division by C to
//   find an element's channel.
//   Per-channel sums (deterministic; atomics only count arrivals): channel_partials_kernel sums
//   each thread's rows in fp32, blocked pairwise (kernels/blocked_sum.h), adds the 8 row lanes of a
//   block pairwise (shared memory), and writes one partial per (row group, channel) to scratch. The
//   block of a column of channels that finishes last (last_block_to_arrive, kernels/cuda_util.cuh)
//   then adds the column's gridDim.y partials the same way (lane y takes partials y, y + 8, ...;
//   then the 8 lanes pairwise) and finishes the statistic (the mean, the variance and running
//   averages, or the backward's sums): one launch where a separate finalize kernel made two.
//   gridDim.y is a function of M alone (row_groups), so the order of every addition, hence every
//   bit, is the same on every run and every GPU, whichever block arrives last. A term meets at most
//   b + log2(rows/b) roundings in its thread (b = 64; rows = ceil(M / (8 gridDim.y)): at most 64 up
//   to M = 2^19), 3 among the lanes and at most 8 + 4 + 3 = 15 among the partials (at most 128 a
//   lane, in blocks of 8), where one running sum per thread and per finalize gave rows + 8 +
//   gridDim.y (over 1000 for a large batch).
//
// Bytes: training forward reads x three times (mean, variance, y) and writes y:
//   4*M*C*sizeof(T) (batchnorm_forward_train_gpu_cost); training backward reads x, dy (and y
//   when fused) twice and dx once, and writes dx (batchnorm_backward_train_gpu_cost); eval:
//   batchnorm_forward_eval_gpu_cost, batchnorm_backward_eval_gpu_cost;
//   batchnorm_running_update_gpu_cost.
// Flops: ~8 per element forward, ~14 backward with dx (the same cost functions:
//   batchnorm_forward_train_gpu_cost, batchnorm_backward_train_gpu_cost). Memory bound.
// Precision: fp32 for every sum and per-channel value; y and dx rounded to T once. The sums run
//   in another order than the CPU's (blocks of pixels in order, then pairwise): results agree
//   with batchnorm_*_cpu (composed with relu_*_cpu when fused) within a tolerance, not bit for
//   bit.
#include "kernels/batchnorm.h"

#include "kernels/blocked_sum.h"
#include "kernels/arrival_counters.h"
#include "kernels/cuda_util.cuh"
#include "kernels/hd.h"

namespace cutrain {

namespace {

constexpr int kTX = 32;  // channels per block
constexpr int kTY = 8;   // row lanes per block

// Row groups (gridDim.y) of the sums: at least 16 rows per thread, at most 1024 groups.
// Depends on M only, never on the device, so the summation order is fixed.
int row_groups(int64_t M) {
  const int64_t g = (M + kTY * 16 - 1) / (kTY * 16);
  return int(g < 1 ? 1 : g > 1024 ? 1024 : g);
}
int columns(int C) { return (C + kTX - 1) / kTX; }  // gridDim.x: blocks across the channels
dim3 grid_2d(int C, int groups) { return dim3(columns(C), groups); }
// Row groups of the per-element passes: one row per thread where possible (capped: the kernels
// loop beyond).
int apply_groups(int64_t M) {
  const int64_t g = (M + kTY - 1) / kTY;
  return int(g < 1 ? 1 : g > 4096 ? 4096 : g);
}

// One lane's share of a block's sums: acc[k] += term k of rows first + j * stride, j < rows
// (term(r, v) writes the kSums values of row r to v), blocked in blocks of B rows (BlockedSum:
// kSumBlock for the rows, 8 for the partials, at most 128 a lane, so that a partial meets few
// roundings). Whole blocks in a loop of fixed length, then the tail row by row; the same bits
// as add() on every row. Either way
// kInFlight rows are loaded before they are added (unrolled), so that many loads are in
// flight at once, not one: a lane's rows are few (16 in a training batch's main pass, up to
// 128 partials in the last block's), and one load at a time would leave it waiting on memory.
// Then the block's kTY lanes are added pairwise through `lanes`: the totals are valid in lane
// threadIdx.y == 0.
constexpr int kInFlight = 8;
template <int kSums, int B, typename Term>
__device__ void block_sums(int64_t first, int64_t stride, int64_t rows, Term term,
                           float (&lanes)[kSums][kTY][kTX], float* totals) {
  static_assert(B % kInFlight == 0, "whole groups of loads in a block");
  BlockedSum<float, B> acc[kSums];
  int64_t j = 0;
  for (; j + B <= rows; j += B) {
    float block[kSums] = {};
#pragma unroll kInFlight
    for (int i = 0; i < B; i++) {
      float v[kSums];
      term(first + (j + i) * stride, v);
      for (int k = 0; k < kSums; k++) block[k] += v[k];
    }
    for (int k = 0; k < kSums; k++) acc[k].add_block(block[k]);
  }
  for (; j < rows; j += kInFlight) {  // the tail: loaded kInFlight rows at a time, added in order
    float v[kInFlight][kSums];
#pragma unroll
    for (int i = 0; i < kInFlight; i++)
      if (j + i < rows) term(first + (j + i) * stride, v[i]);
#pragma unroll
    for (int i = 0; i < kInFlight; i++)
      if (j + i < rows)
        for (int k = 0; k < kSums; k++) acc[k].add(v[i][k]);
  }
  for (int k = 0; k < kSums; k++) lanes[k][threadIdx.y][threadIdx.x] = acc[k].total();
  __syncthreads();
  if (threadIdx.y == 0)
    for (int k = 0; k < kSums; k++)
      totals[k] = blocked_sum<float, 1>(kTY, [&](int64_t r) { return lanes[k][r][threadIdx.x]; });
}

// partial[k][blockIdx.y][c] = sum over this block's rows m of term k at (m, c), k < kSums.
// term(m, c, v) writes its kSums values at (m, c) to v[0..kSums). Then the last block of each
// column of channels adds the column's gridDim.y partials the same way (lane y takes partials
// y, y + 8, ...) and calls finish(c, totals) once per channel (arrivals: one counter per
// column, arrival_counters).
template <int kSums, typename Term, typename Finish>
__global__ void channel_partials_kernel(int64_t M, int C, Term term, float* partial,
                                        Finish finish, unsigned* arrivals) {
  __shared__ float lanes[kSums][kTY][kTX];
  const int c = blockIdx.x * kTX + threadIdx.x;
  const int G = int(gridDim.y);
  const int64_t first = int64_t(blockIdx.y) * kTY + threadIdx.y, stride = int64_t(G) * kTY;
  const int64_t rows = c < C && first < M ? (M - first + stride - 1) / stride : 0;
  float totals[kSums];
  block_sums<kSums, kSumBlock>(first, stride, rows, [&](int64_t m, float* v) { term(m, c, v); },
                               lanes, totals);
  if (threadIdx.y == 0 && c < C)
    for (int k = 0; k < kSums; k++) partial[(int64_t(k) * G + blockIdx.y) * C + c] = totals[k];
  // (lanes is free again: last_block_to_arrive passes a __syncthreads.)
  if (!last_block_to_arrive(&arrivals[blockIdx.x], gridDim.y)) return;
  const int64_t parts = c < C ? (G - int(threadIdx.y) + kTY - 1) / kTY : 0;
  block_sums<kSums, 8>(threadIdx.y, kTY, parts, [&](int64_t g, float* v) {
    for (int k = 0; k < kSums; k++) v[k] = __ldcg(&partial[(int64_t(k) * G + g) * C + c]);
  }, lanes, totals);
  if (threadIdx.y == 0 && c < C) finish(c, totals);
}

// The sums' terms.
template <typename S> struct TermX {  // x
  const S* x;
  int C;
  __device__ void operator()(int64_t m, int c, float* v) const { v[0] = to_acc(x[m * C + c]); }
};
template <typename S> struct TermSquaredDeviation {  // (x - mean)^2
  const S* x;
  const float* mean;
  int C;
  __device__ void operator()(int64_t m, int c, float* v) const {
    const float d = to_acc(x[m * C + c]) - mean[c];
    v[0] = d * d;
  }
};
// The masked gradient g = dy * (y > 0 when fused) and (g, g * xhat), xhat = (x - mean)*invstd.
template <typename S>
__device__ float masked_dy(const S* y, const S* dy, bool relu, int64_t i) {
  return relu && !(to_acc(y[i]) > 0.0f) ? 0.0f : to_acc(dy[i]);
}
template <typename S> struct TermDyDyXhat {
  const S *x, *y, *dy;
  const float *mean, *invstd;
  bool relu;
  int C;
  __device__ void operator()(int64_t m, int c, float* v) const {
    const int64_t i = m * C + c;
    const float g = masked_dy(y, dy, relu, i);
    v[0] = g;
    v[1] = g * ((to_acc(x[i]) - mean[c]) * invstd[c]);
  }
};

// What the last block does with a channel's totals (channel_partials_kernel's Finish).
struct FinishSum {  // out[c] = the total (this replica's sum, for a synced batch's collective)
  float* out;
  __device__ void operator()(int c, const float* t) const { out[c] = t[0]; }
};
struct FinishMean {  // mean[c] = sum / count
  int64_t count;
  float* mean;
  __device__ void operator()(int c, const float* t) const { mean[c] = t[0] / float(count); }
};
// The biased variance of the batch -> save_invstd; the running averages (unbiased variance),
// in the CPU's order of operations.
struct FinishVariance {
  int64_t count;
  float eps, momentum;
  const float* mean;
  float *save_invstd, *running_mean, *running_var;
  __device__ void operator()(int c, const float* t) const {
    const float var = t[0] / float(count);
    save_invstd[c] = 1.0f / sqrtf(var + eps);
    const float unbiased = var * float(count) / float(count - 1);
    running_mean[c] = (1.0f - momentum) * running_mean[c] + momentum * mean[c];
    running_var[c] = (1.0f - momentum) * running_var[c] + momentum * unbiased;
  }
};
// sums[c] = sum g, sums[C + c] = sum g*xhat; dbeta += the first, dgamma += the second.
struct FinishGrad {
  int C;
  float *sums, *dgamma, *dbeta;
  __device__ void operator()(int c, const float* t) const {
    sums[c] = t[0];
    sums[C + c] = t[1];
    if (dbeta) dbeta[c] += t[0];
    if (dgamma) dgamma[c] += t[1];
  }
};

// A synced batch, after the collective: finish each channel from its sum over every replica.
template <class Finish> __global__ void finish_kernel(int C, const float* sums, Finish finish) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c < C) finish(c, &sums[c]);
}

// invstd[c] = 1 / sqrt(var[c] + eps) (eval: from the running variance)
__global__ void invstd_kernel(int C, const float* var, float eps, float* invstd) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c < C) invstd[c] = 1.0f / sqrtf(var[c] + eps);
}

// y = gamma * ((x - mean) * invstd) + beta, rounded to T; then relu's rule when fused.
// One thread per element (2-D geometry above). Matches batchnorm_forward_*_cpu's last loop.
template <typename S>
__global__ void normalize_kernel(int64_t M, int C, const S* x, const float* gamma,
                                 const float* beta, const float* mean, const float* invstd,
                                 bool relu, S* y) {
  const int c = blockIdx.x * kTX + threadIdx.x;
  if (c >= C) return;
  const float g = gamma[c], b = beta[c], mu = mean[c], is = invstd[c];
  for (int64_t m = int64_t(blockIdx.y) * kTY + threadIdx.y; m < M; m += int64_t(gridDim.y) * kTY) {
    const int64_t i = m * C + c;
    S v = from_acc<S>(g * ((to_acc(x[i]) - mu) * is) + b);
    if (relu && !(to_acc(v) > 0.0f)) v = from_acc<S>(0.0f);
    y[i] = v;
  }
}

// dx += (gamma*invstd/N) * (N*g - sum g - xhat * sum g*xhat), g the masked dy, N = count
// (M, or every replica's M with sync; batchnorm_backward_train_cpu's last loop).
template <typename S>
__global__ void dx_train_kernel(int64_t M, int64_t count, int C, const S* x, const S* y,
                                const S* dy, const float* gamma, const float* mean,
                                const float* invstd, const float* sums, bool relu, S* dx) {
  const int c = blockIdx.x * kTX + threadIdx.x;
  if (c >= C) return;
  const float Ma = float(count), mu = mean[c], is = invstd[c];
  const float k = gamma[c] * is / Ma, sdy = sums[c], sdyx = sums[C + c];
  for (int64_t m = int64_t(blockIdx.y) * kTY + threadIdx.y; m < M; m += int64_t(gridDim.y) * kTY) {
    const int64_t i = m * C + c;
    const float xhat = (to_acc(x[i]) - mu) * is;
    const float d = k * (Ma * masked_dy(y, dy, relu, i) - sdy - xhat * sdyx);
    dx[i] = from_acc<S>(to_acc(dx[i]) + d);
  }
}

// dx += g * gamma * invstd, g the masked dy (batchnorm_backward_eval_cpu's last loop).
template <typename S>
__global__ void dx_eval_kernel(int64_t M, int C, const S* y, const S* dy, const float* gamma,
                               const float* invstd, bool relu, S* dx) {
  const int c = blockIdx.x * kTX + threadIdx.x;
  if (c >= C) return;
  const float g = gamma[c], is = invstd[c];
  for (int64_t m = int64_t(blockIdx.y) * kTY + threadIdx.y; m < M; m += int64_t(gridDim.y) * kTY) {
    const int64_t i = m * C + c;
    dx[i] = from_acc<S>(to_acc(dx[i]) + masked_dy(y, dy, relu, i) * g * is);
  }
}

const dim3 kBlock2d(kTX, kTY);
int blocks_1d(int C) { return (C + 255) / 256; }

// Scratch for kSums partials of G row groups: kSums * G * C floats from the caching pool.
DeviceBuffer partial_buffer(int kSums, int G, int C, cudaStream_t stream) {
  return DeviceBuffer(sizeof(float) * size_t(kSums) * size_t(G) * size_t(C), current_device(),
                      stream);
}

// The backward's per-channel sums into sums (2C floats) and dgamma/dbeta (+=).
template <typename S>
void backward_sums(int64_t M, int C, const S* x, const S* y, const S* dy, const float* mean,
                   const float* invstd, bool relu, float* sums, float* dgamma, float* dbeta,
                   cudaStream_t stream) {
  const int G = row_groups(M);
  DeviceBuffer partial = partial_buffer(2, G, C, stream);
  float* p = static_cast<float*>(partial.data());
  TermDyDyXhat<S> term{x, y, dy, mean, invstd, relu, C};
  channel_partials_kernel<2><<<grid_2d(C, G), kBlock2d, 0, stream>>>(
      M, C, term, p, FinishGrad{C, sums, dgamma, dbeta}, arrival_counters(stream, columns(C)));
  LAUNCH_CHECK();
}

void check_sizes(const char* op, int64_t M, int C, bool relu, const void* y) {
  CHECK(M > 0 && C > 0, op << ": needs M > 0 and C > 0, got M = " << M << ", C = " << C);
  CHECK(!relu || y, op << ": the fused ReLU needs the forward output y");
}

}  // namespace

template <typename T>
void batchnorm_forward_train_gpu(int64_t M, int C, const T* x, const float* gamma,
                                 const float* beta, double eps, double momentum, bool relu,
                                 T* y, float* save_mean, float* save_invstd,
                                 float* running_mean, float* running_var, cudaStream_t stream,
                                 const BatchNormSync* sync) {
  const int64_t count = sync ? sync->count : M;  // values per channel, over every replica
  CHECK(M >= 1 && count >= 2 && C > 0,
        "batchnorm_forward_train_gpu: needs at least 2 values per channel (one has no "
        "variance) and C > 0, got M = " << M << " (" << count << " over every replica), C = "
                                        << C);
  using S = storage_t<T>;
  const int G = row_groups(M);
  DeviceBuffer partial = partial_buffer(1, G, C, stream);
  float* p = static_cast<float*>(partial.data());
  unsigned* arrivals = arrival_counters(stream, columns(C));
  DeviceBuffer total;  // with sync: this replica's C sums, handed to the collective
  if (sync) total = DeviceBuffer(sizeof(float) * size_t(C), current_device(), stream);
  float* t = static_cast<float*>(total.data());
  // One statistic's pass: the sums of `term`, then `finish` on each channel's total: in the
  // pass's last blocks, or with sync after the collective (the last blocks write this
  // replica's sums, FinishSum).
  auto statistic = [&](auto term, auto finish) {
    if (sync) {
      channel_partials_kernel<1><<<grid_2d(C, G), kBlock2d, 0, stream>>>(M, C, term, p,
                                                                         FinishSum{t}, arrivals);
      LAUNCH_CHECK();
      sync->sum(t, C);
      finish_kernel<<<blocks_1d(C), 256, 0, stream>>>(C, t, finish);
    } else {
      channel_partials_kernel<1><<<grid_2d(C, G), kBlock2d, 0, stream>>>(M, C, term, p, finish,
                                                                         arrivals);
    }
    LAUNCH_CHECK();
  };
  // Pass 1: the mean, straight into save_mean.
  statistic(TermX<S>{dev(x), C}, FinishMean{count, save_mean});
  // Pass 2: the variance as the mean squared deviation (two passes: see batchnorm.cpp).
  statistic(TermSquaredDeviation<S>{dev(x), save_mean, C},
            FinishVariance{count, float(eps), float(momentum), save_mean, save_invstd,
                           running_mean, running_var});
  // Pass 3: y.
  normalize_kernel<<<grid_2d(C, apply_groups(M)), kBlock2d, 0, stream>>>(
      M, C, dev(x), gamma, beta, save_mean, save_invstd, relu, dev(y));
  LAUNCH_CHECK();
}

template <typename T>
void batchnorm_forward_eval_gpu(int64_t M, int C, const T* x, const float* gamma,
                                const float* beta, const float* running_mean,
                                const float* running_var, double eps, bool relu, T* y,
                                cudaStream_t stream) {
  check_sizes("batchnorm_forward_eval_gpu", M, C, false, nullptr);
  DeviceBuffer invstd(sizeof(float) * size_t(C), current_device(), stream);
  float* is = static_cast<float*>(invstd.data());
  invstd_kernel<<<blocks_1d(C), 256, 0, stream>>>(C, running_var, float(eps), is);
  LAUNCH_CHECK();
  normalize_kernel<<<grid_2d(C, apply_groups(M)), kBlock2d, 0, stream>>>(
      M, C, dev(x), gamma, beta, running_mean, is, relu, dev(y));
  LAUNCH_CHECK();
}

template <typename T>
void batchnorm_backward_train_gpu(int64_t M, int C, const T* x, const T* y, const T* dy,
                                  const float* gamma, const float* save_mean,
                                  const float* save_invstd, bool relu, T* dx, float* dgamma,
                                  float* dbeta, cudaStream_t stream,
                                  const BatchNormSync* sync) {
  check_sizes("batchnorm_backward_train_gpu", M, C, relu, y);
  DeviceBuffer sums(sizeof(float) * 2 * size_t(C), current_device(), stream);
  float* s = static_cast<float*>(sums.data());
  // The sums are needed for dx even when dgamma and dbeta are not wanted; dgamma and dbeta
  // take this replica's own.
  backward_sums(M, C, dev(x), dev(y), dev(dy), save_mean, save_invstd, relu, s, dgamma, dbeta,
                stream);
  if (sync) sync->sum(s, 2 * C);  // every replica joins, whether or not it wants dx
  if (!dx) return;
  dx_train_kernel<<<grid_2d(C, apply_groups(M)), kBlock2d, 0, stream>>>(
      M, sync ? sync->count : M, C, dev(x), dev(y), dev(dy), gamma, save_mean, save_invstd, s,
      relu, dev(dx));
  LAUNCH_CHECK();
}

template <typename T>
void batchnorm_backward_eval_gpu(int64_t M, int C, const T* x, const T* y, const T* dy,
                                 const float* gamma, const float* running_mean,
                                 const float* running_var, double eps, bool relu, T* dx,
                                 float* dgamma, float* dbeta, cudaStream_t stream) {
  check_sizes("batchnorm_backward_eval_gpu", M, C, relu, y);
  DeviceBuffer scratch(sizeof(float) * 3 * size_t(C), current_device(), stream);
  float* is = static_cast<float*>(scratch.data());  // invstd (C), then the sums (2C)
  invstd_kernel<<<blocks_1d(C), 256, 0, stream>>>(C, running_var, float(eps), is);
  LAUNCH_CHECK();
  if (dgamma || dbeta)
    backward_sums(M, C, dev(x), dev(y), dev(dy), running_mean, is, relu, is + C, dgamma, dbeta,
                  stream);
  if (!dx) return;
  dx_eval_kernel<<<grid_2d(C, apply_groups(M)), kBlock2d, 0, stream>>>(
      M, C, dev(y), dev(dy), gamma, is, relu, dev(dx));
  LAUNCH_CHECK();
}

namespace {
// batchnorm_running_update_cpu's arithmetic, each operation rounded once (hd.h).
__global__ void running_update_kernel(int C, const float* sums, float scale, float mom,
                                      float* running_mean, float* running_var) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const float keep = sub_rn(1.0f, mom);
  running_mean[c] = add_rn(mul_rn(keep, running_mean[c]), mul_rn(mom, mul_rn(sums[c], scale)));
  running_var[c] = add_rn(mul_rn(keep, running_var[c]), mul_rn(mom, mul_rn(sums[C + c], scale)));
}
}  // namespace

void batchnorm_running_update_gpu(int C, const float* sums, double scale, double momentum,
                                  float* running_mean, float* running_var, cudaStream_t stream) {
  CHECK(C > 0, "batchnorm_running_update_gpu: C = " << C);
  running_update_kernel<<<blocks_1d(C), 256, 0, stream>>>(C, sums, float(scale), float(momentum),
                                                           running_mean, running_var);
  LAUNCH_CHECK();
}

#define CUTRAIN_INSTANTIATE(T)                                                                 \
  template void batchnorm_forward_train_gpu<T>(int64_t, int, const T*, const float*,           \
                                               const float*, double, double, bool, T*, float*, \
                                               float*, float*, float*, cudaStream_t,           \
                                               const BatchNormSync*);                          \
  template void batchnorm_forward_eval_gpu<T>(int64_t, int, const T*, const float*,            \
                                              const float*, const float*, const float*, double, \
                                              bool, T*, cudaStream_t);                         \
  template void batchnorm_backward_train_gpu<T>(int64_t, int, const T*, const T*, const T*,    \
                                                const float*, const float*, const float*, bool, \
                                                T*, float*, float*, cudaStream_t,              \
                                                const BatchNormSync*);                         \
  template void batchnorm_backward_eval_gpu<T>(int64_t, int, const T*, const T*, const T*,     \
                                               const float*, const float*, const float*,       \
                                               double, bool, T*, float*, float*, cudaStream_t);
CUTRAIN_INSTANTIATE(float)
CUTRAIN_INSTANTIATE(half_t)
#undef CUTRAIN_INSTANTIATE

}  // namespace cutrain
