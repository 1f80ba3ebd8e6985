// linear on the GPU: the direct kernels (one thread per output element; f32 and f16), the
// tensor-core path (three instances of tc_gemm.cuh; f16), and bias_grad_gpu, the bias gradient
// that linear and conv2d share.
//
// Math: linear.h. Layouts: x (N,C), w (K,C), y / dy (N,K), row-major.
// Launch: direct: a grid-stride loop, one thread per output element (y, dx or dw), 256 threads
//   a block; tc: tc_gemm with its tiles and split-K (tc_gemm.cuh, tc_gemm_plan in tc_plan.h);
//   bias_grad_gpu: one launch, below.
// Bytes: linear.h's linear_forward_gpu_cost, linear_backward_gpu_cost, bias_grad_gpu_cost.
// Flops: 2*N*K*C a GEMM (linear_forward_gpu_cost, linear_backward_gpu_cost), M*K adds for the
//   bias gradient (bias_grad_gpu_cost).
// Precision: fp32 sums, rounded to the storage type once; backward outputs accumulate (+=):
//   old value widened, sum added, rounded once.
#include <cuda_fp16.h>

#include <algorithm>

#include "kernels/blocked_sum.h"
#include "kernels/check.h"
#include "kernels/arrival_counters.h"
#include "kernels/cuda_util.cuh"
#include "kernels/linear.h"
#include "kernels/tc_gemm.cuh"

namespace cutrain {

// --- direct -------------------------------------------------------------------------------
// Each kernel: one thread per output element (the last index fastest, so neighbouring threads
// store neighbouring elements), grid-stride; the sum in fp32, in the CPU's order (fused
// multiply-adds aside). Each output reads one row of length C (or K, or N) from each operand:
// 2 flops per 4 (f16) or 8 (f32) bytes, memory bound; the baseline, not the fast path.

// y[n][k] = b[k] + sum_c x[n][c] * w[k][c]
template <typename D>
__global__ void linear_forward_direct_kernel(int N, int C, int K, const D* x, const D* w,
                                             const D* b, D* y) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < int64_t(N) * K;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / K;
    const int k = int(i % K);
    float acc = b ? to_acc(b[k]) : 0.0f;
    for (int c = 0; c < C; c++) acc += to_acc(x[n * C + c]) * to_acc(w[int64_t(k) * C + c]);
    y[i] = from_acc<D>(acc);
  }
}

// dx[n][c] += sum_k dy[n][k] * w[k][c]
template <typename D>
__global__ void linear_backward_data_direct_kernel(int N, int C, int K, const D* dy,
                                                   const D* w, D* dx) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < int64_t(N) * C;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i / C;
    const int c = int(i % C);
    float acc = to_acc(dx[i]);
    for (int k = 0; k < K; k++) acc += to_acc(dy[n * K + k]) * to_acc(w[int64_t(k) * C + c]);
    dx[i] = from_acc<D>(acc);
  }
}

// dw[k][c] += sum_n dy[n][k] * x[n][c], the sum over the batch blocked pairwise in the CPU's
// order (kernels/blocked_sum.h), then added to the old value.
template <typename D>
__global__ void linear_backward_filter_direct_kernel(int N, int C, int K, const D* x,
                                                     const D* dy, D* dw) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < int64_t(K) * C;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int k = int(i / C), c = int(i % C);
    const float sum = blocked_sum<float>(
        N, [&](int64_t n) { return to_acc(dy[n * K + k]) * to_acc(x[n * C + c]); });
    dw[i] = from_acc<D>(to_acc(dw[i]) + sum);
  }
}

template <typename T>
void linear_forward_direct_gpu(int N, int C, int K, const T* x, const T* w, const T* b, T* y,
                               cudaStream_t stream) {
  linear_forward_direct_kernel<<<grid_size(int64_t(N) * K, 256), 256, 0, stream>>>(
      N, C, K, dev(x), dev(w), dev(b), dev(y));
  LAUNCH_CHECK();
}

