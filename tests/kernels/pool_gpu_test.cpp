// pooling GPU kernels against the CPU reference, bit for bit in fp32 and fp16. Max is exact;
// every sum (an input that is the argmax of several overlapping windows, the average) adds the
// same fp32 terms in the same order on both sides and rounds once, so there is no tolerance.
// Inputs are coarse (multiples of 1/4 in [-2, 2)) so windows hold many ties, which exercises
// the first-maximum rule, and a few NaNs exercise the NaN rule.
#include <cmath>
#include <vector>

#include "kernels/pool.h"
#include "tests/kernels/gpu_compare.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {

template <typename T> std::vector<T> coarse_values(size_t n, uint64_t seed, bool nans) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; i++)
    v[i] = T(std::floor(rng_uniform(seed, i) * 16.0f) / 4.0f - 2.0f);
  if (nans)
    for (size_t i = 5; i < n; i += 97) v[i] = T(NAN);
  return v;
}

Pool2dShape shape(int N, int H, int W, int C, int R, int S, int sh, int sw, int ph, int pw) {
  Pool2dShape s;
  s.N = N, s.H = H, s.W = W, s.C = C, s.R = R, s.S = S;
  s.stride_h = sh, s.stride_w = sw, s.pad_h = ph, s.pad_w = pw;
  return s;
}

// Odd sizes, overlapping windows (stride < window: inputs in several windows), padding,
// non-square windows and strides, a 1x1 window, and one window covering the whole image.
const Pool2dShape kShapes[] = {
    shape(3, 13, 11, 5, 3, 3, 2, 2, 1, 1),   // ResNet-style 3x3/2, padded
    shape(2, 9, 10, 33, 2, 2, 2, 2, 0, 0),   // 2x2/2, odd H
    shape(1, 7, 8, 3, 3, 2, 1, 1, 1, 0),     // stride 1: heavy overlap
    shape(2, 6, 9, 7, 2, 3, 1, 2, 1, 2),     // mixed
    shape(4, 5, 5, 1, 1, 1, 1, 1, 0, 0),     // identity
    shape(1, 4, 6, 9, 4, 6, 1, 1, 0, 0),     // one window
};

}  // namespace

TEST_CASE_TEMPLATE("pool [gpu]: max pool forward and backward equal the CPU bit for bit", T, float,
                   half_t) {
  REQUIRE_GPU();
  Stream st;
  for (const Pool2dShape& s : kShapes)
    for (bool nans : {false, true}) {
      INFO("shape N" << s.N << " H" << s.H << " W" << s.W << " C" << s.C << " R" << s.R << " S"
                     << s.S << " stride " << s.stride_h << "x" << s.stride_w << " pad "
                     << s.pad_h << "x" << s.pad_w << (nans ? " with NaNs" : ""));
      const size_t nx = size_t(s.input_numel()), ny = size_t(s.output_numel());
      const std::vector<T> x = coarse_values<T>(nx, 1, nans);
      const std::vector<T> dy = random_values<T>(ny, 2, -1, 1);
      const std::vector<T> dx0 = random_values<T>(nx, 3, -1, 1);  // prefill: dx accumulates
      std::vector<T> y(ny), dx = dx0;
      maxpool2d_forward_cpu<T>(s, x.data(), y.data());
      maxpool2d_backward_cpu<T>(s, x.data(), dy.data(), dx.data());

      DeviceBuffer d_x = upload(x), d_dy = upload(dy), d_dx = upload(dx0);
      DeviceBuffer d_y = poisoned<T>(ny, st.get());
      maxpool2d_forward_gpu<T>(s, ptr<T>(d_x), ptr<T>(d_y), st.get());
      maxpool2d_backward_gpu<T>(s, ptr<T>(d_x), ptr<T>(d_dy), ptr<T>(d_dx), st.get());
      st.synchronize();
      require_same_bits(download<T>(d_y, ny), y);
      require_same_bits(download<T>(d_dx, nx), dx);
    }
}

