// average_cpu (kernels/elementwise.h) by hand: the halving is exact, the sum is rounded once in
// the accumulation dtype, and fp16 inputs whose sum overflows fp16 still average finitely (the
// sum is taken in fp32, not in fp16).
#include <cmath>
#include <vector>

#include "kernels/elementwise.h"
#include "tests/test_util.h"

using namespace cutrain;

TEST_CASE_TEMPLATE("average_cpu: (a + b) / 2 per element", T, float, double) {
  const std::vector<T> a = {T(1), T(-3), T(0.5), T(7), T(-0.0)};
  const std::vector<T> b = {T(2), T(3), T(0.25), T(-1), T(-0.0)};
  std::vector<T> y(a.size(), T(99));
  average_cpu<T>(int64_t(a.size()), a.data(), b.data(), y.data());
  const std::vector<T> want = {T(1.5), T(0), T(0.375), T(3), T(-0.0)};
  for (size_t i = 0; i < a.size(); i++) {
    REQUIRE(y[i] == want[i]);
    REQUIRE(std::signbit(y[i]) == std::signbit(want[i]));
  }
}

TEST_CASE("average_cpu f16: the sum in fp32, so two large halves average to a finite half") {
  const std::vector<half_t> a = {half_t(65504.0f), half_t(1.0f), half_t(2049.0f)};
  const std::vector<half_t> b = {half_t(65504.0f), half_t(0.0009765625f), half_t(2051.0f)};
  std::vector<half_t> y(3);
  average_cpu<half_t>(3, a.data(), b.data(), y.data());
  REQUIRE(float(y[0]) == 65504.0f);  // the fp16 sum would be inf
  // (1 + 2^-10) / 2 = 0.5 + 2^-11: representable in fp16 (ulp at 0.5 is 2^-11)
  REQUIRE(float(y[1]) == 0.50048828125f);
  // 2049 and 2051 are not fp16 values (ulp 2 above 2048): they arrive as 2048 and 2052
  REQUIRE(float(y[2]) == 2050.0f);
}

TEST_CASE("average_cpu: n = 0 writes nothing") {
  float y = 5.0f;
  average_cpu<float>(0, nullptr, nullptr, &y);
  REQUIRE(y == 5.0f);
}
