// linear CPU reference (math in linear.h). Threads (kernels/parallel.h): each thread owns
// whole rows of y, dx or dw, each summed in the 1-thread order.
#include "kernels/linear.h"

#include <vector>

#include "kernels/parallel.h"

namespace cutrain {

template <typename T>
void linear_forward_cpu(int N, int C, int K, const T* x, const T* w, const T* b, T* y) {
  using A = acc_t<T>;
  // Each thread owns whole rows y[n][:].
#pragma omp parallel for schedule(static) if (worth_threads(int64_t(N) * C * K))
  for (int n = 0; n < N; n++)
    for (int k = 0; k < K; k++) {
      A s = b ? A(b[k]) : A(0);
      const T* xr = x + size_t(n) * C;
      const T* wr = w + size_t(k) * C;
      for (int c = 0; c < C; c++) s += A(xr[c]) * A(wr[c]);
      y[size_t(n) * K + k] = T(s);
    }
}

template <typename T>
void linear_backward_cpu(int N, int C, int K, const T* x, const T* w, const T* dy, T* dx,
                         T* dw, T* db) {
  using A = acc_t<T>;
  const bool threads = worth_threads(int64_t(N) * C * K);
  if (dx) {
#pragma omp parallel if (threads)
    {
      std::vector<A> acc(static_cast<size_t>(C));  // this thread's scratch
      // Each thread owns whole rows dx[n][:].
#pragma omp for schedule(static)
      for (int n = 0; n < N; n++) {
        for (int c = 0; c < C; c++) acc[size_t(c)] = A(dx[size_t(n) * C + c]);
        for (int k = 0; k < K; k++) {
          const A g = A(dy[size_t(n) * K + k]);
          const T* wr = w + size_t(k) * C;
          for (int c = 0; c < C; c++) acc[size_t(c)] += g * A(wr[c]);
        }
        for (int c = 0; c < C; c++) dx[size_t(n) * C + c] = T(acc[size_t(c)]);
      }
    }
  }
  if (dw) {
#pragma omp parallel if (threads)
    {
      std::vector<A> acc(static_cast<size_t>(C));  // this thread's scratch
      // Each thread owns whole rows dw[k][:].
#pragma omp for schedule(static)
      for (int k = 0; k < K; k++) {
        for (int c = 0; c < C; c++) acc[size_t(c)] = A(dw[size_t(k) * C + c]);
        for (int n = 0; n < N; n++) {
          const A g = A(dy[size_t(n) * K + k]);
          const T* xr = x + size_t(n) * C;
          for (int c = 0; c < C; c++) acc[size_t(c)] += g * A(xr[c]);
        }
        for (int c = 0; c < C; c++) dw[size_t(k) * C + c] = T(acc[size_t(c)]);
      }
    }
  }
  if (db)
    for (int k = 0; k < K; k++) {  // N*K adds: never worth a thread
      A s = A(db[k]);
      for (int n = 0; n < N; n++) s += A(dy[size_t(n) * K + k]);
      db[k] = T(s);
    }
}

#define CUTRAIN_INSTANTIATE(T)                                                              \
  template void linear_forward_cpu<T>(int, int, int, const T*, const T*, const T*, T*);     \
  template void linear_backward_cpu<T>(int, int, int, const T*, const T*, const T*, T*, T*, \
                                       T*);
CUTRAIN_INSTANTIATE(float)
CUTRAIN_INSTANTIATE(double)
CUTRAIN_INSTANTIATE(half_t)
#undef CUTRAIN_INSTANTIATE

}  // namespace cutrain
