// defines: the three passes of a convolution as implicit GEMMs over tc_gemm.cuh's operands
// (Im2colA, DgradA, DgradB, WgradB, with Geom, the shape on the device), and
// conv2d_{forward,backward_data,backward_filter}_gemm, each pass run by a GEMM kernel given as
// a type: tc::WmmaKernel (the tc path, conv2d.cu) or a rung of the kernel ladder
// (kernels/ladder/), so every rung computes the very same GEMMs from the very same operands.
//
// Math: conv2d.h's three passes as GEMMs (M x Kd times Kd x N):
//   forward  y  (NPQ x K)   = im2col(x) (NPQ x RSC) * w^T (RSC x K), + b
//   dgrad    dx (NHW x C)  += gather(dy) (NHW x RSK) * w' (RSK x C)
//   wgrad    dw (K x RSC)  += dy^T (K x NPQ) * im2col(x) (NPQ x RSC); db by bias_grad_gpu
//   The GEMMs' A or B is the input or dy gathered through the convolution on the fly (no
//   im2col buffer). Each operand below says which element (mn, kd) is and returns 0 where that
//   element is padding, one element at a time (at: the ladder's v2) or a run of 8 (load8: the
//   tiled kernels). Fast path: when the run of 8 it is asked for lies along a channel
//   dimension that is a multiple of 8 (C for x and w, K for dy), the 8 halves are one aligned
//   16-byte load of one pixel (or zeros when the pixel is padding); otherwise (the first
//   layer, C = 1 or 3; odd channel counts) 8 scalar gathers.
// Launch: no kernel of its own: each pass is one tc_gemm<Blocked, Kernel> (tc_gemm.cuh, its
//   tiles and split-K by tc_gemm_plan), called from conv2d.cu (tc) and ladder/conv_ladder.cu.
// Bytes: conv2d.h's conv2d_forward_gpu_cost, conv2d_backward_data_gpu_cost and
//   conv2d_backward_filter_gpu_cost with ConvImpl::tc (tc_plan.h's tc_gemm_cost): each operand
//   counted once, as the gathers would read it without reuse across tiles.
// Flops: 2*M*N*Kd a pass, the same functions (conv2d_forward_gpu_cost, ...): for a strided
//   dgrad M*N*Kd exceeds the forward's, the gathered zeros multiplied too.
// Precision: the gathers copy halves exactly (zeros in the padding); the sums are the GEMM
//   kernel's (fp32).
#pragma once
#include <cuda_fp16.h>

#include "kernels/conv2d.h"
#include "kernels/linear.h"
#include "kernels/tc_gemm.cuh"

