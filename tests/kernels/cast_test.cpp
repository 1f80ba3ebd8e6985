// cast: the CPU reference, and the GPU kernels against it bit for bit.
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cast.h"
#include "kernels/rng.h"
#include "tests/test_util.h"

using namespace cutrain;

// Inputs that exercise every rounding path: ordinary values, ties, the fp16 limits
// (65504, 65520, 2^-14, 2^-24), subnormals, zeros, inf and NaN. Odd length: no tile fits.
static std::vector<float> tricky_floats(int n) {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, 65504.0f, 65519.0f, 65520.0f, -70000.0f,
                          6.103515625e-05f, 5.9604644775390625e-08f, 2.9802322e-08f,
                          1.0f + 1.0f / 2048, INFINITY, -INFINITY, NAN};
  for (int i = int(v.size()); i < n; i++) {
    const float u = rng_uniform(7, uint64_t(i)) * 2 - 1;
    v.push_back(u * std::ldexp(1.0f, int(rng_u64(8, uint64_t(i)) % 40) - 26));  // 2^-26..2^13
  }
  return v;
}

TEST_CASE("cast: CPU reference agrees with half_t and is exact back to float") {
  const std::vector<float> v = tricky_floats(1001);
  std::vector<half_t> h(v.size());
  std::vector<float> back(v.size());
  cast_cpu<float, half_t>(int64_t(v.size()), v.data(), h.data());
  cast_cpu<half_t, float>(int64_t(v.size()), h.data(), back.data());
  for (size_t i = 0; i < v.size(); i++) {
    REQUIRE(h[i].bits == float_to_half_bits(v[i]));
    if (!std::isnan(v[i])) REQUIRE(back[i] == half_bits_to_float(h[i].bits));
  }
}

TEST_CASE("cast [gpu]: fp32 <-> fp16 kernels equal the CPU reference bit for bit") {
  REQUIRE_GPU();
  for (int n : {1, 257, 1001, 1 << 20}) {
    const std::vector<float> v = tricky_floats(n);
    std::vector<half_t> want(v.size());
    cast_cpu<float, half_t>(n, v.data(), want.data());

    DeviceBuffer dsrc(size_t(n) * 4), dh(size_t(n) * 2), dback(size_t(n) * 4);
    copy_sync(dsrc.data(), v.data(), size_t(n) * 4);
    Stream s;
    memset_async(dh.data(), 0xff, size_t(n) * 2, s.get());      // poison: NaN halves
    memset_async(dback.data(), 0xff, size_t(n) * 4, s.get());   // poison: NaN floats
    cast_f32_to_f16_gpu(n, static_cast<float*>(dsrc.data()), static_cast<half_t*>(dh.data()),
                        s.get());
    cast_f16_to_f32_gpu(n, static_cast<half_t*>(dh.data()), static_cast<float*>(dback.data()),
                        s.get());
    s.synchronize();
    std::vector<half_t> got(v.size());
    std::vector<float> back(v.size());
    copy_sync(got.data(), dh.data(), size_t(n) * 2);
    copy_sync(back.data(), dback.data(), size_t(n) * 4);
    for (int i = 0; i < n; i++) {
      INFO("n " << n << " element " << i << " value " << v[size_t(i)]);
      if (std::isnan(v[size_t(i)])) {
        REQUIRE(std::isnan(float(got[size_t(i)])));
        continue;
      }
      REQUIRE(got[size_t(i)].bits == want[size_t(i)].bits);
      uint32_t a, b;
      const float w = float(want[size_t(i)]);
      std::memcpy(&a, &back[size_t(i)], 4);
      std::memcpy(&b, &w, 4);
      REQUIRE(a == b);
    }
  }
}
