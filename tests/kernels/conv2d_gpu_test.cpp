// conv2d on the GPU against the CPU reference: the direct kernels (f32, f16), the
// tensor-core path (f16) and the conv ladder's other rungs (kernels/ladder/: v2 gemm,
// v3 fma, v5 async; v5 also against v4's bits), forward, backward-data, backward-filter and
// bias, on odd shapes (tails of every tile; C and K multiples of 8 or not, which picks the tc
// path's 16-byte or scalar loads; split-K for the weight gradient) and on the layers of the
// default models.
// Forward outputs are poisoned (0xff bytes: NaN) before the run; backward outputs are
// prefilled with random values, and the CPU reference accumulates onto the same prefill.
#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/conv2d.h"
#include "kernels/ladder/conv_ladder.h"
#include "tests/kernels/gpu_compare.h"
#include "tests/test_util.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {

// direct and tc: the production paths (the ladder's v1 and v4); the ladder's other rungs:
enum class Path { direct, tc, gemm, fma, async };
const char* path_name(Path p) {
  return p == Path::direct ? "direct"
         : p == Path::tc   ? "tc"
         : p == Path::gemm ? "v2 gemm"
         : p == Path::fma  ? "v3 fma"
                           : "v5 async";
}

struct Case {
  const char* name;
  Conv2dShape s;
};

Conv2dShape shape(int N, int H, int W, int C, int K, int R, int S, int sh, int sw, int ph,
                  int pw) {
  Conv2dShape s;
  s.N = N, s.H = H, s.W = W, s.C = C, s.K = K, s.R = R, s.S = S;
  s.stride_h = sh, s.stride_w = sw, s.pad_h = ph, s.pad_w = pw;
  return s;
}

// Odd shapes: no size a multiple of a tile (128, 64, 32, 8) unless on purpose.
const std::vector<Case> odd_cases = {
    {"C=3 K=5 3x2 pad 1", shape(2, 7, 9, 3, 5, 3, 2, 1, 1, 1, 1)},
    {"C=16 K=24 3x3 stride 2 pad 1 (16-byte loads)", shape(3, 11, 10, 16, 24, 3, 3, 2, 2, 1, 1)},
    {"C=8 K=37 5x3 stride 2x1 pad 2x0", shape(1, 9, 8, 8, 37, 5, 3, 2, 1, 2, 0)},
    {"C=1 K=3 1x1", shape(2, 6, 5, 1, 3, 1, 1, 1, 1, 0, 0)},
    {"C=40 K=70 2x3 no pad", shape(2, 13, 13, 40, 70, 2, 3, 1, 1, 0, 0)},
    {"C=24 K=72 3x3 pad 1 (split-K wgrad)", shape(4, 17, 15, 24, 72, 3, 3, 1, 1, 1, 1)},
    {"C=12 K=9 4x4 stride 3 pad 2", shape(2, 10, 11, 12, 9, 4, 4, 3, 3, 2, 2)},
};

// The conv layers of `cutrain describe default` and `describe resnet`, at batch 2.
const std::vector<Case> model_cases = {
    {"28x28 1->32 3x3 pad 1", shape(2, 28, 28, 1, 32, 3, 3, 1, 1, 1, 1)},
    {"28x28 32->32 3x3 pad 1", shape(2, 28, 28, 32, 32, 3, 3, 1, 1, 1, 1)},
    {"14x14 32->64 3x3 pad 1", shape(2, 14, 14, 32, 64, 3, 3, 1, 1, 1, 1)},
    {"14x14 64->64 3x3 pad 1", shape(2, 14, 14, 64, 64, 3, 3, 1, 1, 1, 1)},
    {"7x7 64->128 3x3 pad 1", shape(2, 7, 7, 64, 128, 3, 3, 1, 1, 1, 1)},
    {"7x7 128->128 3x3 pad 1", shape(2, 7, 7, 128, 128, 3, 3, 1, 1, 1, 1)},
    {"28x28 32->64 3x3 stride 2 pad 1", shape(2, 28, 28, 32, 64, 3, 3, 2, 2, 1, 1)},
    {"14x14 64->128 3x3 stride 2 pad 1", shape(2, 14, 14, 64, 128, 3, 3, 2, 2, 1, 1)},
    {"28x28 32->64 1x1 stride 2", shape(2, 28, 28, 32, 64, 1, 1, 2, 2, 0, 0)},
    {"14x14 64->128 1x1 stride 2", shape(2, 14, 14, 64, 128, 1, 1, 2, 2, 0, 0)},
};

template <typename T>
struct Data {
  std::vector<T> x, w, b, dy, dx0, dw0, db0;  // inputs, and the prefills of dx, dw, db
};

