// defines: Conv2dShape and conv2d forward / backward, CPU reference, the GPU entry points and
// their costs.
//
// Math: (cross-correlation, as every framework calls "convolution"):
//   y[n][p][q][k] = b[k] + sum_{r,s,c} x[n][p*Sh - Ph + r][q*Sw - Pw + s][c] * w[k][r][s][c]
//   where x outside the image reads as 0 (zero padding).
//   x (N,H,W,C)  w (K,R,S,C)  b (K)  y (N,P,Q,K)
//   P = (H + 2*Ph - R) / Sh + 1,  Q = (W + 2*Pw - S) / Sw + 1
//   backward (each accumulates, +=):
//   dx[n][h][w][c] += sum over (p,q,r,s,k) with h = p*Sh - Ph + r, w = q*Sw - Pw + s of
//                     dy[n][p][q][k] * w[k][r][s][c]
//   dw[k][r][s][c] += sum_{n,p,q} dy[n][p][q][k] * x[n][p*Sh - Ph + r][q*Sw - Pw + s][c]
//   db[k]          += sum_{n,p,q} dy[n][p][q][k]
// Launch: conv2d.cu launches them: direct, one thread per output element (1 launch a pass);
//   tc, the tile grid of tc_gemm (kernels/tc_gemm.cuh, its plan kernels/tc_plan.h: 1 launch,
//   or 2 under split-K); db is bias_grad_gpu (kernels/linear.h). The launches of each
//   implementation, and cuDNN's, beside the switch's declarations below.
// Bytes: each operand read once, an accumulated output read and written, by implementation:
//   conv2d_forward_gpu_cost          x, w, b read, y written (tc: + split-K's fp32 partials)
//   conv2d_backward_data_gpu_cost    dy, w read, dx read and written
//   conv2d_backward_filter_gpu_cost  x, dy read, dw read and written; db: linear.h's
//                                    bias_grad_gpu_cost
// Flops: 2*N*P*Q*K*R*S*C (Conv2dShape::forward_flops) for each pass:
//   conv2d_forward_gpu_cost (+ N*P*Q*K for the bias), conv2d_backward_data_gpu_cost (tc:
//   2*N*H*W*C*R*S*K, the GEMM multiplies the gathered zeros of a stride > 1),
//   conv2d_backward_filter_gpu_cost (+ N*P*Q*K for db). On tensor cores for tc (and cuDNN in
//   fp16).
// Precision: products summed in acc_t<T> (fp32 for fp16 storage), rounded once to T; dw and
//   db, sums over the whole batch (N*P*Q terms), blocked pairwise (kernels/blocked_sum.h). The
//   GPU sums in another order: it agrees within a per-dtype tolerance, not bit for bit.
//   Threads: OpenMP over independent outputs; the same bits on any thread count.
#pragma once
#include <cstdint>

#include "kernels/gpu.h"
#include "kernels/half.h"
#include "kernels/impl.h"
#include "kernels/launch_plan.h"

namespace cutrain {

struct Conv2dShape {
  int N = 0, H = 0, W = 0, C = 0;  // input
  int K = 0, R = 0, S = 0;         // output channels, filter height and width
  int stride_h = 1, stride_w = 1;
  int pad_h = 0, pad_w = 0;

