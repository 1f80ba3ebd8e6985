// maxpool2d and global average pooling, CPU reference, on hand-computed cases in every
// storage type. All values are exact in f16, so every comparison is exact. Then the SIMD
// maxpool (all channels of a window at once) against the plain loops it replaced, kept here
// verbatim: the same outputs and gradients bit for bit, ties and NaNs included.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/pool.h"
#include "kernels/rng.h"
#include "tests/test_util.h"

using namespace cutrain;
using cutrain_test::doubles;
using cutrain_test::require_equal;
using cutrain_test::to;

namespace {

Pool2dShape pool_shape(int N, int H, int W, int C, int R, int S, int stride, int pad) {
  Pool2dShape s;
  s.N = N, s.H = H, s.W = W, s.C = C, s.R = R, s.S = S;
  s.stride_h = s.stride_w = stride;
  s.pad_h = s.pad_w = pad;
  return s;
}

}  // namespace

TEST_CASE("pool: output size P, Q rounds down") {
  REQUIRE(pool_shape(1, 4, 4, 1, 2, 2, 2, 0).P() == 2);
  REQUIRE(pool_shape(1, 5, 5, 1, 2, 2, 2, 0).P() == 2);  // the last row fits no window
  REQUIRE(pool_shape(1, 7, 7, 1, 3, 3, 2, 1).Q() == 4);  // (7 + 2 - 3) / 2 + 1
  Pool2dShape s = pool_shape(1, 6, 9, 1, 3, 2, 1, 0);
  s.stride_w = 3;
  REQUIRE(s.P() == 4);
  REQUIRE(s.Q() == 3);  // (9 - 2) / 3 + 1
}

TEST_CASE_TEMPLATE("maxpool2d: 2x2 stride 2, including an all-negative window", T, float,
                   double, half_t) {
  const Pool2dShape s = pool_shape(1, 4, 4, 1, 2, 2, 2, 0);
  const std::vector<T> x = to<T>({1, 2, 5, 0,     //
                                  3, 4, -1, 6,    //
                                  -2, -3, 7, 8,   //
                                  -4, -5, 9, -6});
  std::vector<T> y(4, T(-100.0));  // poisoned
  maxpool2d_forward_cpu(s, x.data(), y.data());
  require_equal(doubles(y), {4, 6, -2, 9});

  // each window's gradient goes to its max; dx starts at 1 to show it accumulates
  const std::vector<T> dy = to<T>({10, 20, 30, 40});
  std::vector<T> dx(16, T(1.0));
  maxpool2d_backward_cpu(s, x.data(), dy.data(), dx.data());
  require_equal(doubles(dx), {1, 1, 1, 1,    //
                              1, 11, 1, 21,  //
                              31, 1, 1, 1,   //
                              1, 1, 40 + 1, 1});
}

TEST_CASE_TEMPLATE("maxpool2d: 3x3 stride 1 pad 1 ignores padding, overlaps accumulate", T,
                   float, double, half_t) {
  // All inputs negative: zero padding would make every output 0.
  const Pool2dShape s = pool_shape(1, 3, 3, 1, 3, 3, 1, 1);
  REQUIRE(s.P() == 3);
  const std::vector<T> x = to<T>({-1, -2, -3,  //
                                  -4, -5, -6,  //
                                  -7, -8, -9});
  std::vector<T> y(9, T(100.0));
  maxpool2d_forward_cpu(s, x.data(), y.data());
  // y[p][q] = max of rows p-1..p+1, columns q-1..q+1 inside the image
  require_equal(doubles(y), {-1, -1, -2,  //
                             -1, -1, -2,  //
                             -4, -4, -5});

  // dy = 1..9. x(0,0) = -1 is the max of windows 0,1,3,4: 1+2+4+5 = 12; x(0,1) of 2,5: 3+6;
  // x(1,0) of 6,7: 7+8; x(1,1) of window 8: 9. Everything else gets nothing.
  const std::vector<T> dy = to<T>({1, 2, 3, 4, 5, 6, 7, 8, 9});
  std::vector<T> dx(9, T(0.0));
  maxpool2d_backward_cpu(s, x.data(), dy.data(), dx.data());
  require_equal(doubles(dx), {12, 9, 0,  //
                              15, 9, 0,  //
                              0, 0, 0});
}