// x and dy in [-xmax, xmax), w and b in [-wmax, wmax), prefills in [-1, 1).
template <typename T>
Data<T> make_data(const Conv2dShape& s, uint64_t seed, double xmax = 1, double wmax = 1) {
  const size_t nx = size_t(s.N) * s.H * s.W * s.C, nw = size_t(s.K) * s.R * s.S * s.C;
  const size_t ny = size_t(s.N) * s.P() * s.Q() * s.K;
  Data<T> d;
  d.x = random_values<T>(nx, seed + 1, -xmax, xmax);
  d.w = random_values<T>(nw, seed + 2, -wmax, wmax);
  d.b = random_values<T>(size_t(s.K), seed + 3, -wmax, wmax);
  d.dy = random_values<T>(ny, seed + 4, -xmax, xmax);
  d.dx0 = random_values<T>(nx, seed + 5);
  d.dw0 = random_values<T>(nw, seed + 6);
  d.db0 = random_values<T>(size_t(s.K), seed + 7);
  return d;
}

template <typename T>
struct Out {
  std::vector<T> y, dx, dw, db;
};

template <typename T>
Out<T> run_cpu(const Conv2dShape& s, const Data<T>& d) {
  Out<T> o{std::vector<T>(d.dy.size()), d.dx0, d.dw0, d.db0};
  conv2d_forward_cpu<T>(s, d.x.data(), d.w.data(), d.b.data(), o.y.data());
  conv2d_backward_data_cpu<T>(s, d.dy.data(), d.w.data(), o.dx.data());
  conv2d_backward_filter_cpu<T>(s, d.x.data(), d.dy.data(), o.dw.data(), o.db.data());
  return o;
}

template <typename T>
Out<T> run_gpu(Path path, const Conv2dShape& s, const Data<T>& d) {
  Stream st;
  DeviceBuffer x = upload(d.x), w = upload(d.w), b = upload(d.b), dy = upload(d.dy);
  DeviceBuffer dx = upload(d.dx0), dw = upload(d.dw0), db = upload(d.db0);
  DeviceBuffer y(d.dy.size() * sizeof(T));
  memset_async(y.data(), 0xff, y.bytes(), st.get());  // poison: NaN in f16 and f32
  if constexpr (std::is_same<T, half_t>::value) {
    if (path == Path::tc) {
      conv2d_forward_tc_gpu(s, ptr<T>(x), ptr<T>(w), ptr<T>(b), ptr<T>(y), st.get());
      conv2d_backward_data_tc_gpu(s, ptr<T>(dy), ptr<T>(w), ptr<T>(dx), st.get());
      conv2d_backward_filter_tc_gpu(s, ptr<T>(x), ptr<T>(dy), ptr<T>(dw), ptr<T>(db), st.get());
    }
    if (path == Path::gemm || path == Path::fma || path == Path::async) {
      const ConvRung r = path == Path::gemm  ? ConvRung::gemm
                         : path == Path::fma ? ConvRung::fma
                                             : ConvRung::async;
      conv2d_forward_rung_gpu(r, s, ptr<T>(x), ptr<T>(w), ptr<T>(b), ptr<T>(y), st.get());
      conv2d_backward_data_rung_gpu(r, s, ptr<T>(dy), ptr<T>(w), ptr<T>(dx), st.get());
      conv2d_backward_filter_rung_gpu(r, s, ptr<T>(x), ptr<T>(dy), ptr<T>(dw), ptr<T>(db),
                                      st.get());
    }
  }
  if (path == Path::direct) {
    conv2d_forward_direct_gpu<T>(s, ptr<T>(x), ptr<T>(w), ptr<T>(b), ptr<T>(y), st.get());
    conv2d_backward_data_direct_gpu<T>(s, ptr<T>(dy), ptr<T>(w), ptr<T>(dx), st.get());
    conv2d_backward_filter_direct_gpu<T>(s, ptr<T>(x), ptr<T>(dy), ptr<T>(dw), ptr<T>(db),
                                         st.get());
  }
  st.synchronize();
  return {download<T>(y, d.dy.size()), download<T>(dx, d.dx0.size()),
          download<T>(dw, d.dw0.size()), download<T>(db, d.db0.size())};
}

// Runs both and compares the four outputs; each tolerance from the terms an output sums
// (gpu_compare.h), +1 for the bias or the prefilled value.
template <typename T>
void check_case(Path path, const Case& c, uint64_t seed, double xmax = 1, double wmax = 1) {
  const Conv2dShape& s = c.s;
  INFO("shape: " << c.name << " (" << path_name(path) << ")");
  const Data<T> d = make_data<T>(s, seed, xmax, wmax);
  const Out<T> want = run_cpu(s, d), got = run_gpu(path, s, d);
  const double xw = xmax * wmax, npq = double(s.N) * s.P() * s.Q();
  require_close_sum(got.y, want.y, double(s.R) * s.S * s.C + 1, xw, "y");
  require_close_sum(got.dx, want.dx, double(s.R) * s.S * s.K + 1, xw, "dx");
  require_close_sum(got.dw, want.dw, npq + 1, xmax * xmax, "dw");
  require_close_sum(got.db, want.db, npq + 1, xmax, "db");
}

}  // namespace

