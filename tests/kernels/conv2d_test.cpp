// conv2d CPU reference against hand-computed results: small integers, so every storage type
// (f32, f64, and f16 below 2048) holds inputs and outputs exactly and the answers are exact.
// The f16 cases at the end check the precision rule: sum in fp32, round once to half.
#include <cmath>
#include <vector>

#include "kernels/conv2d.h"
#include "tests/test_util.h"

using namespace cutrain;
using cutrain_test::doubles;
using cutrain_test::require_equal;
using cutrain_test::to;

namespace {

Conv2dShape make_shape(int N, int H, int W, int C, int K, int R, int S, int stride_h = 1,
                       int stride_w = 1, int pad_h = 0, int pad_w = 0) {
  Conv2dShape s;
  s.N = N, s.H = H, s.W = W, s.C = C, s.K = K, s.R = R, s.S = S;
  s.stride_h = stride_h, s.stride_w = stride_w, s.pad_h = pad_h, s.pad_w = pad_w;
  return s;
}

// y = conv2d(x, w, b) in storage type T, returned as doubles (b empty: no bias).
template <typename T>
std::vector<double> forward(const Conv2dShape& s, const std::vector<double>& x,
                            const std::vector<double>& w, const std::vector<double>& b = {}) {
  conv2d_check_shape(s);
  REQUIRE(x.size() == size_t(s.N) * s.H * s.W * s.C);
  REQUIRE(w.size() == size_t(s.K) * s.R * s.S * s.C);
  const std::vector<T> xt = to<T>(x), wt = to<T>(w), bt = to<T>(b);
  std::vector<T> y(size_t(s.N) * s.P() * s.Q() * s.K, T(-999.0));  // poisoned
  conv2d_forward_cpu<T>(s, xt.data(), wt.data(), b.empty() ? nullptr : bt.data(), y.data());
  return doubles(y);
}

const std::vector<double> x3x3 = {1, 2, 3,   // x (1,3,3,1): x[h][w] = 3h + w + 1
                                  4, 5, 6,
                                  7, 8, 9};
const std::vector<double> w2x2 = {1, 2,      // w (1,2,2,1)
                                  3, 4};
const std::vector<double> dy2x2 = {1, 0,     // dy (1,2,2,1) for the backward cases
                                   2, -1};

}  // namespace

TEST_CASE_TEMPLATE("conv2d forward: 1 channel, 3x3 input, 2x2 filter", T, float, double, half_t) {
  // y[p][q] = sum_{r,s} x[p+r][q+s] * w[r][s], P = Q = 3 - 2 + 1 = 2
  //   y[0][0] = 1*1 + 2*2 + 4*3 + 5*4 = 37     y[0][1] = 2*1 + 3*2 + 5*3 + 6*4 = 47
  //   y[1][0] = 4*1 + 5*2 + 7*3 + 8*4 = 67     y[1][1] = 5*1 + 6*2 + 8*3 + 9*4 = 77
  require_equal(forward<T>(make_shape(1, 3, 3, 1, 1, 2, 2), x3x3, w2x2), {37, 47, 67, 77});
}

TEST_CASE_TEMPLATE("conv2d forward: stride 2 skips rows and drops the remainder", T, float,
                   double, half_t) {
  // x (1,5,5,1) = 1..25 row-major, w = [1 2; 3 4], stride 2: P = (5 - 2) / 2 + 1 = 2, so the
  // windows start at rows/cols 0 and 2 and the last row and column are never read.
  //   y[0][0] = x00 + 2x01 + 3x10 + 4x11 = 1 + 4 + 18 + 28 = 51
  //   y[0][1] = x02 + 2x03 + 3x12 + 4x13 = 3 + 8 + 24 + 36 = 71
  //   y[1][0] = x20 + 2x21 + 3x30 + 4x31 = 11 + 24 + 48 + 68 = 151
  //   y[1][1] = x22 + 2x23 + 3x32 + 4x33 = 13 + 28 + 54 + 76 = 171
  std::vector<double> x(25);
  for (int i = 0; i < 25; i++) x[size_t(i)] = i + 1;
  require_equal(forward<T>(make_shape(1, 5, 5, 1, 1, 2, 2, 2, 2), x, w2x2), {51, 71, 151, 171});
}