TEST_CASE_TEMPLATE("maxpool2d: NHWC channels and images do not mix", T, float, double,
                   half_t) {
  // x (2,2,2,3), one 2x2 window per image: y (2,1,1,3). In each image, each channel has its
  // max at a different pixel, and the channels' ranges differ, so mixing would show.
  const Pool2dShape s = pool_shape(2, 2, 2, 3, 2, 2, 2, 0);
  const std::vector<T> x = to<T>({
      9, 1, -5,      2, 3, -1,      // n=0: (0,0), (0,1)
      4, 0, -7,      1, 8, -3,      //      (1,0), (1,1)
      0.5, -2, 10,   0.25, -1, 20,  // n=1
      0.75, -4, 30,  0, -3, 40,
  });
  std::vector<T> y(6, T(-100.0));
  maxpool2d_forward_cpu(s, x.data(), y.data());
  require_equal(doubles(y), {9, 8, -1, 0.75, -1, 40});

  const std::vector<T> dy = to<T>({1, 2, 3, 4, 5, 6});
  std::vector<T> dx(24, T(0.0));
  maxpool2d_backward_cpu(s, x.data(), dy.data(), dx.data());
  require_equal(doubles(dx), {1, 0, 0,  0, 0, 3,  //
                              0, 0, 0,  0, 2, 0,  //
                              0, 0, 0,  0, 5, 0,  //
                              4, 0, 0,  0, 0, 6});
}

TEST_CASE_TEMPLATE("maxpool2d: a tie sends the whole gradient to the first maximum", T, float,
                   double, half_t) {
  // Window 0 holds 5 three times; window 1 holds 7 three times, the first at (0,3) in
  // row-major order.
  const Pool2dShape s = pool_shape(1, 2, 4, 1, 2, 2, 2, 0);
  const std::vector<T> x = to<T>({5, 5, 3, 7,  //
                                  5, 1, 7, 7});
  std::vector<T> y(2);
  maxpool2d_forward_cpu(s, x.data(), y.data());
  require_equal(doubles(y), {5, 7});
  const std::vector<T> dy = to<T>({1, 2});
  std::vector<T> dx(8, T(0.0));
  maxpool2d_backward_cpu(s, x.data(), dy.data(), dx.data());
  require_equal(doubles(dx), {1, 0, 0, 2,  //
                              0, 0, 0, 0});
}

TEST_CASE("maxpool2d: a NaN in a window is its max, so an overflow is not hidden") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Pool2dShape s = pool_shape(1, 1, 4, 1, 1, 2, 2, 0);
  const std::vector<float> x = {1, nan, nan, 2};
  std::vector<float> y(2, 0);
  maxpool2d_forward_cpu(s, x.data(), y.data());
  REQUIRE(std::isnan(y[0]));
  REQUIRE(std::isnan(y[1]));
  const std::vector<float> dy = {1, 2};
  std::vector<float> dx(4, 0);
  maxpool2d_backward_cpu(s, x.data(), dy.data(), dx.data());
  REQUIRE(dx == std::vector<float>{0, 1, 2, 0});
}

