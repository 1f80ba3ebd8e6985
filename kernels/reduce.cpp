// reductions, CPU reference (math and precision in reduce.h).
#include "kernels/reduce.h"

#include <algorithm>
#include <cmath>

#include "kernels/check.h"

namespace cutrain {

template <typename T> double sum_cpu(int64_t n, const T* x) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += double(x[i]);
  return s;
}

template <typename T> double mean_cpu(int64_t n, const T* x) {
  CHECK(n > 0, "mean of " << n << " elements: need at least one");
  return sum_cpu(n, x) / double(n);
}

template <typename T> double sumsq_cpu(int64_t n, const T* x) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += double(x[i]) * double(x[i]);
  return s;
}

template <typename T>
double global_norm_cpu(int count, const T* const* ptrs, const int64_t* sizes) {
  CHECK(count >= 0, "global norm of " << count << " tensors");
  double s = 0;
  for (int t = 0; t < count; t++) {
    CHECK(sizes[t] >= 0, "global norm: tensor " << t << " has " << sizes[t] << " elements");
    s += sumsq_cpu(sizes[t], ptrs[t]);
  }
  return std::sqrt(s);
}

// Both follow reduce.cu: a thread adds its terms in sequence, then a block tree of depth 8
// (log2 kReduceBlock), then the finishing thread adds its ceil(P / 256) partials in sequence,
// then a tree of depth 8 again.
static int64_t finish_depth(int64_t partials) {
  return 8 + (partials + kReduceBlock - 1) / kReduceBlock + 8;
}

int64_t reduce_gpu_depth(int64_t n) {
  const int64_t threads = int64_t(reduce_gpu_blocks(n)) * kReduceBlock;
  return (n + threads - 1) / threads + finish_depth(reduce_gpu_blocks(n));
}

int64_t global_norm_gpu_depth(int count, const int64_t* sizes) {
  int64_t most = 0, partials = 0;
  for (int t0 = 0; t0 < count; t0 += kReduceChunk) {
    const int t1 = std::min(count, t0 + kReduceChunk);
    int64_t total = 0;
    for (int t = t0; t < t1; t++) total += sizes[t];
    const int blocks = reduce_gpu_blocks(total);
    const int64_t threads = int64_t(blocks) * kReduceBlock;
    int64_t terms = 0;  // the most terms one thread adds, through every tensor of the chunk
    for (int t = t0; t < t1; t++) terms += (sizes[t] + threads - 1) / threads;
    most = std::max(most, terms);
    partials += blocks;
  }
  return most + finish_depth(partials);
}

#define CUTRAIN_INSTANTIATE(T)                                        \
  template double sum_cpu<T>(int64_t, const T*);                      \
  template double mean_cpu<T>(int64_t, const T*);                     \
  template double sumsq_cpu<T>(int64_t, const T*);                    \
  template double global_norm_cpu<T>(int, const T* const*, const int64_t*);
CUTRAIN_INSTANTIATE(float)
CUTRAIN_INSTANTIATE(double)
CUTRAIN_INSTANTIATE(half_t)
#undef CUTRAIN_INSTANTIATE

}  // namespace cutrain