TEST_CASE_TEMPLATE("conv2d forward: padding 1 reads zeros outside the image", T, float, double,
                   half_t) {
  // x (1,2,2,1) = [1 2; 3 4], w (1,3,3,1) = [1 2 3; 4 5 6; 7 8 9], pad 1: P = 2 + 2 - 3 + 1 = 2.
  // Padded x is [0 0 0 0; 0 1 2 0; 0 3 4 0; 0 0 0 0]; each 3x3 window sees the four pixels
  // under a different corner of w:
  //   y[0][0] = 1*5 + 2*6 + 3*8 + 4*9 = 77     y[0][1] = 1*4 + 2*5 + 3*7 + 4*8 = 67
  //   y[1][0] = 1*2 + 2*3 + 3*5 + 4*6 = 47     y[1][1] = 1*1 + 2*2 + 3*4 + 4*5 = 37
  const std::vector<double> w = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  require_equal(forward<T>(make_shape(1, 2, 2, 1, 1, 3, 3, 1, 1, 1, 1), {1, 2, 3, 4}, w),
                {77, 67, 47, 37});
}

TEST_CASE_TEMPLATE("conv2d forward: stride 2 with padding 1", T, float, double, half_t) {
  // x = x3x3, w = [1 2; 3 4], stride 2, pad 1: P = (3 + 2 - 2) / 2 + 1 = 2. Window (p,q) covers
  // input rows 2p-1, 2p and columns 2q-1, 2q (row/column -1 is padding):
  //   y[0][0] = 4*x00 = 4                      y[0][1] = 3*x01 + 4*x02 = 6 + 12 = 18
  //   y[1][0] = 2*x10 + 4*x20 = 8 + 28 = 36    y[1][1] = x11 + 2x12 + 3x21 + 4x22 = 77
  require_equal(forward<T>(make_shape(1, 3, 3, 1, 1, 2, 2, 2, 2, 1, 1), x3x3, w2x2),
                {4, 18, 36, 77});
}

TEST_CASE_TEMPLATE("conv2d forward: rectangular filters and unequal padding", T, float, double,
                   half_t) {
  SUBCASE("1x3 filter") {
    // x (1,2,4,1) = [1 2 3 4; 5 6 7 8], w (1,1,3,1) = [1 2 3]: P = 2, Q = 4 - 3 + 1 = 2
    //   y[0][0] = 1 + 4 + 9 = 14     y[0][1] = 2 + 6 + 12 = 20
    //   y[1][0] = 5 + 12 + 21 = 38   y[1][1] = 6 + 14 + 24 = 44
    require_equal(forward<T>(make_shape(1, 2, 4, 1, 1, 1, 3), {1, 2, 3, 4, 5, 6, 7, 8}, {1, 2, 3}),
                  {14, 20, 38, 44});
  }
  SUBCASE("3x1 filter, pad_h 0, pad_w 1") {
    // x (1,3,2,1) = [1 2; 3 4; 5 6], w (1,3,1,1) = [1; 2; 3]: P = 1, Q = 2 + 2 - 1 + 1 = 4.
    // Output column q reads input column q - 1: columns -1 and 2 are padding.
    //   y = [0, 1*1 + 3*2 + 5*3, 2*1 + 4*2 + 6*3, 0] = [0, 22, 28, 0]
    require_equal(
        forward<T>(make_shape(1, 3, 2, 1, 1, 3, 1, 1, 1, 0, 1), {1, 2, 3, 4, 5, 6}, {1, 2, 3}),
        {0, 22, 28, 0});
  }
}

