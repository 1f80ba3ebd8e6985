// linear CPU reference (math in linear.h). Threads (kernels/parallel.h): each thread owns
// whole rows of y, dx or dw, each summed in the 1-thread order.
#include "kernels/linear.h"

#include <algorithm>
#include <vector>

#include "kernels/blocked_sum.h"
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
  // dw and db sum over the batch: blocked pairwise (kernels/blocked_sum.h), each block of
  // kSumBlock rows n in order, the blocks pairwise; the old value added to the total.
  if (dw) {
#pragma omp parallel if (threads)
    {
      // this thread's scratch: one block's sums (add() hands them over and zeroes them)
      std::vector<A> block(static_cast<size_t>(C));
      BlockedSums<A> sums(static_cast<size_t>(C), N);
      // Each thread owns whole rows dw[k][:].
#pragma omp for schedule(static)
      for (int k = 0; k < K; k++) {
        sums.reset();
        std::fill(block.begin(), block.end(), A(0));
        for (int n0 = 0; n0 < N; n0 += kSumBlock) {
          for (int n = n0; n < std::min(N, n0 + kSumBlock); n++) {
            const A g = A(dy[size_t(n) * K + k]);
            const T* xr = x + size_t(n) * C;
            for (int c = 0; c < C; c++) block[size_t(c)] += g * A(xr[c]);
          }
          sums.add(block.data());
        }
        sums.total(block.data());
        T* dwr = dw + size_t(k) * C;
        for (int c = 0; c < C; c++) dwr[c] = T(A(dwr[c]) + block[size_t(c)]);
      }
    }
  }
  if (db)
    for (int k = 0; k < K; k++)  // N*K adds: never worth a thread
      db[k] = T(A(db[k]) + blocked_sum<A>(N, [&](int64_t n) { return A(dy[size_t(n) * K + k]); }));
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
