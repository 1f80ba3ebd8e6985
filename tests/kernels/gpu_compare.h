// defines: what the kernel GPU tests share: upload / download between host vectors and
// DeviceBuffers, random_values<T>() (the same values on every run), and two comparisons that
// report the first bad element and how many there are: require_same_bits (NaN matches any
// NaN, since the NaN payload of a GPU add differs from the CPU's) and require_close_values
// (and finite wherever the reference is finite). Included by tests/kernels/*_gpu_test.cpp.
#pragma once
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/gpu.h"
#include "kernels/half.h"
#include "kernels/rng.h"
#include "tests/test_util.h"

namespace cutrain_test {

template <typename T> cutrain::DeviceBuffer upload(const std::vector<T>& v) {
  cutrain::DeviceBuffer b(v.size() * sizeof(T));
  cutrain::copy_sync(b.data(), v.data(), v.size() * sizeof(T));
  return b;
}

// A device buffer of n values of T, every byte 0xff (NaN in fp16 and fp32): an output the
// kernel fails to write cannot pass for a right answer.
template <typename T> cutrain::DeviceBuffer poisoned(size_t n, cudaStream_t stream) {
  cutrain::DeviceBuffer b(n * sizeof(T));
  cutrain::memset_async(b.data(), 0xff, n * sizeof(T), stream);
  return b;
}

// Call after synchronising the stream the results were written on.
template <typename T> std::vector<T> download(const cutrain::DeviceBuffer& b, size_t n) {
  std::vector<T> v(n);
  cutrain::copy_sync(v.data(), b.data(), n * sizeof(T));
  return v;
}

template <typename T> T* ptr(const cutrain::DeviceBuffer& b) { return static_cast<T*>(b.data()); }

// n values uniform in [lo, hi), rounded to T; a pure function of seed.
template <typename T>
std::vector<T> random_values(size_t n, uint64_t seed, double lo, double hi) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; i++) v[i] = T(lo + (hi - lo) * double(cutrain::rng_uniform(seed, i)));
  return v;
}

inline uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
inline uint32_t bits_of(cutrain::half_t h) { return h.bits; }
inline double value_of(float f) { return f; }
inline double value_of(cutrain::half_t h) { return double(float(h)); }

// Equal bit for bit (any NaN matches any NaN).
template <typename T>
void require_same_bits(const std::vector<T>& got, const std::vector<T>& want) {
  REQUIRE(got.size() == want.size());
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); i++) {
    const bool both_nan = std::isnan(value_of(got[i])) && std::isnan(value_of(want[i]));
    if (!both_nan && bits_of(got[i]) != bits_of(want[i]) && bad++ == 0) first = i;
  }
  INFO(bad << " of " << got.size() << " differ; first: element " << first << " got "
           << (got.empty() ? 0 : value_of(got[first])) << ", want "
           << (want.empty() ? 0 : value_of(want[first])));
  REQUIRE(bad == 0);
}

// |got - want| <= atol + rtol * |want| everywhere, and got is finite wherever want is.
template <typename T>
void require_close_values(const std::vector<T>& got, const std::vector<T>& want, double atol,
                          double rtol) {
  REQUIRE(got.size() == want.size());
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); i++) {
    const double g = value_of(got[i]), w = value_of(want[i]);
    bool ok;
    if (std::isfinite(w))
      ok = std::isfinite(g) && std::fabs(g - w) <= atol + rtol * std::fabs(w);
    else
      ok = std::isnan(w) ? std::isnan(g) : g == w;  // inf: the same inf
    if (!ok && bad++ == 0) first = i;
  }
  INFO(bad << " of " << got.size() << " outside atol " << atol << " rtol " << rtol
           << "; first: element " << first << " got " << (got.empty() ? 0 : value_of(got[first]))
           << ", want " << (want.empty() ? 0 : value_of(want[first])));
  REQUIRE(bad == 0);
}

}  // namespace cutrain_test
