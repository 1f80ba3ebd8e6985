// defines: what long_sums_test.cpp (CPU) and long_sums_gpu_test.cpp share: the inputs of the
// long-sum accuracy tests (values(): a mean and a spread, in float), their measure
// (max_rel_error(): against a double reference, relative to a scale such as sum |terms|) and
// the bound the tests assert (kLongSumBound).
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/rng.h"

namespace cutrain_test {

// 2 u = 2^-23, relative to sum |terms|: the blocked pairwise sums stay below it on the tests'
// inputs, the running sums they replaced do not (long_sums_test.cpp gives the numbers).
constexpr double kLongSumBound = 0x1p-23;

// n floats with mean `mean` and standard deviation `sd` (uniform), a pure function of seed.
inline std::vector<float> values(size_t n, uint64_t seed, double mean, double sd) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; i++)
    v[i] = float(mean + sd * std::sqrt(12.0) * (double(cutrain::rng_uniform(seed, i)) - 0.5));
  return v;
}

// max over i of |got[i] - want[i]| / scale[i]
inline double max_rel_error(const std::vector<float>& got, const std::vector<double>& want,
                            const std::vector<double>& scale) {
  double e = 0;
  for (size_t i = 0; i < got.size(); i++)
    e = std::fmax(e, std::fabs(double(got[i]) - want[i]) / scale[i]);
  return e;
}

}  // namespace cutrain_test
