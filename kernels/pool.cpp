// pooling CPU reference (math in pool.h). Threads (kernels/parallel.h): each thread owns
// whole outputs: rows of y, or whole images of dx; every sum runs in the 1-thread order.
#include "kernels/pool.h"

#include <cmath>
#include <cstdint>
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

// The maximum of window (p,q) of image n for every channel at once: idx[c], the index of
// channel c's maximum in image n (h*W*C + w*C + c; int32, so it shares the float lanes'
// width), is the first maximum in row-major window order; a NaN beats any
// number, and the first NaN stays. Forward and backward both call this, so they cannot disagree
// about ties. The channels are independent SIMD lanes: each tap's row of C values is compared
// with the best so far and a select keeps the winner (v != v: v is a NaN). The plain loop,
// one channel at a time with branches, is kept in tests/kernels/pool_test.cpp and gives the
// same indices. Callers check that an image's index fits in int32 (image_elements).
template <typename T>
void window_argmax(const Pool2dShape& sh, const T* xn, int p, int q, acc_t<T>* best,
                   int32_t* idx) {
  using A = acc_t<T>;
  const int C = sh.C;
  const int h0 = p * sh.stride_h - sh.pad_h, w0 = q * sh.stride_w - sh.pad_w;
  bool first = true;  // pad < window guarantees every window overlaps the image
  for (int r = 0; r < sh.R; r++) {
    const int h = h0 + r;
    if (h < 0 || h >= sh.H) continue;  // padding: left out, as if -inf
    for (int s = 0; s < sh.S; s++) {
      const int w = w0 + s;
      if (w < 0 || w >= sh.W) continue;
      const int32_t base = (h * sh.W + w) * C;  // x[n][h][w][0] in image n
      const T* xr = xn + base;
      if (first) {
        for (int c = 0; c < C; c++) best[c] = A(xr[c]), idx[c] = base + c;
        first = false;
        continue;
      }
#pragma omp simd
      for (int c = 0; c < C; c++) {
        const A v = A(xr[c]), b = best[c];
        const bool take = (v > b) | ((v != v) & (b == b));  // | and &: no branches
        best[c] = take ? v : b;
        idx[c] = take ? base + c : idx[c];
      }
    }
  }
}

// The elements of one input image, which window_argmax indexes in int32.
int32_t image_elements(const Pool2dShape& sh) {
  const int64_t image = int64_t(sh.H) * sh.W * sh.C;
  CHECK(image <= INT32_MAX, "maxpool2d: an image of " << sh.H << "x" << sh.W << "x" << sh.C
                                                      << " has more than 2^31 elements");
  return int32_t(image);
}

}  // namespace

template <typename T> void maxpool2d_forward_cpu(const Pool2dShape& sh, const T* x, T* y) {
  using A = acc_t<T>;
  const int P = sh.P(), Q = sh.Q();
  const int64_t image = image_elements(sh);
  // Each thread owns whole output rows y[n][p][:][:].
#pragma omp parallel if (worth_threads(sh.output_numel() * sh.R * sh.S))
  {
    std::vector<A> best(static_cast<size_t>(sh.C));  // this thread's scratch
    std::vector<int32_t> idx(static_cast<size_t>(sh.C));
#pragma omp for collapse(2) schedule(static)
    for (int n = 0; n < sh.N; n++)
      for (int p = 0; p < P; p++)
        for (int q = 0; q < Q; q++) {
          const T* xn = x + n * image;
          window_argmax(sh, xn, p, q, best.data(), idx.data());
          T* yr = y + ((int64_t(n) * P + p) * Q + q) * sh.C;
          for (int c = 0; c < sh.C; c++) yr[c] = xn[idx[size_t(c)]];
        }
  }
}

template <typename T>
void maxpool2d_backward_cpu(const Pool2dShape& sh, const T* x, const T* dy, T* dx) {
  using A = acc_t<T>;
  const int P = sh.P(), Q = sh.Q();
  const int64_t image = image_elements(sh);
  // One image's dx in acc_t: an input that is the argmax of several overlapping windows sums
  // their gradients there, in (p, q) order, and is rounded to T once.
#pragma omp parallel if (worth_threads(sh.output_numel() * sh.R * sh.S))
  {
    std::vector<A> acc(static_cast<size_t>(image));  // this thread's scratch
    std::vector<A> best(static_cast<size_t>(sh.C));
    std::vector<int32_t> idx(static_cast<size_t>(sh.C));
    // Each thread owns whole images dx[n][:][:][:].
#pragma omp for schedule(static)
    for (int n = 0; n < sh.N; n++) {
      T* dxn = dx + n * image;
      for (int64_t i = 0; i < image; i++) acc[size_t(i)] = A(dxn[i]);
      for (int p = 0; p < P; p++)
        for (int q = 0; q < Q; q++) {
          window_argmax(sh, x + n * image, p, q, best.data(), idx.data());
          const T* dyr = dy + ((int64_t(n) * P + p) * Q + q) * sh.C;
          for (int c = 0; c < sh.C; c++) acc[size_t(idx[size_t(c)])] += A(dyr[c]);
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
