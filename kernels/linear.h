// defines: linear (fully connected) forward and backward, CPU reference, the GPU entry points,
// their costs, and bias_grad_gpu (shared with conv2d).
//
// Math:  y[n][k] = b[k] + sum_c x[n][c] * w[k][c]        x (N,C), w (K,C), b (K), y (N,K)
//        dx[n][c] += sum_k dy[n][k] * w[k][c]            (dy W)
//        dw[k][c] += sum_n dy[n][k] * x[n][c]            (dy^T X)
//        db[k]    += sum_n dy[n][k]
//   b / db may be null (no bias). Backward outputs accumulate; any of dx, dw may be null when
//   that gradient is not wanted.
// Launch: linear.cu launches them: direct, one thread per output element (1 launch a pass);
//   tc, tc_gemm's tile grid (tc_plan.h: 1, or 2 under split-K); bias_grad_gpu 1 (chunks of
//   rows, finished by the last block of each column). cuBLAS's: beside the switch below.
// Bytes: each operand read once, an accumulated output read and written:
//   linear_forward_gpu_cost   x, w, b read, y written (tc: + split-K's fp32 partials)
//   linear_backward_gpu_cost  dx: dy, w read, dx read and written; dw: x, dy read, dw read and
//                             written; db: bias_grad_gpu_cost
//   bias_grad_gpu_cost        dy (M,K) read, db read and written
// Flops: linear_forward_gpu_cost 2*N*K*C (+ N*K with the bias); linear_backward_gpu_cost
//   2*N*K*C for each of dx and dw (+ N*K for db); bias_grad_gpu_cost M*K.
// Precision: sums in acc_t<T> (fp32 for fp16 storage), rounded to T once; dw and db, sums over
//   the batch, blocked pairwise (kernels/blocked_sum.h). The GPU sums in another order: within
//   a tolerance of the CPU, and the same bits run to run.
#pragma once
#include <cstdint>

#include "kernels/gpu.h"
#include "kernels/half.h"
#include "kernels/impl.h"
#include "kernels/launch_plan.h"

namespace cutrain {

template <typename T>
void linear_forward_cpu(int N, int C, int K, const T* x, const T* w, const T* b, T* y);

template <typename T>
void linear_backward_cpu(int N, int C, int K, const T* x, const T* w, const T* dy, T* dx,
                         T* dw, T* db);

// The CPU switch (kernels/matmul_cpu.cpp), as for conv2d: direct or onednn (float only).
template <typename T>
void linear_forward_cpu(LinearImpl impl, int N, int C, int K, const T* x, const T* w, const T* b,
                        T* y);
template <typename T>
void linear_backward_cpu(LinearImpl impl, int N, int C, int K, const T* x, const T* w,
                         const T* dy, T* dx, T* dw, T* db);

// --- GPU (CUDA builds only; device pointers; queued on `stream`, never synchronising) ---
// Same math and accumulate rule as above, T = float or half_t, sums in fp32.

// direct (kernels/linear.cu): one thread per output element.
template <typename T>
void linear_forward_direct_gpu(int N, int C, int K, const T* x, const T* w, const T* b, T* y,
                               cudaStream_t stream);
template <typename T>
void linear_backward_direct_gpu(int N, int C, int K, const T* x, const T* w, const T* dy,
                                T* dx, T* dw, T* db, cudaStream_t stream);

// tc (kernels/linear.cu): the tensor-core GEMM of conv2d's tc path, fp16 only.
void linear_forward_tc_gpu(int N, int C, int K, const half_t* x, const half_t* w,
                           const half_t* b, half_t* y, cudaStream_t stream);
void linear_backward_tc_gpu(int N, int C, int K, const half_t* x, const half_t* w,
                            const half_t* dy, half_t* dx, half_t* dw, half_t* db,
                            cudaStream_t stream);

// db[k] += sum_m dy[m][k], dy (M,K): the bias gradient of linear (M = N) and of conv2d
// (M = N*P*Q), for the direct and tc paths alike (kernels/linear.cu). A two-pass fp32
// reduction in a fixed order (the same bits on every run), rounded to T once.
template <typename T>
void bias_grad_gpu(int64_t M, int K, const T* dy, T* db, cudaStream_t stream);
// 1 launch (none when M or K is 0): the chunks' partial sums, added by the last block of each
// column of k.
// bytes: dy read, db read and written (the fp32 partials, ~M*K/256 floats, left out).
inline LaunchCost bias_grad_gpu_cost(int64_t M, int K, size_t elem) {
  if (M <= 0 || K <= 0) return {"bias_grad", 0, 0, 0};
  return {"bias_grad", 1, nbytes(M * K + 2 * int64_t(K), elem), double(M) * K};
}

// The switch (kernels/matmul_gpu.cpp), as for conv2d; its launch costs (linear.cpp) as
// conv2d's: direct 1 per pass, tc what tc_gemm_plan runs (kernels/tc_plan.h), db by
// bias_grad_gpu (1) on both; cublas 1 per cublasGemmEx call (the forward's bias is a GEMM of
// its own, db one more), estimated until a GPU profile confirms. onednn throws. The direct
// and tc entry points above cost the same as the switch with their impl.
template <typename T>
void linear_forward_gpu(LinearImpl impl, int N, int C, int K, const T* x, const T* w,
                        const T* b, T* y, cudaStream_t stream);
LaunchCost linear_forward_gpu_cost(LinearImpl impl, int N, int C, int K, size_t elem, bool bias);
template <typename T>
void linear_backward_gpu(LinearImpl impl, int N, int C, int K, const T* x, const T* w,
                         const T* dy, T* dx, T* dw, T* db, cudaStream_t stream);
LaunchCost linear_backward_gpu_cost(LinearImpl impl, int N, int C, int K, size_t elem, bool dx,
                                    bool dw, bool db);

}  // namespace cutrain
