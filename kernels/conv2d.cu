// conv2d on the GPU (math in conv2d.h): the direct kernels (one thread per output element,
// the math as plain loops; f32 and f16) and the tensor-core path (implicit GEMM over
// tc_gemm.cuh; f16). The bias gradient db is bias_grad_gpu (linear.cu), shared by both paths.
//
// Layouts: x (N,H,W,C), w (K,R,S,C), y / dy (N,P,Q,K), all with the channel contiguous.
// precision: every output sums in fp32 and is rounded to the storage type once; backward
// outputs are read, widened, summed into and rounded once (+=), like the CPU reference.
#include <cuda_fp16.h>

#include "kernels/blocked_sum.h"
#include "kernels/check.h"
#include "kernels/conv2d.h"
#include "kernels/cuda_util.cuh"
#include "kernels/linear.h"
#include "kernels/tc_gemm.cuh"

namespace cutrain {

// --- direct -------------------------------------------------------------------------------

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

// --- tc: implicit GEMM on tensor cores (tc_gemm.cuh), fp16 -------------------------------
//
// The three passes are GEMMs whose A or B is the input or dy gathered through the convolution
// on the fly (no im2col buffer). Each operand below says which element (mn, kd) is and
// returns 0 where that element is padding. Fast path: when the run of 8 it is asked for lies
// along a channel dimension that is a multiple of 8 (C for x and w, K for dy), the 8 halves are
// one aligned 16-byte load of one pixel (or zeros when the pixel is padding); otherwise (the
// first layer, C = 1 or 3; odd channel counts) 8 scalar gathers.

namespace {

// The shape in plain ints, for the device.
struct Geom {
  int N, H, W, C, K, R, S, P, Q, sh, sw, ph, pw;
  static Geom of(const Conv2dShape& s) {
    return {s.N, s.H, s.W, s.C, s.K, s.R, s.S, s.P(), s.Q(),
            s.stride_h, s.stride_w, s.pad_h, s.pad_w};
  }
  // x[n][h][w][c] when (h, w) is inside the image, else 0.
  __device__ __half x_at(const __half* x, int64_t n, int h, int w, int c) const {
    if (h < 0 || h >= H || w < 0 || w >= W) return __half(0.0f);
    return x[((n * H + h) * W + w) * C + c];
  }
  // The output pixel (p, q) whose tap (r, s) reads input pixel (h, w); false when none does
  // (h + ph - r not a multiple of the stride, or outside the output).
  __device__ bool out_of(int h, int w, int r, int s, int& p, int& q) const {
    const int hp = h + ph - r, wq = w + pw - s;
    if (hp < 0 || wq < 0 || hp % sh != 0 || wq % sw != 0) return false;
    p = hp / sh;
    q = wq / sw;
    return p < P && q < Q;
  }
};

// forward A = im2col(x) (N*P*Q x R*S*C): A[(n,p,q)][(r,s,c)] = x[n][p*sh-ph+r][q*sw-pw+s][c].
// Contiguous along kd (c). vec: C % 8 == 0 and x 16-byte aligned, so a run of 8 at kd % 8 == 0
// stays inside one tap (r, s) and is 8 channels of one pixel.
struct Im2colA {
  static constexpr bool kContigKd = true;
  const __half* x;
  Geom g;
  int64_t M;
  int Kd;
  bool vec;
  __device__ void load8(int64_t m, int64_t kd, __half* dst) const {
    if (m >= M || kd >= Kd) return tc::zero8(dst);
    const int64_t PQ = int64_t(g.P) * g.Q;
    const int64_t n = m / PQ;
    const int pq = int(m % PQ), p = pq / g.Q, q = pq % g.Q;
    const int h0 = p * g.sh - g.ph, w0 = q * g.sw - g.pw;  // the pixel under tap (0, 0)
    if (vec) {
      const int c = int(kd % g.C), rs = int(kd / g.C), h = h0 + rs / g.S, w = w0 + rs % g.S;
      if (h < 0 || h >= g.H || w < 0 || w >= g.W) return tc::zero8(dst);
      return tc::copy8(dst, x + ((n * g.H + h) * g.W + w) * g.C + c);
    }
    for (int j = 0; j < 8; j++) {
      const int k = int(kd) + j, c = k % g.C, rs = k / g.C;
      dst[j] = k < Kd ? g.x_at(x, n, h0 + rs / g.S, w0 + rs % g.S, c) : __half(0.0f);
    }
  }
};

// dgrad A (N*H*W x R*S*K): A[(n,h,w)][(r,s,k)] = dy[n][p][q][k] for the output pixel (p, q)
// whose tap (r, s) reads (h, w), 0 when there is none. Contiguous along kd (k).
// vec: K % 8 == 0 and dy aligned.
struct DgradA {
  static constexpr bool kContigKd = true;
  const __half* dy;
  Geom g;
  int64_t M;
  int Kd;
  bool vec;
  __device__ void load8(int64_t m, int64_t kd, __half* dst) const {
    if (m >= M || kd >= Kd) return tc::zero8(dst);
    const int64_t HW = int64_t(g.H) * g.W;
    const int64_t n = m / HW;
    const int hw = int(m % HW), h = hw / g.W, w = hw % g.W;
    int p, q;
    if (vec) {
      const int k = int(kd % g.K), rs = int(kd / g.K);
      if (!g.out_of(h, w, rs / g.S, rs % g.S, p, q)) return tc::zero8(dst);
      return tc::copy8(dst, dy + ((n * g.P + p) * g.Q + q) * g.K + k);
    }
    for (int j = 0; j < 8; j++) {
      const int kk = int(kd) + j, k = kk % g.K, rs = kk / g.K;
      const bool hit = kk < Kd && g.out_of(h, w, rs / g.S, rs % g.S, p, q);
      dst[j] = hit ? dy[((n * g.P + p) * g.Q + q) * g.K + k] : __half(0.0f);
    }
  }
};

// dgrad B (R*S*K x C): B[(r,s,k)][c] = w[k][r][s][c]. Contiguous along mn (c).
// vec: C % 8 == 0 and w aligned.
struct DgradB {
  static constexpr bool kContigKd = false;
  const __half* w;
  Geom g;
  int Kd;
  bool vec;
  __device__ void load8(int64_t c, int64_t kd, __half* dst) const {
    if (kd >= Kd) return tc::zero8(dst);
    const int k = int(kd % g.K), rs = int(kd / g.K);
    const __half* row = w + (int64_t(k) * g.R * g.S + rs) * g.C;  // w[k][r][s][:]
    if (vec && c + 8 <= g.C) return tc::copy8(dst, row + c);
    for (int j = 0; j < 8; j++) dst[j] = c + j < g.C ? row[c + j] : __half(0.0f);
  }
};

// wgrad B = im2col(x) seen from the other side (N*P*Q x R*S*C): B[(n,p,q)][(r,s,c)], as Im2colA
// but contiguous along mn (c). vec: C % 8 == 0 and x aligned.
struct WgradB {
  static constexpr bool kContigKd = false;
  const __half* x;
  Geom g;
  int64_t Kd;  // N*P*Q
  int RSC;
  bool vec;
  __device__ void load8(int64_t rsc, int64_t kd, __half* dst) const {
    if (kd >= Kd || rsc >= RSC) return tc::zero8(dst);
    const int64_t PQ = int64_t(g.P) * g.Q;
    const int64_t n = kd / PQ;
    const int pq = int(kd % PQ), p = pq / g.Q, q = pq % g.Q;
    const int h0 = p * g.sh - g.ph, w0 = q * g.sw - g.pw;
    if (vec && rsc + 8 <= RSC) {
      const int c = int(rsc % g.C), rs = int(rsc / g.C), h = h0 + rs / g.S, w = w0 + rs % g.S;
      if (h < 0 || h >= g.H || w < 0 || w >= g.W) return tc::zero8(dst);
      return tc::copy8(dst, x + ((n * g.H + h) * g.W + w) * g.C + c);
    }
    for (int j = 0; j < 8; j++) {
      const int i = int(rsc) + j, c = i % g.C, rs = i / g.C;
      dst[j] = i < RSC ? g.x_at(x, n, h0 + rs / g.S, w0 + rs % g.S, c) : __half(0.0f);
    }
  }
};

const __half* hp(const half_t* p) { return reinterpret_cast<const __half*>(p); }
__half* hp(half_t* p) { return reinterpret_cast<__half*>(p); }

}  // namespace

// y (N*P*Q x K) = im2col(x) (N*P*Q x R*S*C) * w^T (R*S*C x K), + b[k], rounded once.
void conv2d_forward_tc_gpu(const Conv2dShape& s, const half_t* x, const half_t* w,
                           const half_t* b, half_t* y, cudaStream_t stream) {
  const Geom g = Geom::of(s);
  const int64_t M = int64_t(s.N) * g.P * g.Q;
  const int Kd = s.R * s.S * s.C;
  const Im2colA a{hp(x), g, M, Kd, s.C % 8 == 0 && tc::aligned16(x)};
  const auto bw = tc::Dense<true>::make(hp(w), s.K, Kd, Kd);  // B(kd, k) = w[k][kd]
  tc_gemm(M, s.K, Kd, a, bw, EpiBias{hp(y), hp(b), s.K}, stream);
}

// dx (N*H*W x C) += gather(dy) (N*H*W x R*S*K) * w' (R*S*K x C). For stride > 1 most of the
// gathered row is zeros (taps whose h + ph - r is not a multiple of the stride); simple, and
// the price is paid only in the strided layers.
void conv2d_backward_data_tc_gpu(const Conv2dShape& s, const half_t* dy, const half_t* w,
                                 half_t* dx, cudaStream_t stream) {
  const Geom g = Geom::of(s);
  const int64_t M = int64_t(s.N) * s.H * s.W;
  const int Kd = s.R * s.S * s.K;
  const DgradA a{hp(dy), g, M, Kd, s.K % 8 == 0 && tc::aligned16(dy)};
  const DgradB b{hp(w), g, Kd, s.C % 8 == 0 && tc::aligned16(w)};
  tc_gemm(M, s.C, Kd, a, b, EpiAccumulate{hp(dx), s.C}, stream);
}

// dw (K x R*S*C) += dy^T (K x N*P*Q) * im2col(x) (N*P*Q x R*S*C); db by bias_grad_gpu.
void conv2d_backward_filter_tc_gpu(const Conv2dShape& s, const half_t* x, const half_t* dy,
                                   half_t* dw, half_t* db, cudaStream_t stream) {
  const Geom g = Geom::of(s);
  const int64_t NPQ = int64_t(s.N) * g.P * g.Q;
  const int RSC = s.R * s.S * s.C;
  if (dw) {
    const auto a = tc::Dense<false>::make(hp(dy), s.K, NPQ, s.K);  // A(k, m) = dy[m][k]
    const WgradB b{hp(x), g, NPQ, RSC, s.C % 8 == 0 && tc::aligned16(x)};
    tc_gemm<true>(s.K, RSC, NPQ, a, b, EpiAccumulate{hp(dw), RSC}, stream);  // kd: the batch
  }
  if (db) bias_grad_gpu(NPQ, s.K, dy, db, stream);
}

}  // namespace cutrain