namespace cutrain {
namespace conv_gemm {

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
  // im2col's one value at (pixel, rsc): x at tap (r, s), channel c, under output pixel
  // (n, p, q); 0 in the padding. im2col8 below is the same, 8 values at a time.
  __device__ __half im2col_at(const __half* x, int64_t pixel, int rsc) const {
    const int64_t PQ = int64_t(P) * Q;
    const int pq = int(pixel % PQ), c = rsc % C, rs = rsc / C;
    return x_at(x, pixel / PQ, (pq / Q) * sh - ph + rs / S, (pq % Q) * sw - pw + rs % S, c);
  }
  // im2col's 8 values from (r,s,c) index rsc on (rsc < RSC = R*S*C; 0 past it) of output
  // pixel `pixel` = (n, p, q): x at each tap under it, 0 in the padding. vec: one 16-byte copy
  // when the 8 are 8 channels of one pixel (C % 8 == 0, x aligned, rsc % 8 == 0). The forward's
  // A and the weight gradient's B are this gather, seen from either side (Im2colA, WgradB).
  template <class Copy>
  __device__ void im2col8(const __half* x, int64_t pixel, int64_t rsc, int RSC, bool vec,
                          __half* dst, Copy copy) const {
    const int64_t PQ = int64_t(P) * Q;
    const int64_t n = pixel / PQ;
    const int pq = int(pixel % PQ), p = pq / Q, q = pq % Q;
    const int h0 = p * sh - ph, w0 = q * sw - pw;  // the pixel under tap (0, 0)
    if (vec && rsc + 8 <= RSC) {
      const int c = int(rsc % C), rs = int(rsc / C), h = h0 + rs / S, w = w0 + rs % S;
      if (h < 0 || h >= H || w < 0 || w >= W) return tc::zero8(dst);
      return copy(dst, x + ((n * H + h) * W + w) * C + c);
    }
    for (int j = 0; j < 8; j++) {
      const int i = int(rsc) + j, c = i % C, rs = i / C;
      dst[j] = i < RSC ? x_at(x, n, h0 + rs / S, w0 + rs % S, c) : __half(0.0f);
    }
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
  template <class Copy = tc::Copy8>
  __device__ void load8(int64_t m, int64_t kd, __half* dst, Copy copy = {}) const {
    if (m >= M || kd >= Kd) return tc::zero8(dst);
    g.im2col8(x, m, kd, Kd, vec, dst, copy);
  }
  __device__ __half at(int64_t m, int64_t kd) const {
    return m < M && kd < Kd ? g.im2col_at(x, m, int(kd)) : __half(0.0f);
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
  template <class Copy = tc::Copy8>
  __device__ void load8(int64_t m, int64_t kd, __half* dst, Copy copy = {}) const {
    if (m >= M || kd >= Kd) return tc::zero8(dst);
    const int64_t HW = int64_t(g.H) * g.W;
    const int64_t n = m / HW;
    const int hw = int(m % HW), h = hw / g.W, w = hw % g.W;
    int p, q;
    if (vec) {
      const int k = int(kd % g.K), rs = int(kd / g.K);
      if (!g.out_of(h, w, rs / g.S, rs % g.S, p, q)) return tc::zero8(dst);
      return copy(dst, dy + ((n * g.P + p) * g.Q + q) * g.K + k);
    }
    for (int j = 0; j < 8; j++) {
      const int kk = int(kd) + j, k = kk % g.K, rs = kk / g.K;
      const bool hit = kk < Kd && g.out_of(h, w, rs / g.S, rs % g.S, p, q);
      dst[j] = hit ? dy[((n * g.P + p) * g.Q + q) * g.K + k] : __half(0.0f);
    }
  }
  __device__ __half at(int64_t m, int64_t kd) const {
    if (m >= M || kd >= Kd) return __half(0.0f);
    const int64_t HW = int64_t(g.H) * g.W;
    const int hw = int(m % HW), k = int(kd % g.K), rs = int(kd / g.K);
    int p, q;
    if (!g.out_of(hw / g.W, hw % g.W, rs / g.S, rs % g.S, p, q)) return __half(0.0f);
    return dy[((m / HW * g.P + p) * g.Q + q) * g.K + k];
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
  template <class Copy = tc::Copy8>
  __device__ void load8(int64_t c, int64_t kd, __half* dst, Copy copy = {}) const {
    if (kd >= Kd) return tc::zero8(dst);
    const int k = int(kd % g.K), rs = int(kd / g.K);
    const __half* row = w + (int64_t(k) * g.R * g.S + rs) * g.C;  // w[k][r][s][:]
    if (vec && c + 8 <= g.C) return copy(dst, row + c);
    for (int j = 0; j < 8; j++) dst[j] = c + j < g.C ? row[c + j] : __half(0.0f);
  }
  __device__ __half at(int64_t c, int64_t kd) const {
    if (c >= g.C || kd >= Kd) return __half(0.0f);
    const int k = int(kd % g.K), rs = int(kd / g.K);
    return w[(int64_t(k) * g.R * g.S + rs) * g.C + c];
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
  template <class Copy = tc::Copy8>
  __device__ void load8(int64_t rsc, int64_t kd, __half* dst, Copy copy = {}) const {
    if (kd >= Kd || rsc >= RSC) return tc::zero8(dst);
    g.im2col8(x, kd, rsc, RSC, vec, dst, copy);
  }
  __device__ __half at(int64_t rsc, int64_t kd) const {
    return kd < Kd && rsc < RSC ? g.im2col_at(x, kd, int(rsc)) : __half(0.0f);
  }
};

inline const __half* hp(const half_t* p) { return reinterpret_cast<const __half*>(p); }
inline __half* hp(half_t* p) { return reinterpret_cast<__half*>(p); }

}  // namespace conv_gemm

// y (N*P*Q x K) = im2col(x) (N*P*Q x R*S*C) * w^T (R*S*C x K), + b[k], rounded once.
template <class Kernel>
void conv2d_forward_gemm(const Conv2dShape& s, const half_t* x, const half_t* w, const half_t* b,
                         half_t* y, cudaStream_t stream) {
  using namespace conv_gemm;
  const Geom g = Geom::of(s);
  const int64_t M = int64_t(s.N) * g.P * g.Q;
  const int Kd = s.R * s.S * s.C;
  const Im2colA a{hp(x), g, M, Kd, s.C % 8 == 0 && tc::aligned16(x)};
  const auto bw = tc::Dense<true>::make(hp(w), s.K, Kd, Kd);  // B(kd, k) = w[k][kd]
  tc_gemm<false, Kernel>(M, s.K, Kd, a, bw, EpiBias{hp(y), hp(b), s.K}, stream);
}

// dx (N*H*W x C) += gather(dy) (N*H*W x R*S*K) * w' (R*S*K x C). For stride > 1 most of the
// gathered row is zeros (taps whose h + ph - r is not a multiple of the stride); simple, and
// the price is paid only in the strided layers.
template <class Kernel>
void conv2d_backward_data_gemm(const Conv2dShape& s, const half_t* dy, const half_t* w,
                               half_t* dx, cudaStream_t stream) {
  using namespace conv_gemm;
  const Geom g = Geom::of(s);
  const int64_t M = int64_t(s.N) * s.H * s.W;
  const int Kd = s.R * s.S * s.K;
  const DgradA a{hp(dy), g, M, Kd, s.K % 8 == 0 && tc::aligned16(dy)};
  const DgradB b{hp(w), g, Kd, s.C % 8 == 0 && tc::aligned16(w)};
  tc_gemm<false, Kernel>(M, s.C, Kd, a, b, EpiAccumulate{hp(dx), s.C}, stream);
}

// dw (K x R*S*C) += dy^T (K x N*P*Q) * im2col(x) (N*P*Q x R*S*C); db by bias_grad_gpu.
template <class Kernel>
void conv2d_backward_filter_gemm(const Conv2dShape& s, const half_t* x, const half_t* dy,
                                 half_t* dw, half_t* db, cudaStream_t stream) {
  using namespace conv_gemm;
  const Geom g = Geom::of(s);
  const int64_t NPQ = int64_t(s.N) * g.P * g.Q;
  const int RSC = s.R * s.S * s.C;
  if (dw) {
    const auto a = tc::Dense<false>::make(hp(dy), s.K, NPQ, s.K);  // A(k, m) = dy[m][k]
    const WgradB b{hp(x), g, NPQ, RSC, s.C % 8 == 0 && tc::aligned16(x)};
    tc_gemm<true, Kernel>(s.K, RSC, NPQ, a, b, EpiAccumulate{hp(dw), RSC}, stream);  // kd: batch
  }
  if (db) bias_grad_gpu(NPQ, s.K, dy, db, stream);
}

}  // namespace cutrain
