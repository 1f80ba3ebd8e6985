// conv2d on the GPU: the direct kernels (one thread per output element, the math as plain
// loops; f32 and f16) and the tensor-core path (implicit GEMM over tc_gemm.cuh; f16). The bias
// gradient db is bias_grad_gpu (linear.cu), shared by both paths.
//
// Math: conv2d.h. Layouts: x (N,H,W,C), w (K,R,S,C), y / dy (N,P,Q,K), the channel contiguous.
// Launch: direct: a grid-stride loop, one thread per output element (y, dx or dw), 256 threads
//   a block, 1 launch a pass; tc: conv2d_*_gemm (conv_gemm.cuh) with tc_gemm's tiles and
//   split-K (tc_gemm.cuh, tc_gemm_plan in tc_plan.h).
// Bytes: conv2d.h's conv2d_forward_gpu_cost, conv2d_backward_data_gpu_cost,
//   conv2d_backward_filter_gpu_cost, by implementation (direct; tc through tc_plan.h's
//   tc_gemm_cost).
// Flops: 2*N*P*Q*K*R*S*C a pass (the same cost functions: conv2d_forward_gpu_cost ...).
// Precision: every output sums in fp32 and is rounded to the storage type once; backward
//   outputs are read, widened, summed into and rounded once (+=), like the CPU reference.
#include <cuda_fp16.h>

#include "kernels/blocked_sum.h"
#include "kernels/check.h"
#include "kernels/conv2d.h"
#include "kernels/cuda_util.cuh"
#include "kernels/linear.h"
#include "kernels/conv_gemm.cuh"

namespace cutrain {

// --- direct -------------------------------------------------------------------------------
// The conv ladder's v1 (kernels/ladder/README.md), the rung every other one is measured from.
// What changed: nothing yet. Each pass is the CPU reference's loop nest (conv2d.cpp) with its
// outer loops replaced by the thread index: a thread per output element, which sums its terms
// one at a time, reading both factors of every multiply-add from global memory (L1 and L2
// serve most of them again). Why it is the floor: it is obviously right, and it is fast only
// where a pass has many outputs and short sums; the weight gradient (few outputs, each a sum
// over the whole batch) leaves most of the GPU idle. The rung above, v2
// (ladder/gemm_plain.cuh), turns the three loop nests into one GEMM over gathered operands.

// y[n][p][q][k] = b[k] + sum_{r,t} sum_c x[n][p*Sh-Ph+r][q*Sw-Pw+t][c] * w[k][r][t][c]
// launch: one thread per y element (k fastest), grid-stride. Per output: R*S*C multiply-adds,
//   reading a row of C inputs (shared by the K threads of a pixel, so from L1) and a row of C
//   weights (from L1/L2). A baseline: obviously right, far from the tc path's speed.
// precision: fp32; as conv2d_forward_cpu, each tap's sum over c is added to acc in (r,t)
//   order, so f32 results differ from the CPU only by fused multiply-adds.
template <typename D>
__global__ void conv2d_forward_direct_kernel(Conv2dShape s, int P, int Q, const D* x,
                                             const D* w, const D* b, D* y) {
  const int64_t total = int64_t(s.N) * P * Q * s.K;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int k = int(i % s.K);
    const int64_t pix = i / s.K;  // (n, p, q)
    const int q = int(pix % Q), p = int(pix / Q % P), n = int(pix / (int64_t(Q) * P));
    float acc = b ? to_acc(b[k]) : 0.0f;
    for (int r = 0; r < s.R; r++) {
      const int h = p * s.stride_h - s.pad_h + r;
      if (h < 0 || h >= s.H) continue;  // zero padding
      for (int t = 0; t < s.S; t++) {
        const int wi = q * s.stride_w - s.pad_w + t;
        if (wi < 0 || wi >= s.W) continue;
        const D* xr = x + ((int64_t(n) * s.H + h) * s.W + wi) * s.C;  // x[n][h][wi][:]
        const D* wr = w + ((int64_t(k) * s.R + r) * s.S + t) * s.C;   // w[k][r][t][:]
        float d = 0;
        for (int c = 0; c < s.C; c++) d += to_acc(xr[c]) * to_acc(wr[c]);
        acc += d;
      }
    }
    y[i] = from_acc<D>(acc);
  }
}

// dx[n][h][wi][c] += sum over taps (r,t) with h = p*Sh - Ph + r, wi = q*Sw - Pw + t of
//                    sum_k dy[n][p][q][k] * w[k][r][t][c]
// launch: one thread per dx element (c fastest), grid-stride; per element at most R*S*K
//   multiply-adds. precision: fp32, in (r, t, k) order from the old value, as the CPU.
template <typename D>
__global__ void conv2d_backward_data_direct_kernel(Conv2dShape s, int P, int Q, const D* dy,
                                                   const D* w, D* dx) {
  const int64_t total = int64_t(s.N) * s.H * s.W * s.C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int c = int(i % s.C);
    const int64_t pix = i / s.C;  // (n, h, wi)
    const int wi = int(pix % s.W), h = int(pix / s.W % s.H), n = int(pix / (int64_t(s.W) * s.H));
    float acc = to_acc(dx[i]);
    for (int r = 0; r < s.R; r++) {
      const int ph = h + s.pad_h - r;  // = p * stride_h for the output row p that reads h
      if (ph < 0 || ph % s.stride_h != 0 || ph / s.stride_h >= P) continue;
      const int p = ph / s.stride_h;
      for (int t = 0; t < s.S; t++) {
        const int qw = wi + s.pad_w - t;
        if (qw < 0 || qw % s.stride_w != 0 || qw / s.stride_w >= Q) continue;
        const int q = qw / s.stride_w;
        const D* dyr = dy + ((int64_t(n) * P + p) * Q + q) * s.K;  // dy[n][p][q][:]
        const D* wc = w + (int64_t(r) * s.S + t) * s.C + c;         // w[0][r][t][c]
        const int64_t kstride = int64_t(s.R) * s.S * s.C;            // one filter
        for (int k = 0; k < s.K; k++) acc += to_acc(dyr[k]) * to_acc(wc[k * kstride]);
      }
    }
    dx[i] = from_acc<D>(acc);
  }
}