  int P() const { return (H + 2 * pad_h - R) / stride_h + 1; }
  int Q() const { return (W + 2 * pad_w - S) / stride_w + 1; }
  int64_t forward_flops() const { return 2LL * N * P() * Q() * K * R * S * C; }
};

// Throws cutrain::Error naming the problem when the shape is impossible (non-positive sizes,
// a filter larger than the padded input, stride < 1, padding < 0).
void conv2d_check_shape(const Conv2dShape& s);

// b may be null (no bias).
template <typename T>
void conv2d_forward_cpu(const Conv2dShape& s, const T* x, const T* w, const T* b, T* y);

// dx += (see above)
template <typename T>
void conv2d_backward_data_cpu(const Conv2dShape& s, const T* dy, const T* w, T* dx);

// dw += ..., db += ... (either may be null when that gradient is not wanted)
template <typename T>
void conv2d_backward_filter_cpu(const Conv2dShape& s, const T* x, const T* dy, T* dw, T* db);

// The CPU switch (kernels/matmul_cpu.cpp), what nn's ops call: direct runs the reference above,
// onednn runs oneDNN (kernels/onednn.h; T = float only); a GPU implementation throws.
template <typename T>
void conv2d_forward_cpu(ConvImpl impl, const Conv2dShape& s, const T* x, const T* w, const T* b,
                        T* y);
template <typename T>
void conv2d_backward_data_cpu(ConvImpl impl, const Conv2dShape& s, const T* dy, const T* w, T* dx);
template <typename T>
void conv2d_backward_filter_cpu(ConvImpl impl, const Conv2dShape& s, const T* x, const T* dy,
                                T* dw, T* db);

// --- GPU (CUDA builds only; device pointers; queued on `stream`, never synchronising) ---
// Same math, shapes and accumulate rule (+=) as the CPU functions above, T = float or half_t.
// Sums run in fp32 (acc_t<half_t> = float); the order differs from the CPU's, so results agree
// within a per-dtype tolerance, not bit for bit.

// direct (kernels/conv2d.cu): one thread per output element, the math above as plain loops.
template <typename T>
void conv2d_forward_direct_gpu(const Conv2dShape& s, const T* x, const T* w, const T* b, T* y,
                               cudaStream_t stream);
template <typename T>
void conv2d_backward_data_direct_gpu(const Conv2dShape& s, const T* dy, const T* w, T* dx,
                                     cudaStream_t stream);
template <typename T>
void conv2d_backward_filter_direct_gpu(const Conv2dShape& s, const T* x, const T* dy, T* dw,
                                       T* db, cudaStream_t stream);

// tc (kernels/conv2d.cu): implicit GEMM on tensor cores, fp16 in, fp32 accumulate.
//   forward  y  (NPQ x K)   = im2col(x) (NPQ x RSC) * w^T (RSC x K)
//   dgrad    dx (NHW x C)  += gather(dy) (NHW x RSK) * w' (RSK x C)
//   wgrad    dw (K x RSC)  += dy^T (K x NPQ) * im2col(x) (NPQ x RSC)
void conv2d_forward_tc_gpu(const Conv2dShape& s, const half_t* x, const half_t* w,
                           const half_t* b, half_t* y, cudaStream_t stream);
void conv2d_backward_data_tc_gpu(const Conv2dShape& s, const half_t* dy, const half_t* w,
                                 half_t* dx, cudaStream_t stream);
void conv2d_backward_filter_tc_gpu(const Conv2dShape& s, const half_t* x, const half_t* dy,
                                   half_t* dw, half_t* db, cudaStream_t stream);

// The switch (kernels/matmul_gpu.cpp): runs `impl`; tc with float throws (tc is fp16 only),
// cudnn throws when this build has no cuDNN (kernels/vendor.h).
//
// Their launch costs (conv2d.cpp), by the implementation the GPU runs: direct, tc (elem == 2
// only) or cudnn; onednn, a CPU implementation, throws cutrain::Error. The per-implementation
// entry points above cost the same as the switch with their impl.
//   direct  1 launch per pass; db is bias_grad_gpu (kernels/linear.h: 1 launch).
//   tc      what tc_gemm_plan runs (kernels/tc_plan.h): 1, or 2 under split-K (a weight
//           gradient over a large batch); db as direct.
//   cudnn   1 per cudnnConvolution* call, + 1 for the forward's bias (cudnnAddTensor) and 1
//           for db (cudnnConvolutionBackwardBias). Estimated until a GPU profile confirms.
template <typename T>
void conv2d_forward_gpu(ConvImpl impl, const Conv2dShape& s, const T* x, const T* w,
                        const T* b, T* y, cudaStream_t stream);
LaunchCost conv2d_forward_gpu_cost(ConvImpl impl, const Conv2dShape& s, size_t elem, bool bias);
template <typename T>
void conv2d_backward_data_gpu(ConvImpl impl, const Conv2dShape& s, const T* dy, const T* w,
                              T* dx, cudaStream_t stream);
LaunchCost conv2d_backward_data_gpu_cost(ConvImpl impl, const Conv2dShape& s, size_t elem);
template <typename T>
void conv2d_backward_filter_gpu(ConvImpl impl, const Conv2dShape& s, const T* x, const T* dy,
                                T* dw, T* db, cudaStream_t stream);
LaunchCost conv2d_backward_filter_gpu_cost(ConvImpl impl, const Conv2dShape& s, size_t elem,
                                           bool dw, bool db);

}  // namespace cutrain