TEST_CASE_TEMPLATE("conv2d [gpu]: direct kernels equal the CPU reference on odd shapes", T,
                   float, half_t) {
  REQUIRE_GPU();
  uint64_t seed = 100;
  for (const Case& c : odd_cases) check_case<T>(Path::direct, c, seed += 10);
}

TEST_CASE("conv2d [gpu]: tc kernels equal the CPU reference on odd shapes") {
  REQUIRE_GPU();
  uint64_t seed = 200;
  for (const Case& c : odd_cases) check_case<half_t>(Path::tc, c, seed += 10);
}

TEST_CASE_TEMPLATE("conv2d [gpu]: the default models' layers at batch 2, direct", T, float,
                   half_t) {
  REQUIRE_GPU();
  uint64_t seed = 300;
  for (const Case& c : model_cases) check_case<T>(Path::direct, c, seed += 10);
}

TEST_CASE("conv2d [gpu]: the default models' layers at batch 2, tc") {
  REQUIRE_GPU();
  uint64_t seed = 400;
  for (const Case& c : model_cases) check_case<half_t>(Path::tc, c, seed += 10);
}

TEST_CASE("conv2d [gpu]: the ladder's v2 (gemm), v3 (fma) and v5 (async) equal the CPU "
          "reference") {
  REQUIRE_GPU();
  uint64_t seed = 700;
  for (Path p : {Path::gemm, Path::fma, Path::async}) {
    for (const Case& c : odd_cases) check_case<half_t>(p, c, seed += 10);
    for (const Case& c : model_cases) check_case<half_t>(p, c, seed += 10);
  }
}

TEST_CASE("conv2d [gpu]: the ladder's v5 gives v4's bits (the same fragments, in the same order)") {
  REQUIRE_GPU();
  uint64_t seed = 800;
  for (const std::vector<Case>* cases : {&odd_cases, &model_cases})
    for (const Case& c : *cases) {
      INFO(c.name);
      const Data<half_t> d = make_data<half_t>(c.s, seed += 10);
      const Out<half_t> v4 = run_gpu(Path::tc, c.s, d), v5 = run_gpu(Path::async, c.s, d);
      require_same_bits(v5.y, v4.y, "y");
      require_same_bits(v5.dx, v4.dx, "dx");
      require_same_bits(v5.dw, v4.dw, "dw");
      require_same_bits(v5.db, v4.db, "db");
    }
}

TEST_CASE("conv2d [gpu]: f16 inputs near the limits give no inf or NaN where the sum is finite") {
  REQUIRE_GPU();
  // Large inputs (up to 60000) times small weights (2^-12): every product and every sum is
  // far inside fp32, the outputs (|y| <= R*S*C * 60000 * 2^-12 < 6000) inside fp16; a kernel
  // summing in fp16, or multiplying before widening, would overflow.
  const Case big{"C=16 K=24 3x3 stride 2 pad 1", shape(2, 9, 11, 16, 24, 3, 3, 2, 2, 1, 1)};
  const Case odd{"C=3 K=5 3x2 pad 1", shape(2, 7, 9, 3, 5, 3, 2, 1, 1, 1, 1)};
  for (Path p : {Path::direct, Path::tc}) {
    // Forward and dgrad only: dw sums dy * x, both large, which would overflow fp16 for real.
    for (const Case& c : {big, odd}) {
      const Data<half_t> d = make_data<half_t>(c.s, 500, 60000, std::ldexp(1.0, -12));
      const Out<half_t> want = run_cpu(c.s, d), got = run_gpu(p, c.s, d);
      const double terms = double(c.s.R) * c.s.S * std::max(c.s.C, c.s.K) + 1;
      require_close_sum(got.y, want.y, terms, 60000 * std::ldexp(1.0, -12), "y (large x)");
      require_close_sum(got.dx, want.dx, terms, 60000 * std::ldexp(1.0, -12), "dx (large dy)");
    }
    // Subnormal inputs (|x|, |dy| < 2^-20: multiples of 2^-24) times weights near 1, with a
    // bias and a dx prefill as small: the products are exact in fp32, the sums land in fp16's
    // subnormal range (< 2^-14) and must round like the CPU's (2^-24 absolute tolerance).
    const double tiny = std::ldexp(1.0, -20);
    Data<half_t> d = make_data<half_t>(big.s, 600, tiny, 1);
    d.b = random_values<half_t>(d.b.size(), 601, -tiny, tiny);
    d.dx0 = random_values<half_t>(d.dx0.size(), 602, -tiny, tiny);
    const Out<half_t> want = run_cpu(big.s, d), got = run_gpu(p, big.s, d);
    const double terms = 9.0 * 24 + 1;
    require_close_sum(got.y, want.y, terms, tiny, "y (subnormal x)");
    require_close_sum(got.dx, want.dx, terms, tiny, "dx (subnormal dy)");
  }
}