// dw[k][r][t][c] += sum_{n,p,q} dy[n][p][q][k] * x[n][p*Sh-Ph+r][q*Sw-Pw+t][c]
// launch: one thread per dw element (c fastest), grid-stride; each sums N*P*Q products,
//   which for a small filter means few threads doing long loops: the baseline, not fast.
// precision: fp32, in (n, p, q) order, blocked pairwise (kernels/blocked_sum.h: blocks of 64
//   products inside the image), then added to the old value, as the CPU (whose blocks are 64
//   pixels, taps in the padding included, so the orders differ at the image's border).
template <typename D>
__global__ void conv2d_backward_filter_direct_kernel(Conv2dShape s, int P, int Q, const D* x,
                                                     const D* dy, D* dw) {
  const int64_t total = int64_t(s.K) * s.R * s.S * s.C;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int c = int(i % s.C), t = int(i / s.C % s.S), r = int(i / (int64_t(s.C) * s.S) % s.R);
    const int k = int(i / (int64_t(s.C) * s.S * s.R));
    BlockedSum<float> sum;
    for (int n = 0; n < s.N; n++)
      for (int p = 0; p < P; p++) {
        const int h = p * s.stride_h - s.pad_h + r;
        if (h < 0 || h >= s.H) continue;
        for (int q = 0; q < Q; q++) {
          const int wi = q * s.stride_w - s.pad_w + t;
          if (wi < 0 || wi >= s.W) continue;
          sum.add(to_acc(dy[((int64_t(n) * P + p) * Q + q) * s.K + k]) *
                  to_acc(x[((int64_t(n) * s.H + h) * s.W + wi) * s.C + c]));
        }
      }
    dw[i] = from_acc<D>(to_acc(dw[i]) + sum.total());
  }
}

template <typename T>
void conv2d_forward_direct_gpu(const Conv2dShape& s, const T* x, const T* w, const T* b, T* y,
                               cudaStream_t stream) {
  const int64_t total = int64_t(s.N) * s.P() * s.Q() * s.K;
  conv2d_forward_direct_kernel<<<grid_size(total, 256), 256, 0, stream>>>(
      s, s.P(), s.Q(), dev(x), dev(w), dev(b), dev(y));
  LAUNCH_CHECK();
}

template <typename T>
void conv2d_backward_data_direct_gpu(const Conv2dShape& s, const T* dy, const T* w, T* dx,
                                     cudaStream_t stream) {
  const int64_t total = int64_t(s.N) * s.H * s.W * s.C;
  conv2d_backward_data_direct_kernel<<<grid_size(total, 256), 256, 0, stream>>>(
      s, s.P(), s.Q(), dev(dy), dev(w), dev(dx));
  LAUNCH_CHECK();
}

template <typename T>
void conv2d_backward_filter_direct_gpu(const Conv2dShape& s, const T* x, const T* dy, T* dw,
                                       T* db, cudaStream_t stream) {
  if (dw) {
    const int64_t total = int64_t(s.K) * s.R * s.S * s.C;
    conv2d_backward_filter_direct_kernel<<<grid_size(total, 256), 256, 0, stream>>>(
        s, s.P(), s.Q(), dev(x), dev(dy), dev(dw));
    LAUNCH_CHECK();
  }
  if (db) bias_grad_gpu(int64_t(s.N) * s.P() * s.Q(), s.K, dy, db, stream);
}

#define CUTRAIN_INSTANTIATE(T)                                                                \
  template void conv2d_forward_direct_gpu<T>(const Conv2dShape&, const T*, const T*, const T*, \
                                             T*, cudaStream_t);                               \
  template void conv2d_backward_data_direct_gpu<T>(const Conv2dShape&, const T*, const T*, T*, \
                                                   cudaStream_t);                             \
  template void conv2d_backward_filter_direct_gpu<T>(const Conv2dShape&, const T*, const T*,   \
                                                     T*, T*, cudaStream_t);
CUTRAIN_INSTANTIATE(float)
CUTRAIN_INSTANTIATE(half_t)
#undef CUTRAIN_INSTANTIATE

// --- tc: implicit GEMM on tensor cores (conv_gemm.cuh's operands over tc_gemm.cuh), fp16 ---

void conv2d_forward_tc_gpu(const Conv2dShape& s, const half_t* x, const half_t* w,
                           const half_t* b, half_t* y, cudaStream_t stream) {
  conv2d_forward_gemm<tc::WmmaKernel>(s, x, w, b, y, stream);
}

void conv2d_backward_data_tc_gpu(const Conv2dShape& s, const half_t* dy, const half_t* w,
                                 half_t* dx, cudaStream_t stream) {
  conv2d_backward_data_gemm<tc::WmmaKernel>(s, dy, w, dx, stream);
}

void conv2d_backward_filter_tc_gpu(const Conv2dShape& s, const half_t* x, const half_t* dy,
                                   half_t* dw, half_t* db, cudaStream_t stream) {
  conv2d_backward_filter_gemm<tc::WmmaKernel>(s, x, dy, dw, db, stream);
}

}  // namespace cutrain