template <typename T>
void linear_backward_direct_gpu(int N, int C, int K, const T* x, const T* w, const T* dy,
                                T* dx, T* dw, T* db, cudaStream_t stream) {
  if (dx) {
    linear_backward_data_direct_kernel<<<grid_size(int64_t(N) * C, 256), 256, 0, stream>>>(
        N, C, K, dev(dy), dev(w), dev(dx));
    LAUNCH_CHECK();
  }
  if (dw) {
    linear_backward_filter_direct_kernel<<<grid_size(int64_t(K) * C, 256), 256, 0, stream>>>(
        N, C, K, dev(x), dev(dy), dev(dw));
    LAUNCH_CHECK();
  }
  if (db) bias_grad_gpu(N, K, dy, db, stream);
}

// --- bias gradient: db[k] += sum_m dy[m][k] -------------------------------------------------
// Two passes in one launch, so that a tall dy (M = N*P*Q, ~10^5 rows) is summed by many
// blocks yet every run adds the same numbers in the same order:
//   pass 1: grid (ceil(K/32), chunks), block 32 x 8. Block (kb, j) sums rows of chunk j for 32
//     columns: thread (tx, ty) adds rows ty, ty+8, ... of column kb*32 + tx (a warp reads 32
//     neighbouring halves of one row), blocked pairwise (kernels/blocked_sum.h), then the 8
//     lanes of a column are added pairwise into partial[j][k] (fp32).
//   pass 2, by the last block of each column of 32 k to finish pass 1: db[k] = T(float(db[k]) +
//     the partials[j][k] added as the rows were: lane y takes j = y, y + 8, ..., blocked;
//     then the 8 lanes pairwise).
// A term meets at most b + log2(rows/b) roundings in its thread (b = 64, rows = the rows
// per chunk / 8: 32 up to M = 2^18), 3 among the lanes and at most 8 + 4 + 3 = 15 among the
// chunks (at most 128 a lane, in blocks of 8, then the lanes): the running sums before had
// rows + 8 + chunks.
// bytes: M*K*sizeof(T) read once; flops: M*K adds. Memory bound.

constexpr int kBiasRows = 8;  // row lanes of a pass-1 block

// The sum over this thread's share, rows first + j * kBiasRows of a column (j < rows, term(j)
// the value of the j-th), blocked in blocks of B (kSumBlock for dy's rows, 8 for the
// partials), then the block's kBiasRows lanes pairwise: valid in lane 0.
template <int B, typename Term>
__device__ float lanes_sum(int64_t rows, Term term, float (&lane)[kBiasRows][33]) {
  lane[threadIdx.y][threadIdx.x] = blocked_sum<float, B>(rows, term);
  __syncthreads();
  return blocked_sum<float, 1>(kBiasRows, [&](int64_t j) { return lane[j][threadIdx.x]; });
}

// Pass 1, then pass 2 by the last block of each column of 32 k to finish (arrivals: one
// counter per column; last_block_to_arrive, kernels/cuda_util.cuh): lane y adds the partials
// y, y + 8, ... of its k, then the lanes pairwise again.
template <typename D>
__global__ void bias_grad_kernel(int64_t M, int K, int64_t rows_per_chunk, const D* dy,
                                 float* partial, D* db, unsigned* arrivals) {
  __shared__ float lane[kBiasRows][33];  // 33: no bank conflicts on the column reads
  const int k = blockIdx.x * 32 + threadIdx.x;
  const int64_t begin = blockIdx.y * rows_per_chunk;
  const int64_t end = begin + rows_per_chunk < M ? begin + rows_per_chunk : M;
  const int64_t first = begin + threadIdx.y;
  const int64_t rows = k < K && first < end ? (end - first + kBiasRows - 1) / kBiasRows : 0;
  const float mine = lanes_sum<kSumBlock>(
      rows, [&](int64_t j) { return to_acc(dy[(first + j * kBiasRows) * K + k]); }, lane);
  if (threadIdx.y == 0 && k < K) partial[int64_t(blockIdx.y) * K + k] = mine;
  // (lane is free again: last_block_to_arrive passes a __syncthreads.)
  const int chunks = int(gridDim.y);
  if (!last_block_to_arrive(&arrivals[blockIdx.x], gridDim.y)) return;
  const int64_t parts = k < K ? (chunks - int(threadIdx.y) + kBiasRows - 1) / kBiasRows : 0;
  const float total = lanes_sum<8>(
      parts,
      [&](int64_t j) { return __ldcg(&partial[(threadIdx.y + j * kBiasRows) * int64_t(K) + k]); },
      lane);
  if (threadIdx.y == 0 && k < K) db[k] = from_acc<D>(to_acc(db[k]) + total);
}