TEST_CASE_TEMPLATE("conv2d forward: 2 images, 2 input and 2 output channels, bias", T, float,
                   double, half_t) {
  // x (2,2,3,2), pixels as (c0,c1). Image 0:   (1,0) (2,1) (0,1)     image 1: all (1,1)
  //                                            (1,1) (0,2) (1,0)
  // w (2,2,2,2), taps (r,s) as (c0,c1).  k=0:  (1,0) (0,1)           k=1:  (1,-1) (2,0)
  //                                            (1,0) (0,1)                 (0, 3) (-1,1)
  // b = (10, -5). P = 1, Q = 3 - 2 + 1 = 2. Each output is b[k] + the dot products of the
  // four pixels under the window with the four taps of filter k:
  //   image 0, q=0, k=0: 1 + 1 + 1 + 2 = 5, + 10 = 15
  //   image 0, q=0, k=1: (1-0) + (4+0) + (0+3) + (0+2) = 10, - 5 = 5
  //   image 0, q=1, k=0: 2 + 1 + 0 + 0 = 3, + 10 = 13
  //   image 0, q=1, k=1: (2-1) + (0+0) + (0+6) + (-1+0) = 6, - 5 = 1
  //   image 1 (all ones): k=0: sum of w[0] = 4, + 10 = 14; k=1: sum of w[1] = 5, - 5 = 0
  const std::vector<double> x = {1, 0, 2, 1, 0, 1, 1, 1, 0, 2, 1, 0,   // image 0
                                 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};  // image 1
  const std::vector<double> w = {1, 0, 0, 1, 1, 0, 0, 1,               // k = 0
                                 1, -1, 2, 0, 0, 3, -1, 1};            // k = 1
  // y (2,1,2,2): (n, q, k)
  require_equal(forward<T>(make_shape(2, 2, 3, 2, 2, 2, 2), x, w, {10, -5}),
                {15, 5, 13, 1, 14, 0, 14, 0});
  // without the bias every output drops by b[k]
  require_equal(forward<T>(make_shape(2, 2, 3, 2, 2, 2, 2), x, w),
                {5, 10, 3, 6, 4, 5, 4, 5});
}

TEST_CASE_TEMPLATE("conv2d backward: exact data and filter gradients, accumulating", T, float,
                   double, half_t) {
  struct Case {
    const char* name;
    Conv2dShape s;
    std::vector<double> dx, dw;
  };
  // Both with x = x3x3, w = [1 2; 3 4], dy = [1 0; 2 -1], db = 1 + 0 + 2 - 1 = 2.
  const Case cases[] = {
      // stride 1, no padding: dx[h][w] = sum_{p,q} dy[p][q] * w[h-p][w-q] (the "full"
      // correlation), dw[r][s] = sum_{p,q} dy[p][q] * x[p+r][q+s]:
      //   dx[1][1] = dy00*w11 + dy01*w10 + dy10*w01 + dy11*w00 = 4 + 0 + 4 - 1 = 7, and so on
      //   dw[0][0] = 1*1 + 0*2 + 2*4 - 1*5 = 4      dw[0][1] = 1*2 + 0*3 + 2*5 - 1*6 = 6
      //   dw[1][0] = 1*4 + 0*5 + 2*7 - 1*8 = 10     dw[1][1] = 1*5 + 0*6 + 2*8 - 1*9 = 12
      {"stride 1", make_shape(1, 3, 3, 1, 1, 2, 2),
       {1, 2, 0, 5, 7, -2, 6, 5, -4}, {4, 6, 10, 12}},
      // stride 2, pad 1: input row h is read by exactly one (p, r): h=0 <- (0,1), h=1 <- (1,0),
      // h=2 <- (1,1), and the same for columns, so dx[h][w] = dy[p][q] * w[r][s]:
      //   row 0: dy00*w11 = 4, dy01*w10 = 0, dy01*w11 = 0
      //   row 1: dy10*w01 = 4, dy11*w00 = -1, dy11*w01 = -2
      //   row 2: dy10*w11 = 8, dy11*w10 = -3, dy11*w11 = -4
      // dw[r][s] = sum_{p,q} dy[p][q] * x[2p-1+r][2q-1+s] (0 outside):
      //   dw[0][0] = dy11*x11 = -5          dw[0][1] = dy10*x10 + dy11*x12 = 8 - 6 = 2
      //   dw[1][0] = dy11*x21 = -8          dw[1][1] = dy00*x00 + dy10*x20 + dy11*x22 = 1+14-9 = 6
      {"stride 2, pad 1", make_shape(1, 3, 3, 1, 1, 2, 2, 2, 2, 1, 1),
       {4, 0, 0, 4, -1, -2, 8, -3, -4}, {-5, 2, -8, 6}},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    const std::vector<T> x = to<T>(x3x3), w = to<T>(w2x2), dy = to<T>(dy2x2);
    std::vector<T> dx(9, T(0.0)), dw(4, T(0.0)), db(1, T(0.0));
    conv2d_backward_data_cpu<T>(c.s, dy.data(), w.data(), dx.data());
    conv2d_backward_filter_cpu<T>(c.s, x.data(), dy.data(), dw.data(), db.data());
    require_equal(doubles(dx), c.dx);
    require_equal(doubles(dw), c.dw);
    require_equal(doubles(db), {2});

    // a second call adds the same again: every gradient doubles
    conv2d_backward_data_cpu<T>(c.s, dy.data(), w.data(), dx.data());
    conv2d_backward_filter_cpu<T>(c.s, x.data(), dy.data(), dw.data(), db.data());
    std::vector<double> dx2 = c.dx, dw2 = c.dw;
    for (double& v : dx2) v *= 2;
    for (double& v : dw2) v *= 2;
    require_equal(doubles(dx), dx2);
    require_equal(doubles(dw), dw2);
    require_equal(doubles(db), {4});

    // dw and db may be left out separately
    std::vector<T> db_only(1, T(0.5));
    conv2d_backward_filter_cpu<T>(c.s, x.data(), dy.data(), nullptr, db_only.data());
    require_equal(doubles(db_only), {2.5});
    std::vector<T> dw_only(4, T(0.0));
    conv2d_backward_filter_cpu<T>(c.s, x.data(), dy.data(), dw_only.data(), nullptr);
    require_equal(doubles(dw_only), c.dw);
  }
}

