// pooling CPU reference (math in pool.h). Threads (kernels/parallel.h): each thread owns
// whole outputs: rows of y, or whole images of dx; every sum runs in the 1-thread order.
#include "kernels/pool.h"

#include <cmath>
#include <vector>

#include "kernels/check.h"
#include "kernels/parallel.h"

namespace cutrain {

void pool2d_check_shape(const Pool2dShape& s, const char* op) {
  CHECK(s.N > 0 && s.H > 0 && s.W > 0 && s.C > 0,
        op << ": input sizes must be positive, got (N,H,W,C) = (" << s.N << "," << s.H << ","
           << s.W << "," << s.C << ")");
  CHECK(s.R > 0 && s.S > 0, op << ": window must be at least 1x1, got " << s.R << "x" << s.S);
  CHECK(s.stride_h >= 1 && s.stride_w >= 1,
        op << ": stride must be >= 1, got " << s.stride_h << "x" << s.stride_w);
  CHECK(s.pad_h >= 0 && s.pad_w >= 0,
        op << ": padding must be >= 0, got " << s.pad_h << "x" << s.pad_w);
  CHECK(s.pad_h < s.R && s.pad_w < s.S,
        op << ": padding " << s.pad_h << "x" << s.pad_w << " must be smaller than the window "
           << s.R << "x" << s.S << " (else a window could hold padding only)");
  CHECK(s.R <= s.H + 2 * s.pad_h && s.S <= s.W + 2 * s.pad_w,
        op << ": window " << s.R << "x" << s.S << " is larger than the padded input "
           << s.H + 2 * s.pad_h << "x" << s.W + 2 * s.pad_w << " (H,W = " << s.H << "," << s.W
           << ", padding " << s.pad_h << "x" << s.pad_w << ")");
}

namespace {

// The index into x of the maximum of window (p,q) of image n, channel c: the first maximum in
// row-major window order; a NaN beats any number, and the first NaN stays. Forward and
// backward both call this, so they cannot disagree about ties.
template <typename T>
int64_t window_argmax(const Pool2dShape& sh, const T* x, int n, int p, int q, int c) {
  using A = acc_t<T>;
  int64_t best_i = -1;
  A best = 0;
  const int h0 = p * sh.stride_h - sh.pad_h, w0 = q * sh.stride_w - sh.pad_w;
  for (int r = 0; r < sh.R; r++) {
    const int h = h0 + r;
    if (h < 0 || h >= sh.H) continue;  // padding: left out, as if -inf
    for (int s = 0; s < sh.S; s++) {
      const int w = w0 + s;
      if (w < 0 || w >= sh.W) continue;
      const int64_t i = ((int64_t(n) * sh.H + h) * sh.W + w) * sh.C + c;
      const A v = A(x[i]);
      if (best_i < 0 || v > best || (std::isnan(v) && !std::isnan(best))) {
        best = v;
        best_i = i;
      }
    }
  }
  return best_i;  // >= 0: pad < window guarantees every window overlaps the image
}

}  // namespace

template <typename T> void maxpool2d_forward_cpu(const Pool2dShape& sh, const T* x, T* y) {
  const int P = sh.P(), Q = sh.Q();
  // Each thread owns whole output rows y[n][p][:][:].
#pragma omp parallel for collapse(2) schedule(static) \
    if (worth_threads(sh.output_numel() * sh.R * sh.S))
  for (int n = 0; n < sh.N; n++)
    for (int p = 0; p < P; p++)
      for (int q = 0; q < Q; q++)
        for (int c = 0; c < sh.C; c++)
          y[((int64_t(n) * P + p) * Q + q) * sh.C + c] = x[window_argmax(sh, x, n, p, q, c)];
}

template <typename T>
void maxpool2d_backward_cpu(const Pool2dShape& sh, const T* x, const T* dy, T* dx) {
  using A = acc_t<T>;
  const int P = sh.P(), Q = sh.Q();
  const int64_t image = int64_t(sh.H) * sh.W * sh.C;  // elements of one input image
  // One image's dx in acc_t: an input that is the argmax of several overlapping windows sums
  // their gradients there and is rounded to T once.
#pragma omp parallel if (worth_threads(sh.output_numel() * sh.R * sh.S))
  {
    std::vector<A> acc(static_cast<size_t>(image));  // this thread's scratch
    // Each thread owns whole images dx[n][:][:][:].
#pragma omp for schedule(static)
    for (int n = 0; n < sh.N; n++) {
      T* dxn = dx + n * image;
      for (int64_t i = 0; i < image; i++) acc[size_t(i)] = A(dxn[i]);
      for (int p = 0; p < P; p++)
        for (int q = 0; q < Q; q++)
          for (int c = 0; c < sh.C; c++) {
            const int64_t i = window_argmax(sh, x, n, p, q, c) - n * image;
            acc[size_t(i)] += A(dy[((int64_t(n) * P + p) * Q + q) * sh.C + c]);
          }
      for (int64_t i = 0; i < image; i++) dxn[i] = T(acc[size_t(i)]);
    }
  }
}

template <typename T>
void global_avgpool_forward_cpu(int N, int H, int W, int C, const T* x, T* y) {
  using A = acc_t<T>;
  const int64_t HW = int64_t(H) * W;
#pragma omp parallel if (worth_threads(N * HW * C))
  {
    std::vector<A> sum(static_cast<size_t>(C));  // this thread's scratch
    // Each thread owns whole rows y[n][:].
#pragma omp for schedule(static)
    for (int n = 0; n < N; n++) {
      for (int c = 0; c < C; c++) sum[size_t(c)] = A(0);
      const T* xn = x + n * HW * C;
      for (int64_t i = 0; i < HW; i++)  // i = h*W + w: the pixels of image n in order
        for (int c = 0; c < C; c++) sum[size_t(c)] += A(xn[i * C + c]);
      for (int c = 0; c < C; c++) y[int64_t(n) * C + c] = T(sum[size_t(c)] / A(HW));
    }
  }
}

template <typename T>
void global_avgpool_backward_cpu(int N, int H, int W, int C, const T* dy, T* dx) {
  using A = acc_t<T>;
  const int64_t HW = int64_t(H) * W;
  // Each thread owns whole images dx[n][:][:][:].
#pragma omp parallel for schedule(static) if (worth_threads(N * HW * C))
  for (int n = 0; n < N; n++)
    for (int64_t i = 0; i < HW; i++)
      for (int c = 0; c < C; c++) {
        T& d = dx[(n * HW + i) * C + c];
        d = T(A(d) + A(dy[int64_t(n) * C + c]) / A(HW));
      }
}

#define CUTRAIN_INSTANTIATE(T)                                                                 \
  template void maxpool2d_forward_cpu<T>(const Pool2dShape&, const T*, T*);                    \
  template void maxpool2d_backward_cpu<T>(const Pool2dShape&, const T*, const T*, T*);         \
  template void global_avgpool_forward_cpu<T>(int, int, int, int, const T*, T*);               \
  template void global_avgpool_backward_cpu<T>(int, int, int, int, const T*, T*);
CUTRAIN_INSTANTIATE(float)
CUTRAIN_INSTANTIATE(double)
CUTRAIN_INSTANTIATE(half_t)
#undef CUTRAIN_INSTANTIATE

}  // namespace cutrain
