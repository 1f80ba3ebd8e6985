// linear on the GPU against the CPU reference: the direct kernels (f32, f16) and the
// tensor-core path (f16), forward, dx, dw and db, on odd sizes (tails of every tile; C and K
// multiples of 8 or not, which picks the tc path's 16-byte or scalar loads; a tall batch that
// splits the weight gradient's kd), the default models' classifier, and bias_grad_gpu alone.
// Forward outputs are poisoned (0xff bytes: NaN); backward outputs are prefilled with random
// values, and the CPU reference accumulates onto the same prefill.
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/linear.h"
#include "tests/kernels/gpu_compare.h"
#include "tests/test_util.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {

enum class Path { direct, tc };

struct Sizes {
  int N, C, K;
};

const std::vector<Sizes> cases = {
    {1, 1, 1},      {3, 5, 7},     {37, 130, 70},  {200, 96, 72},  // M > 128, N > 64
    {2, 128, 10},   {256, 128, 10},                               // the classifier
    {2000, 40, 16},  // dw: Kd = 2000 over few tiles, split-K
    {65, 33, 129},  {16, 64, 32},  // C, K multiples of 8: 16-byte loads everywhere
};

template <typename T>
struct Data {
  std::vector<T> x, w, b, dy, dx0, dw0, db0;
};

template <typename T>
Data<T> make_data(const Sizes& z, uint64_t seed, double xmax = 1, double wmax = 1) {
  const size_t nx = size_t(z.N) * z.C, nw = size_t(z.K) * z.C, ny = size_t(z.N) * z.K;
  return {random_values<T>(nx, seed + 1, -xmax, xmax),   random_values<T>(nw, seed + 2, -wmax, wmax),
          random_values<T>(size_t(z.K), seed + 3, -wmax, wmax),
          random_values<T>(ny, seed + 4, -xmax, xmax),   random_values<T>(nx, seed + 5),
          random_values<T>(nw, seed + 6),                random_values<T>(size_t(z.K), seed + 7)};
}

template <typename T>
struct Out {
  std::vector<T> y, dx, dw, db;
};

template <typename T>
Out<T> run_cpu(const Sizes& z, const Data<T>& d) {
  Out<T> o{std::vector<T>(d.dy.size()), d.dx0, d.dw0, d.db0};
  linear_forward_cpu<T>(z.N, z.C, z.K, d.x.data(), d.w.data(), d.b.data(), o.y.data());
  linear_backward_cpu<T>(z.N, z.C, z.K, d.x.data(), d.w.data(), d.dy.data(), o.dx.data(),
                         o.dw.data(), o.db.data());
  return o;
}

template <typename T>
Out<T> run_gpu(Path path, const Sizes& z, const Data<T>& d) {
  Stream st;
  DeviceBuffer x = upload(d.x), w = upload(d.w), b = upload(d.b), dy = upload(d.dy);
  DeviceBuffer dx = upload(d.dx0), dw = upload(d.dw0), db = upload(d.db0);
  DeviceBuffer y(d.dy.size() * sizeof(T));
  memset_async(y.data(), 0xff, y.bytes(), st.get());  // poison: NaN in f16 and f32
  if constexpr (std::is_same<T, half_t>::value) {
    if (path == Path::tc) {
      linear_forward_tc_gpu(z.N, z.C, z.K, ptr<T>(x), ptr<T>(w), ptr<T>(b), ptr<T>(y),
                            st.get());
      linear_backward_tc_gpu(z.N, z.C, z.K, ptr<T>(x), ptr<T>(w), ptr<T>(dy), ptr<T>(dx),
                             ptr<T>(dw), ptr<T>(db), st.get());
    }
  }
  if (path == Path::direct) {
    linear_forward_direct_gpu<T>(z.N, z.C, z.K, ptr<T>(x), ptr<T>(w), ptr<T>(b), ptr<T>(y),
                                 st.get());
    linear_backward_direct_gpu<T>(z.N, z.C, z.K, ptr<T>(x), ptr<T>(w), ptr<T>(dy), ptr<T>(dx),
                                  ptr<T>(dw), ptr<T>(db), st.get());
  }
  st.synchronize();
  return {download<T>(y, d.dy.size()), download<T>(dx, d.dx0.size()),
          download<T>(dw, d.dw0.size()), download<T>(db, d.db0.size())};
}

// Tolerances from the terms each output sums (gpu_compare.h), +1 for the bias or prefill.
template <typename T>
void check_case(Path path, const Sizes& z, uint64_t seed) {
  INFO("N " << z.N << " C " << z.C << " K " << z.K
            << (path == Path::tc ? " (tc)" : " (direct)"));
  const Data<T> d = make_data<T>(z, seed);
  const Out<T> want = run_cpu(z, d), got = run_gpu(path, z, d);
  require_close_sum(got.y, want.y, z.C + 1.0, 1, "y");
  require_close_sum(got.dx, want.dx, z.K + 1.0, 1, "dx");
  require_close_sum(got.dw, want.dw, z.N + 1.0, 1, "dw");
  require_close_sum(got.db, want.db, z.N + 1.0, 1, "db");
}

}  // namespace