TEST_CASE("conv2d f16: sums in fp32 and rounds once to half") {
  // A 1x1 convolution over C = 3: y = b + x.w = 1 + 2048 + 1 + 1 = 2051 in fp32. Half has 11
  // significant bits, so between 2048 and 4096 only even numbers exist: 2051 lies halfway
  // between 2050 (odd mantissa) and 2052 (even), and rounds to 2052. Had the sum been kept in
  // half, each +1 onto 2048 would round back to 2048 (ties to even) and the answer be 2048.
  const Conv2dShape s = make_shape(1, 1, 1, 3, 1, 1, 1);
  const std::vector<double> x = {2048, 1, 1}, w = {1, 1, 1}, b = {1};
  require_equal(forward<float>(s, x, w, b), {2051});
  require_equal(forward<half_t>(s, x, w, b), {2052});
}

TEST_CASE("conv2d f16: a sum beyond 65504 overflows to inf") {
  // 200*200 + 200*200 = 80000: every input and product fits in half, the sum does not.
  const Conv2dShape s = make_shape(1, 1, 1, 2, 1, 1, 1);
  const std::vector<double> x = {200, 200}, w = {200, 200};
  require_equal(forward<float>(s, x, w), {80000});
  const std::vector<double> y = forward<half_t>(s, x, w);
  REQUIRE(std::isinf(y[0]));
  REQUIRE(y[0] > 0);
}

