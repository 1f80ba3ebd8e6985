// The reductions' CPU reference: sums by hand, why it sums in double, the global norm, and the
// GPU error-bound depth of reduce.h worked out for a few sizes.
#include <cmath>
#include <vector>

#include "kernels/reduce.h"
#include "tests/test_util.h"

using namespace cutrain;

TEST_CASE_TEMPLATE("sum_cpu, mean_cpu, sumsq_cpu by hand", T, float, double, half_t) {
  // dyadic values: exact in every type and every sum
  const std::vector<T> x = cutrain_test::to<T>({1, 2, 3, 4.5, -0.25});
  REQUIRE(sum_cpu<T>(5, x.data()) == 10.25);
  REQUIRE(mean_cpu<T>(5, x.data()) == 2.05);  // 10.25 / 5, one double rounding either way
  REQUIRE(sumsq_cpu<T>(5, x.data()) == 1 + 4 + 9 + 20.25 + 0.0625);
  REQUIRE(sum_cpu<T>(0, x.data()) == 0);
  REQUIRE(sumsq_cpu<T>(0, x.data()) == 0);
  REQUIRE_ERROR(mean_cpu<T>(0, x.data()), "mean of 0 elements: need at least one");
}

TEST_CASE("sum_cpu sums in double: float terms lose nothing to the running sum") {
  // In float, 1e8 + 1 rounds back to 1e8 (the spacing there is 8), so a float running sum
  // gives 0; in double every partial sum here is exact.
  const std::vector<float> x = {1e8f, 1.0f, -1e8f};
  REQUIRE(sum_cpu<float>(3, x.data()) == 1.0);
  float f = 0;
  for (float v : x) f += v;
  REQUIRE(f == 0.0f);
  // fp16 values near the format's limits are widened exactly
  const std::vector<half_t> h = {half_t(65504.0f), half_t(65504.0f), half_t::from_bits(1)};
  REQUIRE(sum_cpu<half_t>(3, h.data()) == 131008.0 + std::ldexp(1.0, -24));
  REQUIRE(sumsq_cpu<half_t>(2, h.data()) == 2 * 65504.0 * 65504.0);
}

TEST_CASE_TEMPLATE("global_norm_cpu: sqrt of the sum of squares over every tensor", T, float,
                   double, half_t) {
  const std::vector<T> a = cutrain_test::to<T>({3}), b = cutrain_test::to<T>({0, 4}),
                       c = cutrain_test::to<T>({12});
  const T* ptrs[4] = {a.data(), b.data(), nullptr, c.data()};
  const int64_t sizes[4] = {1, 2, 0, 1};  // an empty tensor counts for nothing
  REQUIRE(global_norm_cpu<T>(4, ptrs, sizes) == 13.0);  // sqrt(9 + 16 + 144)
  REQUIRE(global_norm_cpu<T>(2, ptrs, sizes) == 5.0);
  REQUIRE(global_norm_cpu<T>(0, ptrs, sizes) == 0.0);
}

TEST_CASE("reduce_gpu_depth: the roundings behind the GPU error bound (reduce.h)") {
  // n = 1: one block; the thread's one term, 8 tree levels, 1 partial, 8 levels
  REQUIRE(reduce_gpu_blocks(1) == 1);
  REQUIRE(reduce_gpu_depth(1) == 1 + 8 + 1 + 8);
  // n = 10^6: 977 blocks of 256 threads, 4 terms a thread, 4 partials a finishing thread
  REQUIRE(reduce_gpu_blocks(1000000) == 977);
  REQUIRE(reduce_gpu_depth(1000000) == 4 + 8 + 4 + 8);
  // n = 10^8: the grid is capped at 1024 blocks, so the threads' sequences grow
  REQUIRE(reduce_gpu_blocks(100000000) == 1024);
  REQUIRE(reduce_gpu_depth(100000000) == 382 + 20);
  // a global norm over 40 tensors: two launches (32 + 8 tensors)
  std::vector<int64_t> sizes(40, 1000);
  // launch 1: 32000 elements -> 32 blocks (8192 threads), 1 term per tensor a thread: 32;
  // launch 2: 8000 -> 8 blocks, 8 terms; 40 partials, 1 a finishing thread
  REQUIRE(global_norm_gpu_depth(40, sizes.data()) == 32 + 8 + 1 + 8);
}
