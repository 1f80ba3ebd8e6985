// linear CPU reference against hand-computed results: small integers, exact in f32, f64 and f16.
// The f16 cases check the precision rule: sum in fp32, round once to half.
#include <cmath>
#include <vector>

#include "kernels/linear.h"
#include "tests/test_util.h"

using namespace cutrain;
using cutrain_test::doubles;
using cutrain_test::require_equal;
using cutrain_test::to;

namespace {

// The shared example: N = 2, C = 3, K = 2.
const std::vector<double> x = {1, 2, 3,     // x (2,3)
                               4, 5, 6};
const std::vector<double> w = {1, 0, -2,    // w (2,3): row k is the weights of output k
                               2, 1, 0};
const std::vector<double> b = {10, 20};
const std::vector<double> dy = {1, -1,      // dy (2,2)
                                2, 3};

template <typename T>
std::vector<double> forward(int N, int C, int K, const std::vector<double>& xv,
                            const std::vector<double>& wv, const std::vector<double>& bv) {
  const std::vector<T> xt = to<T>(xv), wt = to<T>(wv), bt = to<T>(bv);
  std::vector<T> y(size_t(N) * K, T(-999.0));  // poisoned
  linear_forward_cpu<T>(N, C, K, xt.data(), wt.data(), bv.empty() ? nullptr : bt.data(),
                        y.data());
  return doubles(y);
}

}  // namespace

TEST_CASE_TEMPLATE("linear forward: exact, with and without bias", T, float, double, half_t) {
  // y[n][k] = b[k] + sum_c x[n][c] * w[k][c]
  //   y[0][0] = 10 + 1*1 + 2*0 + 3*(-2) = 5     y[0][1] = 20 + 1*2 + 2*1 + 3*0 = 24
  //   y[1][0] = 10 + 4*1 + 5*0 + 6*(-2) = 2     y[1][1] = 20 + 4*2 + 5*1 + 6*0 = 33
  require_equal(forward<T>(2, 3, 2, x, w, b), {5, 24, 2, 33});
  require_equal(forward<T>(2, 3, 2, x, w, {}), {-5, 4, -8, 13});
}

TEST_CASE_TEMPLATE("linear backward: exact gradients, accumulating", T, float, double, half_t) {
  // dx[n][c] = sum_k dy[n][k] w[k][c]:  dx[0] = 1*w[0] - 1*w[1] = (-1, -1, -2)
  //                                     dx[1] = 2*w[0] + 3*w[1] = (8, 3, -4)
  // dw[k][c] = sum_n dy[n][k] x[n][c]:  dw[0] = 1*x[0] + 2*x[1] = (9, 12, 15)
  //                                     dw[1] = -1*x[0] + 3*x[1] = (11, 13, 15)
  // db[k] = sum_n dy[n][k]:             db = (1 + 2, -1 + 3) = (3, 2)
  const std::vector<double> want_dx = {-1, -1, -2, 8, 3, -4}, want_dw = {9, 12, 15, 11, 13, 15},
                            want_db = {3, 2};
  const std::vector<T> xt = to<T>(x), wt = to<T>(w), dyt = to<T>(dy);
  std::vector<T> dx(6, T(0.0)), dw(6, T(0.0)), db(2, T(0.0));
  linear_backward_cpu<T>(2, 3, 2, xt.data(), wt.data(), dyt.data(), dx.data(), dw.data(),
                         db.data());
  require_equal(doubles(dx), want_dx);
  require_equal(doubles(dw), want_dw);
  require_equal(doubles(db), want_db);

  // a second call adds the same again: every gradient doubles
  linear_backward_cpu<T>(2, 3, 2, xt.data(), wt.data(), dyt.data(), dx.data(), dw.data(),
                         db.data());
  require_equal(doubles(dx), {-2, -2, -4, 16, 6, -8});
  require_equal(doubles(dw), {18, 24, 30, 22, 26, 30});
  require_equal(doubles(db), {6, 4});

  // each gradient may be left out on its own; the others are unchanged by that
  std::vector<T> dx_only(6, T(0.0)), dw_only(6, T(0.0)), db_only(2, T(0.0));
  linear_backward_cpu<T>(2, 3, 2, xt.data(), wt.data(), dyt.data(), dx_only.data(), nullptr,
                         nullptr);
  linear_backward_cpu<T>(2, 3, 2, xt.data(), wt.data(), dyt.data(), nullptr, dw_only.data(),
                         nullptr);
  linear_backward_cpu<T>(2, 3, 2, xt.data(), wt.data(), dyt.data(), nullptr, nullptr,
                         db_only.data());
  require_equal(doubles(dx_only), want_dx);
  require_equal(doubles(dw_only), want_dw);
  require_equal(doubles(db_only), want_db);
}

TEST_CASE("linear backward: K larger than C and N, so the loops cannot mix up their bounds") {
  // N = 1, C = 1, K = 3: x = (2), w = (1; -1; 4) as (3,1), dy = (1, 2, 3).
  //   dx = 1*1 + 2*(-1) + 3*4 = 11;   dw = dy[k] * x = (2, 4, 6);   db = (1, 2, 3)
  const std::vector<double> xv = {2}, wv = {1, -1, 4}, dyv = {1, 2, 3};
  std::vector<double> dx(1, 0.0), dw(3, 0.0), db(3, 0.0);
  linear_backward_cpu<double>(1, 1, 3, xv.data(), wv.data(), dyv.data(), dx.data(), dw.data(),
                              db.data());
  require_equal(dx, {11});
  require_equal(dw, {2, 4, 6});
  require_equal(db, {1, 2, 3});
  require_equal(forward<double>(1, 1, 3, xv, wv, {0.5, 0.5, 0.5}), {2.5, -1.5, 8.5});
}

TEST_CASE("linear f16: sums in fp32 and rounds once to half") {
  // y = 1 + 2048*1 + 1*1 + 1*1 = 2051 in fp32; the nearest halves are 2050 and 2052 (only even
  // numbers exist between 2048 and 4096) and the tie goes to the even mantissa, 2052. Summed
  // in half, each +1 onto 2048 would round back to 2048.
  require_equal(forward<float>(1, 3, 1, {2048, 1, 1}, {1, 1, 1}, {1}), {2051});
  require_equal(forward<half_t>(1, 3, 1, {2048, 1, 1}, {1, 1, 1}, {1}), {2052});
  // dx[0][0] = dy . w[:,0] over K = 3: the same sum on the backward side
  const std::vector<half_t> xh = to<half_t>({1}), wh = to<half_t>({2048, 1, 1}),
                            dyh = to<half_t>({1, 1, 1});
  std::vector<half_t> dx(1, half_t(1.0f));
  linear_backward_cpu<half_t>(1, 1, 3, xh.data(), wh.data(), dyh.data(), dx.data(), nullptr,
                              nullptr);
  require_equal(doubles(dx), {2052});
}

TEST_CASE("linear f16: a sum beyond 65504 overflows to inf") {
  // 200*200 + 200*200 = 80000: the inputs and products fit in half, the sum does not.
  require_equal(forward<float>(1, 2, 1, {200, 200}, {200, 200}, {}), {80000});
  const std::vector<double> y = forward<half_t>(1, 2, 1, {200, 200}, {200, 200}, {});
  REQUIRE(std::isinf(y[0]));
  REQUIRE(y[0] > 0);
}