TEST_CASE_TEMPLATE("linear [gpu]: direct kernels equal the CPU reference", T, float, half_t) {
  REQUIRE_GPU();
  uint64_t seed = 100;
  for (const Sizes& z : cases) check_case<T>(Path::direct, z, seed += 10);
}

TEST_CASE("linear [gpu]: tc kernels equal the CPU reference") {
  REQUIRE_GPU();
  uint64_t seed = 200;
  for (const Sizes& z : cases) check_case<half_t>(Path::tc, z, seed += 10);
}

TEST_CASE("linear [gpu]: a null dx, dw or db is left alone, the others still computed") {
  REQUIRE_GPU();
  const Sizes z{37, 130, 70};
  const Data<half_t> d = make_data<half_t>(z, 300);
  const Out<half_t> want = run_cpu(z, d);
  for (Path path : {Path::direct, Path::tc}) {
    Stream st;
    DeviceBuffer x = upload(d.x), w = upload(d.w), dy = upload(d.dy), dw = upload(d.dw0);
    if (path == Path::tc)
      linear_backward_tc_gpu(z.N, z.C, z.K, ptr<half_t>(x), ptr<half_t>(w), ptr<half_t>(dy),
                             nullptr, ptr<half_t>(dw), nullptr, st.get());
    else
      linear_backward_direct_gpu<half_t>(z.N, z.C, z.K, ptr<half_t>(x), ptr<half_t>(w),
                                         ptr<half_t>(dy), nullptr, ptr<half_t>(dw), nullptr,
                                         st.get());
    st.synchronize();
    require_close_sum(download<half_t>(dw, d.dw0.size()), want.dw, z.N + 1.0, 1, "dw");
  }
}

TEST_CASE("linear [gpu]: f16 inputs near the limits give no inf or NaN where the sum is finite") {
  REQUIRE_GPU();
  // x and dy up to 60000, w and b 2^-12: products <= 15, |y| and |dx| < 70 * 15, inside fp16,
  // while the same sums in fp16 arithmetic, or squares of x, would overflow. (dw = dy^T x
  // would overflow for real, so only y and dx are compared.) Then subnormal x and dy
  // (< 2^-20) with weights near 1: sums in fp16's subnormal range, rounded like the CPU.
  const Sizes z{37, 130, 70};
  for (Path path : {Path::direct, Path::tc}) {
    const double small = std::ldexp(1.0, -12);
    const Data<half_t> big = make_data<half_t>(z, 400, 60000, small);
    const Out<half_t> want = run_cpu(z, big), got = run_gpu(path, z, big);
    require_close_sum(got.y, want.y, z.C + 1.0, 60000 * small, "y (large x)");
    require_close_sum(got.dx, want.dx, z.K + 1.0, 60000 * small, "dx (large dy)");

    const double tiny = std::ldexp(1.0, -20);
    Data<half_t> sub = make_data<half_t>(z, 500, tiny, 1);
    sub.b = random_values<half_t>(sub.b.size(), 501, -tiny, tiny);
    sub.dx0 = random_values<half_t>(sub.dx0.size(), 502, -tiny, tiny);
    const Out<half_t> want2 = run_cpu(z, sub), got2 = run_gpu(path, z, sub);
    require_close_sum(got2.y, want2.y, z.C + 1.0, tiny, "y (subnormal x)");
    require_close_sum(got2.dx, want2.dx, z.K + 1.0, tiny, "dx (subnormal dy)");
  }
}

TEST_CASE_TEMPLATE("linear [gpu]: bias_grad_gpu sums tall columns like the CPU", T, float,
                   half_t) {
  REQUIRE_GPU();
  // M = 100000 rows (conv2d's N*P*Q at batch 128 on 28x28): many chunks, a tail chunk, and
  // K = 37 (a tail of the 32-column blocks).
  const int64_t M = 100000;
  const int K = 37;
  const std::vector<T> dy = random_values<T>(size_t(M) * K, 600), db0 = random_values<T>(K, 601);
  std::vector<T> want = db0;
  for (int k = 0; k < K; k++) {
    float s = float(want[size_t(k)]);
    for (int64_t m = 0; m < M; m++) s += float(dy[size_t(m) * K + k]);
    want[size_t(k)] = T(s);
  }
  Stream st;
  DeviceBuffer ddy = upload(dy), ddb = upload(db0);
  bias_grad_gpu<T>(M, K, ptr<T>(ddy), ptr<T>(ddb), st.get());
  st.synchronize();
  const std::vector<T> got = download<T>(ddb, size_t(K));
  require_close_sum(got, want, double(M) + 1, 1, "db");
  // Deterministic: a second run from the same prefill gives the same bits.
  DeviceBuffer ddb2 = upload(db0);
  bias_grad_gpu<T>(M, K, ptr<T>(ddy), ptr<T>(ddb2), st.get());
  st.synchronize();
  const std::vector<T> again = download<T>(ddb2, size_t(K));
  for (int k = 0; k < K; k++)
    REQUIRE(float(again[size_t(k)]) == float(got[size_t(k)]));
}