TEST_CASE("conv2d f16: random odd sizes give exactly the fp32 result rounded to half") {
  // Inputs that are already halves, run in f32 and in f16 storage: both sum in fp32 in the same
  // order, so the f16 result must be the f32 result rounded to half, bit for bit.
  const Conv2dShape s = make_shape(3, 7, 5, 3, 5, 3, 2, 2, 1, 1, 1);
  const size_t nx = size_t(s.N) * s.H * s.W * s.C, nw = size_t(s.K) * s.R * s.S * s.C;
  const size_t ny = size_t(s.N) * s.P() * s.Q() * s.K;
  const auto halves = [](const Tensor& t) { return to<half_t>(t.to_doubles()); };
  const std::vector<half_t> xh = halves(cutrain_test::uniform({int(nx)}, DType::f16, 1)),
                            wh = halves(cutrain_test::uniform({int(nw)}, DType::f16, 2)),
                            bh = halves(cutrain_test::uniform({s.K}, DType::f16, 3)),
                            dyh = halves(cutrain_test::uniform({int(ny)}, DType::f16, 4));
  const auto floats = [](const std::vector<half_t>& v) {
    std::vector<float> f;
    for (half_t h : v) f.push_back(float(h));
    return f;
  };
  const std::vector<float> xf = floats(xh), wf = floats(wh), bf = floats(bh), dyf = floats(dyh);
  const auto require_rounded = [&](const std::vector<half_t>& got, const std::vector<float>& f32) {
    REQUIRE(got.size() == f32.size());
    for (size_t i = 0; i < got.size(); i++) {
      INFO("element " << i << ": f16 " << float(got[i]) << ", f32 " << f32[i]);
      REQUIRE(got[i].bits == half_t(f32[i]).bits);
    }
  };
  const size_t K = static_cast<size_t>(s.K);
  std::vector<half_t> yh(ny), dxh(nx), dwh(nw), dbh(K);
  std::vector<float> yf(ny), dxf(nx), dwf(nw), dbf(K);
  conv2d_forward_cpu<half_t>(s, xh.data(), wh.data(), bh.data(), yh.data());
  conv2d_forward_cpu<float>(s, xf.data(), wf.data(), bf.data(), yf.data());
  require_rounded(yh, yf);
  conv2d_backward_data_cpu<half_t>(s, dyh.data(), wh.data(), dxh.data());
  conv2d_backward_data_cpu<float>(s, dyf.data(), wf.data(), dxf.data());
  require_rounded(dxh, dxf);
  conv2d_backward_filter_cpu<half_t>(s, xh.data(), dyh.data(), dwh.data(), dbh.data());
  conv2d_backward_filter_cpu<float>(s, xf.data(), dyf.data(), dwf.data(), dbf.data());
  require_rounded(dwh, dwf);
  require_rounded(dbh, dbf);
}

TEST_CASE("conv2d_check_shape names the problem and the values") {
  conv2d_check_shape(make_shape(1, 3, 3, 1, 1, 3, 3));           // filter exactly fits
  conv2d_check_shape(make_shape(1, 3, 3, 1, 1, 5, 5, 1, 1, 1, 1)); // fits thanks to padding
  REQUIRE_ERROR(conv2d_check_shape(make_shape(1, 3, 3, 1, 1, 5, 5)),
                "conv2d: filter 5x5 is larger than the padded input 3x3 (pad 0)");
  REQUIRE_ERROR(conv2d_check_shape(make_shape(1, 3, 4, 1, 1, 3, 7, 1, 1, 2, 1)),
                "conv2d: filter 3x7 is larger than the padded input 7x6 (pad 2x1)");
  REQUIRE_ERROR(conv2d_check_shape(make_shape(0, 3, 3, 1, 1, 2, 2)),
                "N (batch) must be positive, got 0");
  REQUIRE_ERROR(conv2d_check_shape(make_shape(1, 3, 3, 1, 0, 2, 2)),
                "K (output channels) must be positive, got 0");
  REQUIRE_ERROR(conv2d_check_shape(make_shape(1, 3, 3, 1, 1, 2, -1)),
                "S (filter width) must be positive, got -1");
  REQUIRE_ERROR(conv2d_check_shape(make_shape(1, 3, 3, 1, 1, 2, 2, 0, 1)),
                "conv2d: stride must be at least 1, got 0x1");
  REQUIRE_ERROR(conv2d_check_shape(make_shape(1, 3, 3, 1, 1, 2, 2, 1, 1, 0, -1)),
                "conv2d: padding must not be negative, got 0x-1");
}