template <typename T>
void bias_grad_gpu(int64_t M, int K, const T* dy, T* db, cudaStream_t stream) {
  if (M <= 0 || K <= 0) return;  // db += 0
  // ~256 rows a chunk (32 per thread), at most 1024 chunks: the chunking depends on M only.
  const int64_t want = std::min<int64_t>(1024, (M + 255) / 256);
  const int64_t rows_per_chunk = (M + want - 1) / want;
  const int chunks = int((M + rows_per_chunk - 1) / rows_per_chunk);
  DeviceBuffer partial(size_t(chunks) * size_t(K) * sizeof(float), current_device(), stream);
  float* p = static_cast<float*>(partial.data());
  const dim3 grid(unsigned((K + 31) / 32), unsigned(chunks)), block(32, kBiasRows);
  bias_grad_kernel<<<grid, block, 0, stream>>>(M, K, rows_per_chunk, dev(dy), p, dev(db),
                                                arrival_counters(stream, int(grid.x)));
  LAUNCH_CHECK();
}

// --- tc: three instances of tc_gemm (fp16) --------------------------------------------------

namespace {
const __half* hp(const half_t* p) { return reinterpret_cast<const __half*>(p); }
__half* hp(half_t* p) { return reinterpret_cast<__half*>(p); }
}  // namespace

// y (N x K) = x (N x C) * w^T (C x K) + b
void linear_forward_tc_gpu(int N, int C, int K, const half_t* x, const half_t* w,
                           const half_t* b, half_t* y, cudaStream_t stream) {
  const auto a = tc::Dense<true>::make(hp(x), N, C, C);   // A(n, c) = x[n][c]
  const auto bw = tc::Dense<true>::make(hp(w), K, C, C);  // B(c, k) = w[k][c]
  tc_gemm(N, K, C, a, bw, EpiBias{hp(y), hp(b), K}, stream);
}

// dx (N x C) += dy (N x K) * w (K x C);  dw (K x C) += dy^T (K x N) * x (N x C);  db.
void linear_backward_tc_gpu(int N, int C, int K, const half_t* x, const half_t* w,
                            const half_t* dy, half_t* dx, half_t* dw, half_t* db,
                            cudaStream_t stream) {
  if (dx) {
    const auto a = tc::Dense<true>::make(hp(dy), N, K, K);   // A(n, k) = dy[n][k]
    const auto b = tc::Dense<false>::make(hp(w), C, K, C);   // B(k, c) = w[k][c]
    tc_gemm(N, C, K, a, b, EpiAccumulate{hp(dx), C}, stream);
  }
  if (dw) {
    const auto a = tc::Dense<false>::make(hp(dy), K, N, K);  // A(k, n) = dy[n][k]
    const auto b = tc::Dense<false>::make(hp(x), C, N, C);   // B(n, c) = x[n][c]
    tc_gemm<true>(K, C, N, a, b, EpiAccumulate{hp(dw), C}, stream);  // kd: the batch
  }
  if (db) bias_grad_gpu(N, K, dy, db, stream);
}

#define CUTRAIN_INSTANTIATE(T)                                                                 \
  template void linear_forward_direct_gpu<T>(int, int, int, const T*, const T*, const T*, T*, \
                                             cudaStream_t);                                    \
  template void linear_backward_direct_gpu<T>(int, int, int, const T*, const T*, const T*, T*, \
                                              T*, T*, cudaStream_t);                           \
  template void bias_grad_gpu<T>(int64_t, int, const T*, T*, cudaStream_t);
CUTRAIN_INSTANTIATE(float)
CUTRAIN_INSTANTIATE(half_t)
#undef CUTRAIN_INSTANTIATE

}  // namespace cutrain