TEST_CASE_TEMPLATE("global_avgpool: mean over H*W per image and channel, and its backward", T,
                   float, double, half_t) {
  // x (2,2,3,2): pixels in order h*W + w, channels interleaved.
  const int N = 2, H = 2, W = 3, C = 2;
  const std::vector<T> x = to<T>({
      1, -2,   2, -4,   3, -6,   4, -8,   5, -10,  6, -12,  // n=0: c0 = 1..6, c1 = -2*(1..6)
      0, 0.5,  0, 0.5,  0, 0.5,  0, 0.5,  0, 0.5,  6, 0.5,  // n=1: c0 one 6, c1 all 0.5
  });
  std::vector<T> y(4, T(-100.0));
  global_avgpool_forward_cpu(N, H, W, C, x.data(), y.data());
  require_equal(doubles(y), {3.5, -7, 1, 0.5});

  // dx += dy / 6 at every pixel; dx starts at 1
  const std::vector<T> dy = to<T>({6, 12, -3, 3});
  std::vector<T> dx(24, T(1.0));
  global_avgpool_backward_cpu(N, H, W, C, dy.data(), dx.data());
  std::vector<double> want;
  for (int n = 0; n < N; n++)
    for (int i = 0; i < H * W; i++) {
      want.push_back(n == 0 ? 2 : 0.5);
      want.push_back(n == 0 ? 3 : 1.5);
    }
  require_equal(doubles(dx), want);
}

TEST_CASE("pool2d_check_shape: impossible shapes are rejected with the reason") {
  pool2d_check_shape(pool_shape(2, 4, 4, 3, 2, 2, 2, 0));  // fine
  pool2d_check_shape(pool_shape(2, 4, 4, 3, 3, 3, 1, 2));  // pad < window: fine
  REQUIRE_ERROR(pool2d_check_shape(pool_shape(1, 3, 3, 1, 5, 5, 1, 0)),
                "window 5x5 is larger than the padded input 3x3");
  REQUIRE_ERROR(pool2d_check_shape(pool_shape(1, 3, 3, 1, 2, 2, 0, 0)), "stride must be >= 1");
  REQUIRE_ERROR(pool2d_check_shape(pool_shape(1, 3, 3, 1, 2, 2, 1, 2)),
                "must be smaller than the window");
  REQUIRE_ERROR(pool2d_check_shape(pool_shape(1, 3, 3, 1, 2, 2, 1, -1)), "padding must be >= 0");
  REQUIRE_ERROR(pool2d_check_shape(pool_shape(1, 3, 3, 1, 0, 2, 1, 0)), "window must be");
  REQUIRE_ERROR(pool2d_check_shape(pool_shape(1, 0, 3, 1, 1, 1, 1, 0)), "sizes must be positive");
  REQUIRE_ERROR(pool2d_check_shape(pool_shape(1, 3, 3, 1, 5, 5, 1, 0), "mypool"), "mypool:");
}

namespace {
// The plain loops: one channel at a time, with branches (kernels/pool.cpp before SIMD).
template <typename T>
int64_t plain_window_argmax(const Pool2dShape& sh, const T* x, int n, int p, int q, int c) {
  using A = acc_t<T>;
  int64_t best_i = -1;
  A best = 0;
  const int h0 = p * sh.stride_h - sh.pad_h, w0 = q * sh.stride_w - sh.pad_w;
  for (int r = 0; r < sh.R; r++) {
    const int h = h0 + r;
    if (h < 0 || h >= sh.H) continue;  // padding: left out, as if -inf
    for (int s = 0; s < sh.S; s++) {
      const int w = w0 + s;
      if (w < 0 || w >= sh.W) continue;
      const int64_t i = ((int64_t(n) * sh.H + h) * sh.W + w) * sh.C + c;
      const A v = A(x[i]);
      if (best_i < 0 || v > best || (std::isnan(v) && !std::isnan(best))) {
        best = v;
        best_i = i;
      }
    }
  }
  return best_i;
}

template <typename T> void plain_maxpool_forward(const Pool2dShape& sh, const T* x, T* y) {
  const int P = sh.P(), Q = sh.Q();
  for (int n = 0; n < sh.N; n++)
    for (int p = 0; p < P; p++)
      for (int q = 0; q < Q; q++)
        for (int c = 0; c < sh.C; c++)
          y[((int64_t(n) * P + p) * Q + q) * sh.C + c] = x[plain_window_argmax(sh, x, n, p, q, c)];
}

template <typename T>
void plain_maxpool_backward(const Pool2dShape& sh, const T* x, const T* dy, T* dx) {
  using A = acc_t<T>;
  const int P = sh.P(), Q = sh.Q();
  const int64_t image = int64_t(sh.H) * sh.W * sh.C;
  std::vector<A> acc(static_cast<size_t>(image));
  for (int n = 0; n < sh.N; n++) {
    T* dxn = dx + n * image;
    for (int64_t i = 0; i < image; i++) acc[size_t(i)] = A(dxn[i]);
    for (int p = 0; p < P; p++)
      for (int q = 0; q < Q; q++)
        for (int c = 0; c < sh.C; c++) {
          const int64_t i = plain_window_argmax(sh, x, n, p, q, c) - n * image;
          acc[size_t(i)] += A(dy[((int64_t(n) * P + p) * Q + q) * sh.C + c]);
        }
    for (int64_t i = 0; i < image; i++) dxn[i] = T(acc[size_t(i)]);
  }
}

template <typename T> bool same_bytes(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}
}  // namespace

