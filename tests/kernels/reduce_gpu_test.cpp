// sum_gpu, mean_gpu and global_norm_gpu against the double CPU reference, within the error
// bound reduce.h documents (computed here from the same depth d), and the same bits on every
// run: the reductions are deterministic.
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/reduce.h"
#include "kernels/rng.h"
#include "tests/kernels/gpu_compare.h"
#include "tests/test_util.h"

using namespace cutrain;
using cutrain_test::upload;
using cutrain_test::download;

namespace {
const double kU = std::ldexp(1.0, -24);  // fp32's unit roundoff

// Uniform in [lo, hi), stored in T.
template <typename T> std::vector<T> random_values(int64_t n, uint64_t seed, float lo, float hi) {
  std::vector<T> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i++) x[size_t(i)] = T(lo + (hi - lo) * rng_uniform(seed, uint64_t(i)));
  return x;
}

template <typename T> double abs_sum(const std::vector<T>& x) {
  double s = 0;
  for (const T& v : x) s += std::fabs(double(v));
  return s;
}

bool same_float(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }
}  // namespace

TEST_CASE_TEMPLATE("reduce [gpu]: sum and mean within the documented bound, the same bits twice",
                   T, float, half_t) {
  REQUIRE_GPU();
  Stream stream;
  for (int64_t n : {int64_t(1), int64_t(255), int64_t(1025), int64_t(1000003),
                    int64_t(3 << 20) + 7}) {
    INFO("n = " << n);
    // mostly positive so that the sum is not a cancellation (the bound is relative to Σ|x|)
    const std::vector<T> x = random_values<T>(n, uint64_t(n), -1.0f, 3.0f);
    const double want = sum_cpu<T>(n, x.data()), want_mean = mean_cpu<T>(n, x.data());
    DeviceBuffer dx = upload(x), out(4 * sizeof(float));
    memset_async(out.data(), 0xff, out.bytes(), stream.get());  // NaN: a missing write fails
    float* o = static_cast<float*>(out.data());
    const T* px = static_cast<const T*>(dx.data());
    sum_gpu<T>(n, px, o, stream.get());
    mean_gpu<T>(n, px, o + 1, stream.get());
    sum_gpu<T>(n, px, o + 2, stream.get());
    mean_gpu<T>(n, px, o + 3, stream.get());
    stream.synchronize();
    const std::vector<float> got = download<float>(out, 4);
    // |sum_gpu - sum| <= d u Σ|x| to first order; 1% on top covers the second-order term
    const double tol = 1.01 * double(reduce_gpu_depth(n)) * kU * abs_sum(x);
    INFO("sum: got " << got[0] << ", want " << want << ", bound " << tol);
    REQUIRE(std::fabs(double(got[0]) - want) <= tol);
    // mean: the sum's error / n, plus the rounding of the quotient
    REQUIRE(std::fabs(double(got[1]) - want_mean) <= tol / double(n) + kU * std::fabs(want_mean));
    REQUIRE(same_float(got[0], got[2]));  // deterministic
    REQUIRE(same_float(got[1], got[3]));
  }
}

TEST_CASE("reduce [gpu]: the sum of nothing is 0, and a mean of nothing is refused") {
  REQUIRE_GPU();
  Stream stream;
  DeviceBuffer out(sizeof(float));
  memset_async(out.data(), 0xff, out.bytes(), stream.get());
  sum_gpu<float>(0, static_cast<const float*>(out.data()), static_cast<float*>(out.data()),
                 stream.get());
  stream.synchronize();
  REQUIRE(download<float>(out, 1)[0] == 0.0f);
  REQUIRE_ERROR(mean_gpu<float>(0, nullptr, static_cast<float*>(out.data()), stream.get()),
                "mean of 0 elements");
}

