// defines: what the conv2d / linear GPU tests share: random host vectors in a storage type,
// upload / download through DeviceBuffer, and require_close_sum(), the comparison whose
// tolerance follows from how many terms each output sums.
#pragma once
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernels/gpu.h"
#include "kernels/half.h"
#include "kernels/rng.h"
#include "tests/test_util.h"

namespace cutrain_test {

// n values uniform in [lo, hi), stored in T (rounded for half_t), a pure function of seed.
template <typename T>
std::vector<T> random_vec(size_t n, uint64_t seed, double lo = -1, double hi = 1) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; i++) v[i] = T(lo + (hi - lo) * double(cutrain::rng_uniform(seed, i)));
  return v;
}

template <typename T>
cutrain::DeviceBuffer upload(const std::vector<T>& v) {
  cutrain::DeviceBuffer d(v.size() * sizeof(T));
  cutrain::copy_sync(d.data(), v.data(), v.size() * sizeof(T));
  return d;
}

template <typename T>
std::vector<T> download(const cutrain::DeviceBuffer& d, size_t n) {
  std::vector<T> v(n);
  cutrain::copy_sync(v.data(), d.data(), n * sizeof(T));
  return v;
}

template <typename T> T* ptr(cutrain::DeviceBuffer& d) { return static_cast<T*>(d.data()); }

// GPU result against the CPU reference in the same storage type T, for outputs that each sum
// `terms` products of values of magnitude <= `scale` (plus a bias or an old value).
//
// Both sides sum in fp32 (f16, f32) and round once to T, but in different orders (the GPU
// also fuses multiply-adds). Two fp32 sums of n terms differ by at most ~n * 2^-24 * sum|t|,
// <= n^2 * 2^-24 * scale; in practice the difference grows like sqrt(n), so
//   atol = 2^-20 * terms * scale  (16x the typical sqrt(n)*n*2^-24 for our n <= ~2000)
// covers it. For f16 storage, two fp32 values a hair apart can round to neighbouring halves:
// one half ulp step, <= 2^-10 * |want| for normal results (rtol 2^-9 leaves a factor of two)
// and 2^-24 absolute in the subnormal range. f32 storage keeps the fp32 sum: rtol 2^-20.
// No inf / NaN may appear where the reference is finite.
template <typename T>
void require_close_sum(const std::vector<T>& got, const std::vector<T>& want, double terms,
                       double scale, const char* what) {
  const bool f16 = std::is_same<T, cutrain::half_t>::value;
  const double atol = std::ldexp(terms * scale, -20) + (f16 ? std::ldexp(1.0, -24) : 0.0);
  const double rtol = f16 ? std::ldexp(1.0, -9) : std::ldexp(1.0, -20);
  REQUIRE(got.size() == want.size());
  size_t bad = got.size();  // the first element out of tolerance
  for (size_t i = 0; i < got.size() && bad == got.size(); i++) {
    const double g = double(float(got[i])), w = double(float(want[i]));
    if (std::isfinite(w) && !(std::fabs(g - w) <= atol + rtol * std::fabs(w))) bad = i;
  }
  // (INFO is evaluated only when the REQUIRE below fails, i.e. when bad is an element.)
  INFO(what << " element " << bad << " of " << got.size() << ": got " << float(got[bad])
              << ", want " << float(want[bad]) << " (atol " << atol << ", rtol " << rtol << ")");
  REQUIRE(bad == got.size());
}

}  // namespace cutrain_test
