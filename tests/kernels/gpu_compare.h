// defines: what the kernel GPU tests share: upload / download between host vectors and
// DeviceBuffers, random_values<T>() (the same values on every run), and two comparisons that
// report the first bad element and how many there are: require_same_bits (NaN matches any
// NaN, since the NaN payload of a GPU add differs from the CPU's) and require_close_values
// (and finite wherever the reference is finite); and require_close_sum(), for outputs that are
// sums of many products (conv2d, linear), whose tolerance follows from the number of terms;
// sleep_on(), which holds a stream up for a known time, and StreamGate, which holds it until
// the test lets it go. Included by the *_gpu_test.cpp files.
#pragma once
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <type_traits>
#include <vector>

#include "kernels/gpu.h"
#include "kernels/half.h"
#include "kernels/rng.h"
#include "tests/test_util.h"

namespace cutrain_test {

// Occupies `stream` for `ms` milliseconds: a host function the stream waits for
// (cudaLaunchHostFunc). `ms` must live until the stream gets there.
inline void sleep_on(cudaStream_t stream, const int& ms) {
  const cudaHostFn_t sleep = [](void* p) {
    std::this_thread::sleep_for(std::chrono::milliseconds(*static_cast<const int*>(p)));
  };
  CUDA_CHECK(cudaLaunchHostFunc(stream, sleep, const_cast<int*>(&ms)));
}

// Holds `stream` at a host function until release(): the work queued behind it waits for the
// test, not for a clock (a sleep that is "long enough" is not, on a slow host). The destructor
// releases it and waits until the stream has passed, so declare the gate after the stream.
// If the host blocks in a CUDA call while the stream is held (re-recording an event the stream
// has not reached does, data/gpu_timeline.h), nothing could ever release it: after 30 s the
// gate opens by itself and timed_out() says so, failing the test instead of hanging it.
class StreamGate {
 public:
  explicit StreamGate(cudaStream_t stream) : hold_(stream, 30) {}
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;
  void release() { hold_.release(); }
  bool timed_out() const { return hold_.timed_out(); }

 private:
  cutrain::StreamHold hold_;  // kernels/gpu.h: the hold itself, shared with the step's timing
};

// A device copy of v (at least one byte, so an empty vector still gives a valid pointer).
template <typename T> cutrain::DeviceBuffer upload(const std::vector<T>& v) {
  cutrain::DeviceBuffer b(v.empty() ? 1 : v.size() * sizeof(T));
  if (!v.empty()) cutrain::copy_sync(b.data(), v.data(), v.size() * sizeof(T));
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
  if (n) cutrain::copy_sync(v.data(), b.data(), n * sizeof(T));
  return v;
}

template <typename T> T* ptr(const cutrain::DeviceBuffer& b) { return static_cast<T*>(b.data()); }

// n values uniform in [lo, hi), rounded to T; a pure function of seed.
template <typename T>
std::vector<T> random_values(size_t n, uint64_t seed, double lo = -1, double hi = 1) {
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
void require_same_bits(const std::vector<T>& got, const std::vector<T>& want,
                       const char* what = "") {
  REQUIRE(got.size() == want.size());
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); i++) {
    const bool both_nan = std::isnan(value_of(got[i])) && std::isnan(value_of(want[i]));
    if (!both_nan && bits_of(got[i]) != bits_of(want[i]) && bad++ == 0) first = i;
  }
  INFO(what << ": " << bad << " of " << got.size() << " differ; first: element " << first << " got "
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
// No inf / NaN may appear where the reference is finite, and where the reference is not finite
// the GPU must give the same (inf of the same sign, or NaN): a tolerance means nothing there.
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
    const bool ok = std::isfinite(w) ? std::fabs(g - w) <= atol + rtol * std::fabs(w)
                                     : g == w || (std::isnan(g) && std::isnan(w));
    if (!ok) bad = i;
  }
  // (INFO is evaluated only when the REQUIRE below fails, i.e. when bad is an element.)
  INFO(what << " element " << bad << " of " << got.size() << ": got " << float(got[bad])
              << ", want " << float(want[bad]) << " (atol " << atol << ", rtol " << rtol << ")");
  REQUIRE(bad == got.size());
}

}  // namespace cutrain_test