TEST_CASE_TEMPLATE("maxpool2d: the SIMD loops give the plain loops' bits, ties and NaNs included",
                   T, float, double, half_t) {
  // Values from {-2, ..., 2} and -0: most windows hold ties, +0 against -0 too. A few NaNs,
  // each with its own payload (so the output shows which one was taken), some windows two of
  // them. Shapes: the models' 2x2 stride 2, overlapping 3x3 stride 1 and 2 with padding, a
  // rectangular input, odd channel counts (SIMD remainders).
  const Pool2dShape shapes[] = {pool_shape(3, 8, 8, 5, 2, 2, 2, 0),
                                pool_shape(2, 7, 7, 17, 3, 3, 1, 1),
                                pool_shape(2, 9, 6, 3, 3, 3, 2, 1),
                                pool_shape(1, 5, 11, 33, 2, 2, 1, 0)};
  uint64_t seed = 40;
  for (const Pool2dShape& s : shapes) {
    pool2d_check_shape(s, "test");
    INFO("N " << s.N << " " << s.H << "x" << s.W << "x" << s.C << " window " << s.R
              << " stride " << s.stride_h << " pad " << s.pad_h);
    seed++;
    const size_t nx = size_t(s.N) * s.H * s.W * s.C, ny = size_t(s.output_numel());
    std::vector<T> x(nx), dy(ny), dx0(nx);
    for (size_t i = 0; i < nx; i++) {
      const uint64_t u = rng_u64(seed, i);
      float v = u % 7 == 0 ? -0.0f : float(int(u % 5) - 2);
      if (u % 97 == 0) {  // a quiet NaN, payload in the bits that half keeps too
        const uint32_t bits = 0x7fc00000u | (uint32_t(i % 511 + 1) << 13);
        std::memcpy(&v, &bits, sizeof v);
      }
      x[i] = T(v);
      dx0[i] = T(float(rng_uniform(seed + 1, i)));
    }
    for (size_t i = 0; i < ny; i++) dy[i] = T(float(rng_uniform(seed + 2, i) * 2 - 1));
    std::vector<T> y(ny), want_y(ny), dx = dx0, want_dx = dx0;
    maxpool2d_forward_cpu(s, x.data(), y.data());
    plain_maxpool_forward(s, x.data(), want_y.data());
    REQUIRE(same_bytes(y, want_y));
    maxpool2d_backward_cpu(s, x.data(), dy.data(), dx.data());
    plain_maxpool_backward(s, x.data(), dy.data(), want_dx.data());
    REQUIRE(same_bytes(dx, want_dx));
  }
}
