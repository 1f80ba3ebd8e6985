#include "kernels/batchnorm.h"

#if defined(_OPENMP)
#include <omp.h>
#endif

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/blocked_sum.h"
#include "kernels/parallel.h"

namespace cutrain {

// The loops run over pixels m outside and channels c inside, so x is read in memory order
// (NHWC) and each channel keeps its own sum (blocked pairwise: channel_sums below). The
// channels are independent, so the inner loops run as SIMD lanes (omp simd): every sum still
// adds its terms in order, with the bits of the scalar loop (no fma: -ffp-contract=off).
//
// Threads (kernels/parallel.h): the per-element passes (y, dx) hand each thread whole pixel
// rows; the per-channel sums hand each thread whole channels (channel_sums below), never a
// share of the pixels, so every sum adds its terms in the 1-thread order.

namespace {
// The fused ReLU's flag as a compile-time constant: with_relu(relu, f) calls f with
// std::true_type or std::false_type, so each loop that takes it is compiled twice and neither
// copy tests the flag per element (y, null without the ReLU, may then be read unconditionally).
// Measured with the flag tested per element: every BN layer of the default model about 1.5x
// slower, fused or not (bench_cpu_kernels --bn-only, which prints both ways).
template <typename F> void with_relu(bool relu, F&& f) {
  if (relu) f(std::true_type{});
  else f(std::false_type{});
}
// The fused ReLU's rules (batchnorm.h): the output, and the gradient masked by it. Both are
// selects between values already loaded: dy[i] is read whatever y[i] is. With the load inside
// the select's arm (`y > 0 ? dy[i] : 0`) the compiler may not read dy[i] where the source does
// not, so the select stayed a branch, taken at random on real activations: the fused backward
// ran 3-5x slower than BN and ReLU apart ([cpu-bn], bench/results/cpu-bn-2026-12-07.md).
template <bool Relu, typename T> T relu_out(T v) {
  if constexpr (Relu) return !(acc_t<T>(v) > 0) ? T(0.0f) : v;
  else return v;
}
template <bool Relu, typename T> acc_t<T> masked_dy(const T* y, const T* dy, int64_t i) {
  const acc_t<T> g = acc_t<T>(dy[i]);
  if constexpr (Relu) return !(acc_t<T>(y[i]) > 0) ? acc_t<T>(0) : g;
  else return g;
}

// out[c] = sum over m = 0, 1, ..., M-1 of term(m, c), for every channel c, blocked pairwise
// (kernels/blocked_sum.h): each block of kSumBlock pixels in order, the block sums pairwise.
// Each thread owns a contiguous run of channels, whole groups of kGroup (16 fp32 values: one
// 64-byte cache line, so no two threads write or read the same line): it reads the pixels in
// memory order, only its part of each, in one stream, summing into local accumulators, and
// writes its sums once at the end. On one thread that is one pass over x, every channel at
// once. Which thread sums a channel does not change its order, so the bits do not depend on
// the thread count.
//
// K sums per channel in the same pass (the backward's two): out[k * C + c] is the sum of the
// k-th terms, and add(m, c, b, n) adds the K terms of (m, c) into b[0], b[n], ..., b[(K-1) n].
// Each is a lane of its own, summed in the same order as alone: the same bits.
constexpr int kGroup = 16;
template <int K, typename A, typename Add>
void channel_sums_k(int64_t M, int C, A* out, Add add) {
  const int groups = (C + kGroup - 1) / kGroup;
#pragma omp parallel if (worth_threads(M * C))
  {
#if defined(_OPENMP)
    const int t = omp_get_thread_num(), T = omp_get_num_threads();
#else
    const int t = 0, T = 1;
#endif
    const int c0 = std::min(C, groups * t / T * kGroup);
    const int c1 = std::min(C, groups * (t + 1) / T * kGroup);
    if (c0 < c1) {
      const size_t n = size_t(c1 - c0);
      BlockedSums<A> sums(K * n, M);
      std::vector<A> block(K * n, A(0));  // one block's sums (add() zeroes them)
      A* b = block.data();                // b[k * n + c - c0]: channel c's k-th
      for (int64_t m0 = 0; m0 < M; m0 += kSumBlock) {
        for (int64_t m = m0; m < std::min(M, m0 + kSumBlock); m++)
#pragma omp simd
          for (int c = c0; c < c1; c++) add(m, c, b + (c - c0), n);  // lanes: channels
        sums.add(block.data());
      }
      sums.total(block.data());
      for (int k = 0; k < K; k++)
        std::copy(b + k * n, b + (k + 1) * n, out + size_t(k) * size_t(C) + size_t(c0));
    }
  }
}

// One sum per channel: out[c] = sum over m of term(m, c).
template <typename A, typename Term>
void channel_sums(int64_t M, int C, A* out, Term term) {
  channel_sums_k<1>(M, C, out, [&](int64_t m, int c, A* b, size_t) { b[0] += term(m, c); });
}
}  // namespace

template <typename T>
void batchnorm_forward_train_cpu(int64_t M, int C, const T* x, const acc_t<T>* gamma,
                                 const acc_t<T>* beta, double eps, double momentum, bool relu,
                                 T* y, acc_t<T>* save_mean, acc_t<T>* save_invstd,
                                 acc_t<T>* running_mean, acc_t<T>* running_var,
                                 const BatchNormSync* sync) {
  using A = acc_t<T>;
  const size_t Cs = size_t(C);
  const int64_t count = sync ? sync->count : M;  // the values per channel, over every replica
  const A Mt = A(count), Mt1 = A(count - 1);
  // Two passes: the mean first, then the mean squared deviation from it. Why not one pass
  // with var = E[x^2] - E[x]^2? When |mean| is large next to the spread, that subtracts two
  // nearly equal large numbers and loses the variance in their rounding error: for fp16
  // activations near 30000 with a spread of 16, E[x^2] ~ 9e8, where fp32 numbers are 64
  // apart -- coarser than the variance itself -- and the difference can even come out
  // negative, making sqrt() a NaN. Subtracting the mean first keeps the deviations small, so
  // their squares keep full precision. (Welford's one-pass update is as accurate; two plain
  // passes are easier to read, and a CPU reference does not mind reading x twice.)
  std::vector<A> mean(Cs), var(Cs);
  channel_sums(M, C, mean.data(), [&](int64_t m, int c) { return A(x[m * C + c]); });
  if (sync) sync->sum(mean.data(), C);
  for (size_t c = 0; c < Cs; c++) mean[c] /= Mt;
  channel_sums(M, C, var.data(), [&](int64_t m, int c) {
    const A d = A(x[m * C + c]) - mean[size_t(c)];
    return d * d;
  });
  if (sync) sync->sum(var.data(), C);
  const A mom = A(momentum);
  for (size_t c = 0; c < Cs; c++) {
    var[c] /= Mt;  // biased: the variance of this batch
    save_mean[c] = mean[c];
    save_invstd[c] = A(1) / std::sqrt(var[c] + A(eps));
    const A unbiased = var[c] * Mt / Mt1;
    running_mean[c] = (A(1) - mom) * running_mean[c] + mom * mean[c];
    running_var[c] = (A(1) - mom) * running_var[c] + mom * unbiased;
  }
  // Each thread owns whole pixel rows y[m][:].
  with_relu(relu, [&](auto relu_c) {
    constexpr bool fused = decltype(relu_c)::value;
#pragma omp parallel for schedule(static) if (worth_threads(M * C))
    for (int64_t m = 0; m < M; m++) {
      const T* xr = x + m * C;
      T* yr = y + m * C;
#pragma omp simd
      for (size_t c = 0; c < Cs; c++)
        yr[c] = relu_out<fused>(T(gamma[c] * ((A(xr[c]) - mean[c]) * save_invstd[c]) + beta[c]));
    }
  });
}

template <typename T>
void batchnorm_forward_eval_cpu(int64_t M, int C, const T* x, const acc_t<T>* gamma,
                                const acc_t<T>* beta, const acc_t<T>* running_mean,
                                const acc_t<T>* running_var, double eps, bool relu, T* y) {
  using A = acc_t<T>;
  const size_t Cs = size_t(C);
  std::vector<A> invstd(Cs);
  for (size_t c = 0; c < Cs; c++) invstd[c] = A(1) / std::sqrt(running_var[c] + A(eps));
  // (x - mean) * scale rather than the folded x * scale + shift: the fold cancels badly when
  // |x| is large next to its deviation from the mean (the case the two passes above guard).
  // Each thread owns whole pixel rows y[m][:].
  with_relu(relu, [&](auto relu_c) {
    constexpr bool fused = decltype(relu_c)::value;
#pragma omp parallel for schedule(static) if (worth_threads(M * C))
    for (int64_t m = 0; m < M; m++) {
      const T* xr = x + m * C;
      T* yr = y + m * C;
#pragma omp simd
      for (size_t c = 0; c < Cs; c++)
        yr[c] = relu_out<fused>(
            T(gamma[c] * ((A(xr[c]) - running_mean[c]) * invstd[c]) + beta[c]));
    }
  });
}

namespace {
// The backward's per-channel sums, in one (2C) vector (the layout the GPU's and --sync-bn's
// all-reduce use): [c] = sum_m dy[m][c], [C + c] = sum_m dy[m][c] * xhat[m][c], with
// xhat = (x - mean) * invstd; dy masked by the fused ReLU's output y when relu.
template <typename T>
std::vector<acc_t<T>> sum_dy_dyxhat(int64_t M, int C, const T* x, const T* y, const T* dy,
                                    bool relu, const acc_t<T>* mean, const acc_t<T>* invstd) {
  using A = acc_t<T>;
  std::vector<A> sums(2 * size_t(C));
  with_relu(relu, [&](auto relu_c) {
    constexpr bool fused = decltype(relu_c)::value;
    channel_sums_k<2>(M, C, sums.data(), [&](int64_t m, int c, A* b, size_t n) {  // one pass
      const A g = masked_dy<fused>(y, dy, m * C + c);
      b[0] += g;
      b[n] += g * ((A(x[m * C + c]) - mean[c]) * invstd[c]);
    });
  });
  return sums;
}

template <typename A>
void accumulate_param_grads(int C, const std::vector<A>& sums, A* dgamma, A* dbeta) {
  for (size_t c = 0; c < size_t(C); c++) {
    if (dgamma) dgamma[c] += sums[size_t(C) + c];
    if (dbeta) dbeta[c] += sums[c];
  }
}
}  // namespace

template <typename T>
void batchnorm_backward_train_cpu(int64_t M, int C, const T* x, const T* y, const T* dy,
                                  const acc_t<T>* gamma, const acc_t<T>* save_mean,
                                  const acc_t<T>* save_invstd, bool relu, T* dx,
                                  acc_t<T>* dgamma, acc_t<T>* dbeta, const BatchNormSync* sync) {
  using A = acc_t<T>;
  std::vector<A> sums = sum_dy_dyxhat<T>(M, C, x, y, dy, relu, save_mean, save_invstd);
  accumulate_param_grads<A>(C, sums, dgamma, dbeta);  // this replica's own
  // Every replica's sums, for dx (called even without dx: every replica joins).
  if (sync) sync->sum(sums.data(), 2 * C);
  if (!dx) return;
  const size_t Cs = size_t(C);
  const A* sdy = sums.data();
  const A* sdyx = sums.data() + C;
  const A Ma = A(sync ? sync->count : M);
  std::vector<A> k(Cs);  // gamma * invstd / M
  for (size_t c = 0; c < Cs; c++) k[c] = gamma[c] * save_invstd[c] / Ma;
  // Each thread owns whole pixel rows dx[m][:].
  with_relu(relu, [&](auto relu_c) {
    constexpr bool fused = decltype(relu_c)::value;
#pragma omp parallel for schedule(static) if (worth_threads(M * C))
    for (int64_t m = 0; m < M; m++) {
      const T* xr = x + m * C;
      T* dxr = dx + m * C;
#pragma omp simd
      for (size_t c = 0; c < Cs; c++) {
        const A xhat = (A(xr[c]) - save_mean[c]) * save_invstd[c];
        const A g = masked_dy<fused>(y, dy, m * C + int64_t(c));
        const A d = k[c] * (Ma * g - sdy[c] - xhat * sdyx[c]);
        dxr[c] = T(A(dxr[c]) + d);
      }
    }
  });
}

template <typename T>
void batchnorm_backward_eval_cpu(int64_t M, int C, const T* x, const T* y, const T* dy,
                                 const acc_t<T>* gamma, const acc_t<T>* running_mean,
                                 const acc_t<T>* running_var, double eps, bool relu, T* dx,
                                 acc_t<T>* dgamma, acc_t<T>* dbeta) {
  using A = acc_t<T>;
  const size_t Cs = size_t(C);
  std::vector<A> invstd(Cs);
  for (size_t c = 0; c < Cs; c++) invstd[c] = A(1) / std::sqrt(running_var[c] + A(eps));
  if (dgamma || dbeta)
    accumulate_param_grads<A>(
        C, sum_dy_dyxhat<T>(M, C, x, y, dy, relu, running_mean, invstd.data()), dgamma, dbeta);
  if (!dx) return;
  // Each thread owns whole pixel rows dx[m][:].
  with_relu(relu, [&](auto relu_c) {
    constexpr bool fused = decltype(relu_c)::value;
#pragma omp parallel for schedule(static) if (worth_threads(M * C))
    for (int64_t m = 0; m < M; m++) {
      T* dxr = dx + m * C;
#pragma omp simd
      for (size_t c = 0; c < Cs; c++)
        dxr[c] = T(A(dxr[c]) + masked_dy<fused>(y, dy, m * C + int64_t(c)) * gamma[c] * invstd[c]);
    }
  });
}

#define CUTRAIN_INSTANTIATE(T)                                                             \
  template void batchnorm_forward_train_cpu<T>(int64_t, int, const T*, const acc_t<T>*,    \
                                               const acc_t<T>*, double, double, bool, T*,  \
                                               acc_t<T>*, acc_t<T>*, acc_t<T>*, acc_t<T>*,  \
                                               const BatchNormSync*);                       \
  template void batchnorm_forward_eval_cpu<T>(int64_t, int, const T*, const acc_t<T>*,     \
                                              const acc_t<T>*, const acc_t<T>*,            \
                                              const acc_t<T>*, double, bool, T*);          \
  template void batchnorm_backward_train_cpu<T>(int64_t, int, const T*, const T*, const T*, \
                                                const acc_t<T>*, const acc_t<T>*,          \
                                                const acc_t<T>*, bool, T*, acc_t<T>*,      \
                                                acc_t<T>*, const BatchNormSync*);           \
  template void batchnorm_backward_eval_cpu<T>(int64_t, int, const T*, const T*, const T*, \
                                               const acc_t<T>*, const acc_t<T>*,           \
                                               const acc_t<T>*, double, bool, T*, acc_t<T>*,\
                                               acc_t<T>*);
CUTRAIN_INSTANTIATE(float)
CUTRAIN_INSTANTIATE(double)
CUTRAIN_INSTANTIATE(half_t)
#undef CUTRAIN_INSTANTIATE

template <typename A>
void batchnorm_running_update_cpu(int C, const A* sums, double scale, double momentum,
                                  A* running_mean, A* running_var) {
  const A mom = A(momentum), s = A(scale);
  for (int c = 0; c < C; c++) {
    const A mean = sums[c] * s, var = sums[C + c] * s;
    running_mean[c] = (A(1) - mom) * running_mean[c] + mom * mean;
    running_var[c] = (A(1) - mom) * running_var[c] + mom * var;
  }
}
template void batchnorm_running_update_cpu<float>(int, const float*, double, double, float*,
                                                  float*);
template void batchnorm_running_update_cpu<double>(int, const double*, double, double, double*,
                                                   double*);

}  // namespace cutrain
