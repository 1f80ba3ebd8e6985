// defines: linear (fully connected) forward and backward, CPU reference.
//
// math:  y[n][k] = b[k] + sum_c x[n][c] * w[k][c]        x (N,C), w (K,C), b (K), y (N,K)
//        dx[n][c] += sum_k dy[n][k] * w[k][c]            (dy W)
//        dw[k][c] += sum_n dy[n][k] * x[n][c]            (dy^T X)
//        db[k]    += sum_n dy[n][k]
// flops: 2*N*K*C forward, twice that backward. Sums in acc_t<T> (fp32 for fp16 storage).
// b / db may be null (no bias). Backward outputs accumulate; any of dx, dw may be null when
// that gradient is not wanted.
#pragma once
#include "kernels/half.h"

namespace cutrain {

template <typename T>
void linear_forward_cpu(int N, int C, int K, const T* x, const T* w, const T* b, T* y);

template <typename T>
void linear_backward_cpu(int N, int C, int K, const T* x, const T* w, const T* dy, T* dx,
                         T* dw, T* db);

}  // namespace cutrain
