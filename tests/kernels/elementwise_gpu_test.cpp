// elementwise GPU kernels against the CPU reference, bit for bit in fp32 and fp16: each
// element is one fp32 operation on widened inputs, rounded to T once, on both sides (an add
// cannot be contracted into an FMA), so there is nothing for a tolerance to absorb.
// Sizes: 1, 7 (tail only), 1001 (vectors + tail), 2^20 + 3 (many grid-stride steps); each at
// offset 0 (16-byte aligned: the vector path) and offset 1 element (the scalar path).
#include <cmath>
#include <vector>

#include "kernels/elementwise.h"
#include "tests/kernels/gpu_compare.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {

// Random values in [-3, 3) with, at the front, the edge cases: signed zeros, the fp16 limits
// (65504 overflows to inf when added to itself; 2^-24 is the smallest subnormal), inf.
template <typename T> std::vector<T> test_values(size_t n, uint64_t seed) {
  std::vector<T> v = random_values<T>(n, seed, -3, 3);
  const float special[] = {0.0f, -0.0f, 65504.0f, -65504.0f, 5.9604645e-08f, -5.9604645e-08f,
                           INFINITY, -INFINITY, 1.0f, -1.0f};
  for (size_t i = 0; i < n && i < sizeof(special) / sizeof(float); i++)
    v[i] = T(special[(i + seed) % (sizeof(special) / sizeof(float))]);
  return v;
}

const size_t kSizes[] = {1, 7, 1001, (1u << 20) + 3};

}  // namespace

TEST_CASE_TEMPLATE("elementwise [gpu]: relu forward and backward equal the CPU bit for bit", T,
                   float, half_t) {
  REQUIRE_GPU();
  Stream s;
  for (size_t n : kSizes)
    for (size_t off : {0, 1}) {
      INFO("n " << n << " offset " << off);
      const size_t len = n + off;
      const std::vector<T> x = test_values<T>(len, 1), dy = test_values<T>(len, 2);
      const std::vector<T> dx0 = test_values<T>(len, 3);  // the prefill dx accumulates into
      std::vector<T> y(len), dx = dx0;
      relu_forward_cpu<T>(int64_t(n), x.data() + off, y.data() + off);
      relu_backward_cpu<T>(int64_t(n), y.data() + off, dy.data() + off, dx.data() + off);

      DeviceBuffer dx_d = upload(x), ddy = upload(dy), ddx = upload(dx0);
      DeviceBuffer dyo = poisoned<T>(len, s.get());
      relu_forward_gpu<T>(int64_t(n), ptr<T>(dx_d) + off, ptr<T>(dyo) + off, s.get());
      relu_backward_gpu<T>(int64_t(n), ptr<T>(dyo) + off, ptr<T>(ddy) + off, ptr<T>(ddx) + off,
                           s.get());
      s.synchronize();
      std::vector<T> got_y = download<T>(dyo, len), got_dx = download<T>(ddx, len);
      // Element 0 at offset 1 is outside the call: y keeps its poison, dx its prefill.
      if (off) got_y[0] = y[0] = T(0.0f);
      require_same_bits(got_y, y);
      require_same_bits(got_dx, dx);
    }
}

TEST_CASE_TEMPLATE("elementwise [gpu]: add, accumulate and average equal the CPU bit for bit", T,
                   float, half_t) {
  REQUIRE_GPU();
  Stream s;
  for (size_t n : kSizes)
    for (size_t off : {0, 1}) {
      INFO("n " << n << " offset " << off);
      const size_t len = n + off;
      const std::vector<T> a = test_values<T>(len, 4), b = test_values<T>(len, 5);
      const std::vector<T> acc0 = test_values<T>(len, 6);
      std::vector<T> y(len), acc = acc0, avg(len);
      add_forward_cpu<T>(int64_t(n), a.data() + off, b.data() + off, y.data() + off);
      accumulate_cpu<T>(int64_t(n), a.data() + off, acc.data() + off);
      average_cpu<T>(int64_t(n), a.data() + off, b.data() + off, avg.data() + off);

      DeviceBuffer da = upload(a), db = upload(b), dacc = upload(acc0);
      DeviceBuffer dyo = poisoned<T>(len, s.get()), davg = poisoned<T>(len, s.get());
      add_forward_gpu<T>(int64_t(n), ptr<T>(da) + off, ptr<T>(db) + off, ptr<T>(dyo) + off,
                         s.get());
      accumulate_gpu<T>(int64_t(n), ptr<T>(da) + off, ptr<T>(dacc) + off, s.get());
      average_gpu<T>(int64_t(n), ptr<T>(da) + off, ptr<T>(db) + off, ptr<T>(davg) + off, s.get());
      s.synchronize();
      std::vector<T> got_y = download<T>(dyo, len), got_acc = download<T>(dacc, len);
      std::vector<T> got_avg = download<T>(davg, len);
      if (off) got_y[0] = y[0] = got_avg[0] = avg[0] = T(0.0f);
      require_same_bits(got_y, y);
      require_same_bits(got_acc, acc);
      require_same_bits(got_avg, avg);
    }
}

TEST_CASE("elementwise [gpu]: fp16 sums that overflow give inf, as on the CPU") {
  REQUIRE_GPU();
  const std::vector<half_t> a = {half_t(65504.0f), half_t(-65504.0f), half_t(60000.0f)};
  const std::vector<half_t> b = {half_t(65504.0f), half_t(-65504.0f), half_t(-60000.0f)};
  Stream s;
  DeviceBuffer da = upload(a), db = upload(b), dy = poisoned<half_t>(3, s.get());
  add_forward_gpu<half_t>(3, ptr<half_t>(da), ptr<half_t>(db), ptr<half_t>(dy), s.get());
  s.synchronize();
  const std::vector<half_t> y = download<half_t>(dy, 3);
  REQUIRE(float(y[0]) == INFINITY);
  REQUIRE(float(y[1]) == -INFINITY);
  REQUIRE(float(y[2]) == 0.0f);
}