TEST_CASE_TEMPLATE("reduce [gpu]: global_norm over 75 tensors (three launches) within the bound",
                   T, float, half_t) {
  REQUIRE_GPU();
  Stream stream;
  // odd sizes, some empty, one large enough for the full grid
  std::vector<std::vector<T>> tensors;
  std::vector<int64_t> sizes;
  for (int t = 0; t < 75; t++) {
    const int64_t n = t % 11 == 0 ? 0 : t == 40 ? 1300001 : int64_t(rng_u64(9, uint64_t(t)) % 5000);
    sizes.push_back(n);
    tensors.push_back(random_values<T>(n, 100 + uint64_t(t), -2.0f, 2.0f));
  }
  std::vector<const T*> host_ptrs;
  for (const auto& v : tensors) host_ptrs.push_back(v.data());
  const double want = global_norm_cpu<T>(75, host_ptrs.data(), sizes.data());

  std::vector<DeviceBuffer> dev;
  std::vector<const T*> dev_ptrs;
  for (const auto& v : tensors) {
    dev.push_back(upload(v));
    dev_ptrs.push_back(static_cast<const T*>(dev.back().data()));
  }
  DeviceBuffer out(2 * sizeof(float));
  memset_async(out.data(), 0xff, out.bytes(), stream.get());
  float* o = static_cast<float*>(out.data());
  global_norm_gpu<T>(75, dev_ptrs.data(), sizes.data(), o, stream.get());
  global_norm_gpu<T>(75, dev_ptrs.data(), sizes.data(), o + 1, stream.get());
  stream.synchronize();
  const std::vector<float> got = download<float>(out, 2);
  // |norm_gpu - norm| <= ((d+1)/2 + 1) u norm (reduce.h), 1% for the second-order term
  const double d = double(global_norm_gpu_depth(75, sizes.data()));
  const double tol = 1.01 * ((d + 1) / 2 + 1) * kU * want;
  INFO("norm: got " << got[0] << ", want " << want << ", bound " << tol);
  REQUIRE(std::fabs(double(got[0]) - want) <= tol);
  REQUIRE(same_float(got[0], got[1]));

  // no tensors at all: 0
  memset_async(out.data(), 0xff, out.bytes(), stream.get());
  global_norm_gpu<T>(0, dev_ptrs.data(), sizes.data(), o, stream.get());
  stream.synchronize();
  REQUIRE(download<float>(out, 1)[0] == 0.0f);
}

TEST_CASE("reduce [gpu]: fp16 values at the format's limits give finite fp32 results") {
  REQUIRE_GPU();
  // ±65504 (the largest half) and 2^-24 (the smallest subnormal): the fp32 sums and squares
  // of these are far inside fp32's range, so nothing may come out inf or NaN
  const int64_t n = 4097;
  std::vector<half_t> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i++)
    x[size_t(i)] = i % 3 == 0 ? half_t::from_bits(1) : half_t(i % 3 == 1 ? 65504.0f : -65504.0f);
  Stream stream;
  DeviceBuffer dx = upload(x), out(2 * sizeof(float));
  memset_async(out.data(), 0xff, out.bytes(), stream.get());
  const half_t* px = static_cast<const half_t*>(dx.data());
  float* o = static_cast<float*>(out.data());
  sum_gpu<half_t>(n, px, o, stream.get());
  const int64_t size = n;
  global_norm_gpu<half_t>(1, &px, &size, o + 1, stream.get());
  stream.synchronize();
  const std::vector<float> got = download<float>(out, 2);
  REQUIRE(std::isfinite(got[0]));
  REQUIRE(std::isfinite(got[1]));
  const double tol = 1.01 * double(reduce_gpu_depth(n)) * kU * abs_sum(x);
  REQUIRE(std::fabs(double(got[0]) - sum_cpu<half_t>(n, x.data())) <= tol);
  const half_t* hx = x.data();
  const double norm = global_norm_cpu<half_t>(1, &hx, &size);
  const double d = double(global_norm_gpu_depth(1, &size));
  REQUIRE(std::fabs(double(got[1]) - norm) <= 1.01 * ((d + 1) / 2 + 1) * kU * norm);
}