TEST_CASE("pool [gpu]: fp16 max pool near the fp16 limits stays finite and exact") {
  REQUIRE_GPU();
  const Pool2dShape s = shape(2, 7, 9, 3, 3, 3, 2, 2, 1, 1);
  const size_t nx = size_t(s.input_numel()), ny = size_t(s.output_numel());
  // inputs spread over [-65504, 65504] and tiny subnormals; dy of 2^-24 and 30000 (an input
  // in up to four windows sums four of them in fp32: 120000 overflows fp16 -> inf on both).
  std::vector<half_t> x = random_values<half_t>(nx, 4, -65504, 65504);
  for (size_t i = 0; i < nx; i += 3) x[i] = half_t(float(int(i % 7) - 3) * 5.9604645e-08f);
  std::vector<half_t> dy(ny);
  for (size_t i = 0; i < ny; i++) dy[i] = half_t(i % 2 ? 5.9604645e-08f : 30000.0f);
  const std::vector<half_t> dx0 = random_values<half_t>(nx, 5, -1, 1);
  std::vector<half_t> y(ny), dx = dx0;
  maxpool2d_forward_cpu<half_t>(s, x.data(), y.data());
  maxpool2d_backward_cpu<half_t>(s, x.data(), dy.data(), dx.data());

  Stream st;
  DeviceBuffer d_x = upload(x), d_dy = upload(dy), d_dx = upload(dx0);
  DeviceBuffer d_y = poisoned<half_t>(ny, st.get());
  maxpool2d_forward_gpu<half_t>(s, ptr<half_t>(d_x), ptr<half_t>(d_y), st.get());
  maxpool2d_backward_gpu<half_t>(s, ptr<half_t>(d_x), ptr<half_t>(d_dy), ptr<half_t>(d_dx),
                                 st.get());
  st.synchronize();
  const std::vector<half_t> got_y = download<half_t>(d_y, ny);
  for (const half_t& v : got_y) REQUIRE(std::isfinite(float(v)));
  require_same_bits(got_y, y);
  require_same_bits(download<half_t>(d_dx, nx), dx);
}

TEST_CASE_TEMPLATE("pool [gpu]: global average pool equals the CPU bit for bit", T, float,
                   half_t) {
  REQUIRE_GPU();
  Stream st;
  struct Case { int N, H, W, C; };
  for (const Case& c : {Case{1, 1, 1, 1}, Case{5, 7, 9, 37}, Case{3, 8, 8, 300},
                        Case{2, 31, 33, 3}}) {
    INFO("N" << c.N << " H" << c.H << " W" << c.W << " C" << c.C);
    const size_t nx = size_t(c.N) * c.H * c.W * c.C, ny = size_t(c.N) * c.C;
    const std::vector<T> x = random_values<T>(nx, 6, -2, 2);
    const std::vector<T> dy = random_values<T>(ny, 7, -1, 1);
    const std::vector<T> dx0 = random_values<T>(nx, 8, -1, 1);
    std::vector<T> y(ny), dx = dx0;
    global_avgpool_forward_cpu<T>(c.N, c.H, c.W, c.C, x.data(), y.data());
    global_avgpool_backward_cpu<T>(c.N, c.H, c.W, c.C, dy.data(), dx.data());

    DeviceBuffer d_x = upload(x), d_dy = upload(dy), d_dx = upload(dx0);
    DeviceBuffer d_y = poisoned<T>(ny, st.get());
    global_avgpool_forward_gpu<T>(c.N, c.H, c.W, c.C, ptr<T>(d_x), ptr<T>(d_y), st.get());
    global_avgpool_backward_gpu<T>(c.N, c.H, c.W, c.C, ptr<T>(d_dy), ptr<T>(d_dx), st.get());
    st.synchronize();
    require_same_bits(download<T>(d_y, ny), y);
    require_same_bits(download<T>(d_dx, nx), dx);
  }
}

TEST_CASE("pool [gpu]: fp16 global average of values at 65504 is 65504, not inf") {
  REQUIRE_GPU();
  const int N = 2, H = 7, W = 7, C = 5;  // the fp32 sum, 49 * 65504, is far above fp16's range
  const std::vector<half_t> x(size_t(N) * H * W * C, half_t(65504.0f));
  Stream st;
  DeviceBuffer d_x = upload(x), d_y = poisoned<half_t>(size_t(N) * C, st.get());
  global_avgpool_forward_gpu<half_t>(N, H, W, C, ptr<half_t>(d_x), ptr<half_t>(d_y), st.get());
  st.synchronize();
  for (const half_t& v : download<half_t>(d_y, size_t(N) * C)) REQUIRE(float(v) == 65504.0f);
}
