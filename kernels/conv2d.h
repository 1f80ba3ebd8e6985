// defines: Conv2dShape and conv2d forward / backward, CPU reference.
//
// math (cross-correlation, as every framework calls "convolution"):
//   y[n][p][q][k] = b[k] + sum_{r,s,c} x[n][p*Sh - Ph + r][q*Sw - Pw + s][c] * w[k][r][s][c]
//   where x outside the image reads as 0 (zero padding).
//   x (N,H,W,C)  w (K,R,S,C)  b (K)  y (N,P,Q,K)
//   P = (H + 2*Ph - R) / Sh + 1,  Q = (W + 2*Pw - S) / Sw + 1
// backward (each accumulates, +=):
//   dx[n][h][w][c] += sum over (p,q,r,s,k) with h = p*Sh - Ph + r, w = q*Sw - Pw + s of
//                     dy[n][p][q][k] * w[k][r][s][c]
//   dw[k][r][s][c] += sum_{n,p,q} dy[n][p][q][k] * x[n][p*Sh - Ph + r][q*Sw - Pw + s][c]
//   db[k]          += sum_{n,p,q} dy[n][p][q][k]
// flops: 2*N*P*Q*K*R*S*C forward; the same again for each of dx and dw.
// precision: products summed in acc_t<T> (fp32 for fp16 storage), rounded once to T.
// threads: OpenMP over independent outputs; the same bits on any thread count.
#pragma once
#include <cstdint>

#include "kernels/half.h"

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

}  // namespace cutrain
