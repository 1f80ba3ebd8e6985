// linear CPU reference (math in linear.h). Threads (kernels/parallel.h): each thread owns
// whole rows of y, dx or dw, each summed in the 1-thread order.
#include "kernels/linear.h"

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/blocked_sum.h"
#include "kernels/check.h"
#include "kernels/parallel.h"
#include "kernels/tc_plan.h"

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

// --- GPU launch costs (linear.h): what linear.cu, matmul_gpu.cpp and cublas.cpp queue -------
// cublas: launches: estimated until a GPU profile confirms (cuBLAS picks the kernel per shape,
// and a split-K GEMM adds a reduction kernel).

namespace cutrain {

namespace {

void check_gpu_impl(LinearImpl impl, size_t elem) {
  CHECK(impl != LinearImpl::onednn, "linear: onednn is a CPU implementation; a GPU runs direct, "
                                    "tc or cublas");
  CHECK(impl != LinearImpl::tc || elem == 2,
        "linear: the tc implementation takes fp16 tensors, not " << elem << "-byte ones");
}

// into += c: one entry point's passes added up.
void add(LaunchCost& into, const LaunchCost& c) {
  into.launches += c.launches;
  into.bytes += c.bytes;
  into.flops += c.flops;
}

}  // namespace

LaunchCost linear_forward_gpu_cost(LinearImpl impl, int N, int C, int K, size_t elem,
                                   bool bias) {
  check_gpu_impl(impl, elem);
  const std::string name = std::string("linear_forward ") + impl_name(impl);
  const int64_t x = int64_t(N) * C, w = int64_t(K) * C, y = int64_t(N) * K, b = bias ? K : 0;
  const double flops = 2.0 * double(y) * C + (bias ? double(y) : 0);
  switch (impl) {
    case LinearImpl::tc: {  // y (N x K) = x * w^T, the bias added in the epilogue
      LaunchCost c = tc_gemm_cost(name, N, K, C, nbytes(x + w + b, elem), nbytes(y, elem));
      c.flops += bias ? double(y) : 0;
      return c;
    }
    case LinearImpl::cublas: {
      // With a bias, a first GEMM writes b * ones^T into y (reading b and N ones), and the
      // product then reads y back (beta 1).
      LaunchCost c{name, 1, nbytes(x + w + y, elem), flops, elem == 2, true};
      if (bias) c.launches += 1, c.bytes += nbytes(b + N + 2 * y, elem);
      return c;
    }
    default:  // direct: one thread per y element
      return {name, 1, nbytes(x + w + b + y, elem), flops};
  }
}

LaunchCost linear_backward_gpu_cost(LinearImpl impl, int N, int C, int K, size_t elem, bool dx,
                                    bool dw, bool db) {
  check_gpu_impl(impl, elem);
  const int64_t x = int64_t(N) * C, w = int64_t(K) * C, y = int64_t(N) * K;
  const double gemm_flops = 2.0 * double(y) * C;
  LaunchCost c{std::string("linear_backward ") + impl_name(impl), 0, 0, 0};
  // dx (N x C) += dy (N x K) * w: reads dy and w, reads and writes dx.
  const double dx_in = nbytes(y + w, elem), dx_out = 2 * nbytes(x, elem);
  // dw (K x C) += dy^T * x (kd: the batch): reads dy and x, reads and writes dw.
  const double dw_in = nbytes(y + x, elem), dw_out = 2 * nbytes(w, elem);
  if (impl == LinearImpl::tc) {
    if (dx) add(c, tc_gemm_cost(c.kernel, N, C, K, dx_in, dx_out));
    if (dw) add(c, tc_gemm_cost(c.kernel, K, C, N, dw_in, dw_out));
  } else {
    if (dx) add(c, {c.kernel, 1, dx_in + dx_out, gemm_flops});
    if (dw) add(c, {c.kernel, 1, dw_in + dw_out, gemm_flops});
  }
  c.tensor = (dx || dw) && (impl == LinearImpl::tc || (impl == LinearImpl::cublas && elem == 2));
  if (db) {
    if (impl == LinearImpl::cublas)  // db += dy^T * ones: one more GemmEx (n = 1)
      add(c, {c.kernel, 1, nbytes(y + N + 2 * int64_t(K), elem), 2.0 * double(y)});
    else
      add(c, bias_grad_gpu_cost(N, K, elem));
  }
  c.estimated = impl == LinearImpl::cublas && c.launches > 0;
  return c;
}

}  // namespace cutrain
