// ring_reduce_gpu and ring_or_gpu against ring_reduce_cpu and ring_or_cpu, bit for bit: each
// element is one add (and one multiply when scale != 1) of widened values, rounded once per
// operation on both sides and never fused (kernels/hd.h), then rounded to T once, so there is
// nothing for a tolerance to absorb. Sizes 1, 7, 1001 and 2^20 + 3 (many grid-stride steps),
// at offset 0 and at an odd element offset (ring chunks start anywhere); scale 1 (every
// reduce-scatter step but the last) and 1/3 (the last step of 3 replicas, not a power of two).
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/ring_reduce.h"
#include "tests/kernels/gpu_compare.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {

// Random values in [-3, 3) with, at the front, the edge cases: signed zeros, the fp16 limits
// (65504 + 65504 overflows to inf in fp16, as on the CPU), the smallest subnormal 2^-24
// (halved by 1/3 it rounds to 0 or 2^-24 the same way on both sides), inf.
template <typename T> std::vector<T> test_values(size_t n, uint64_t seed) {
  std::vector<T> v = random_values<T>(n, seed, -3, 3);
  const float special[] = {0.0f, -0.0f, 65504.0f, -65504.0f, 5.9604645e-08f, -5.9604645e-08f,
                           INFINITY, -INFINITY, 1.0f, -1.0f, 65000.0f};
  const size_t k = sizeof(special) / sizeof(float);
  for (size_t i = 0; i < n && i < k; i++) v[i] = T(special[(i + seed) % k]);
  return v;
}

const size_t kSizes[] = {1, 7, 1001, (1u << 20) + 3};

// Runs one reduce on the GPU and on the CPU from the same inputs; returns both dst arrays.
template <typename T>
void run_both(size_t n, size_t off, double scale, std::vector<T>& got, std::vector<T>& want) {
  Stream s;
  const size_t len = n + off;
  const std::vector<T> dst = test_values<T>(len, 1 + n), src = test_values<T>(len, 2 + n);
  DeviceBuffer d = upload(dst), x = upload(src);
  CUDA_CHECK(cudaDeviceSynchronize());  // the uploads' DMA has landed (s is non-blocking)
  ring_reduce_gpu<T>(int64_t(n), ptr<T>(d) + off, ptr<T>(x) + off, scale, s.get());
  s.synchronize();
  got = download<T>(d, len);
  want = dst;
  ring_reduce_cpu<T>(int64_t(n), want.data() + off, src.data() + off, scale);
}

}  // namespace

TEST_CASE_TEMPLATE("ring_reduce [gpu]: (dst + src) * scale equals the CPU bit for bit", T, float,
                   half_t) {
  REQUIRE_GPU();
  for (size_t n : kSizes)
    for (size_t off : {0, 3})
      for (double scale : {1.0, 1.0 / 3}) {
        INFO("n " << n << " offset " << off << " scale " << scale);
        std::vector<T> got, want;
        run_both<T>(n, off, scale, got, want);
        require_same_bits(got, want, "ring_reduce");  // elements before off untouched too
      }
}

TEST_CASE("ring_reduce [gpu]: double equals the CPU bit for bit") {
  REQUIRE_GPU();
  for (size_t n : kSizes)
    for (double scale : {1.0, 1.0 / 3}) {
      INFO("n " << n << " scale " << scale);
      std::vector<double> got, want;
      run_both<double>(n, 1, scale, got, want);
      REQUIRE(got.size() == want.size());
      size_t bad = 0;
      for (size_t i = 0; i < got.size(); i++)
        if (!(std::isnan(got[i]) && std::isnan(want[i])) &&
            std::memcmp(&got[i], &want[i], sizeof(double)) != 0)
          bad++;
      REQUIRE(bad == 0);
    }
}

TEST_CASE("ring_reduce [gpu]: ring_or ORs int32 flags; n = 0 queues nothing") {
  REQUIRE_GPU();
  Stream s;
  const std::vector<int32_t> a = {0, 1, 0, 1, 4, 0, 0}, b = {0, 0, 1, 1, 1, 0, 7};
  DeviceBuffer da = upload(a), db = upload(b);
  ring_or_gpu(int64_t(a.size()) - 1, ptr<int32_t>(da), ptr<int32_t>(db), s.get());
  ring_or_gpu(0, nullptr, nullptr, s.get());
  ring_reduce_gpu<float>(0, nullptr, nullptr, 0.5, s.get());
  s.synchronize();
  std::vector<int32_t> want = a;
  ring_or_cpu(int64_t(a.size()) - 1, want.data(), b.data());
  REQUIRE(want == std::vector<int32_t>{0, 1, 1, 1, 5, 0, 0});  // the last one outside n
  REQUIRE(download<int32_t>(da, a.size()) == want);
}

TEST_CASE_TEMPLATE("ring_reduce [gpu]: ring_scale, dst * scale after NCCL's sum, equals the CPU bit "
                   "for bit", T, float, half_t, double) {
  REQUIRE_GPU();
  Stream s;
  for (size_t n : kSizes)
    for (double scale : {0.5, 1.0 / 3}) {
      INFO("n " << n << " scale " << scale);
      const std::vector<T> x = test_values<T>(n + 1, 3 + n);
      DeviceBuffer d = upload(x);
      CUDA_CHECK(cudaDeviceSynchronize());
      ring_scale_gpu<T>(int64_t(n), ptr<T>(d) + 1, scale, s.get());  // an odd offset
      s.synchronize();
      std::vector<T> want = x;
      ring_scale_cpu<T>(int64_t(n), want.data() + 1, scale);
      const std::vector<T> got = download<T>(d, n + 1);
      REQUIRE(std::memcmp(got.data(), want.data(), got.size() * sizeof(T)) == 0);
    }
}
