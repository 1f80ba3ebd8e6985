// input_normalize_cpu against hand-computed values, the f16 rounding rule, and the argument
// checks.
#include <cmath>
#include <vector>

#include "kernels/input.h"
#include "tests/test_util.h"

using namespace cutrain;
using cutrain_test::doubles;
using cutrain_test::require_equal;
using cutrain_test::require_near;

namespace {
// Three channels with dyadic mean and stddev, so that x = 0 and x = 255 (x/255 = 0 and 1,
// exact) give exact results in every type:
//   c0: mean 0.5,  stddev 0.25   y = (v - 0.5) / 0.25   v = 0 -> -2,   v = 1 -> 2
//   c1: mean 0.25, stddev 0.5    y = (v - 0.25) / 0.5   v = 0 -> -0.5, v = 1 -> 1.5
//   c2: mean 0,    stddev 2      y = v / 2              v = 0 -> 0,    v = 1 -> 0.5
const std::vector<float> kMean = {0.5f, 0.25f, 0.0f}, kStd = {0.25f, 0.5f, 2.0f};

// x (2,2,2,3): image 0 is black then white pixels, image 1 holds 51 (v = 0.2) and 102
// (v = 0.4), which x/255 cannot represent exactly: those are compared to the real values.
const std::vector<uint8_t> kX = {0,   0,   0,   255, 255, 255, 0,   255, 0,   255, 0,   255,
                                 51,  51,  51,  102, 102, 102, 51,  102, 51,  102, 51,  102};

template <typename T> std::vector<double> normalize(const std::vector<uint8_t>& x, int N, int S) {
  std::vector<T> y(x.size(), T(-999.0f));  // poisoned
  input_normalize_cpu<T>(N, S, 3, x.data(), kMean, kStd, y.data());
  return doubles(y);
}
}  // namespace

TEST_CASE_TEMPLATE("input_normalize_cpu: (x/255 - mean) / stddev, per channel", T, float, double,
                   half_t) {
  const std::vector<double> y = normalize<T>(kX, 2, 2);
  // image 0, exact: pixels (0,0,0), (255,255,255), (0,255,0), (255,0,255)
  require_equal(std::vector<double>(y.begin(), y.begin() + 12),
                {-2, -0.5, 0, 2, 1.5, 0.5, -2, 1.5, 0, 2, -0.5, 0.5});
  // image 1: v = 0.2 gives (-1.2, -0.1, 0.1); v = 0.4 gives (-0.4, 0.3, 0.2)
  //   pixels (51,51,51), (102,102,102), (51,102,51), (102,51,102)
  const double tol = sizeof(T) == 2 ? 1e-3 : sizeof(T) == 4 ? 1e-6 : 1e-14;
  require_near(std::vector<double>(y.begin() + 12, y.end()),
               {-1.2, -0.1, 0.1, -0.4, 0.3, 0.2, -1.2, 0.3, 0.1, -0.4, -0.1, 0.2}, tol);
}

TEST_CASE("input_normalize_cpu f16: the fp32 result rounded to half, for every byte value") {
  std::vector<uint8_t> x(256 * 3);
  for (size_t i = 0; i < x.size(); i++) x[i] = uint8_t(i / 3);  // pixel i holds value i
  std::vector<float> yf(x.size());
  std::vector<half_t> yh(x.size());
  input_normalize_cpu<float>(1, 16, 3, x.data(), kMean, kStd, yf.data());
  input_normalize_cpu<half_t>(1, 16, 3, x.data(), kMean, kStd, yh.data());
  for (size_t i = 0; i < x.size(); i++) {
    INFO("element " << i << ": f16 " << float(yh[i]) << ", f32 " << yf[i]);
    REQUIRE(yh[i].bits == half_t(yf[i]).bits);
  }
  // and the f32 result is the formula in fp32, divisions and all
  REQUIRE(yf[3 * 51] == (51.0f / 255.0f - 0.5f) / 0.25f);
}

TEST_CASE("input_normalize_cpu refuses wrong mean/stddev sizes and stddev <= 0, clearly") {
  std::vector<float> y(kX.size());
  const auto run = [&](const std::vector<float>& mean, const std::vector<float>& stddev) {
    input_normalize_cpu<float>(2, 2, 3, kX.data(), mean, stddev, y.data());
  };
  run(kMean, kStd);  // the right sizes pass
  REQUIRE_ERROR(run({0.5f}, kStd), "mean has 1 values but the images have 3 channels");
  REQUIRE_ERROR(run(kMean, {0.1f, 0.2f, 0.3f, 0.4f}),
                "std has 4 values but the images have 3 channels");
  REQUIRE_ERROR(run(kMean, {0.25f, 0.0f, 2.0f}), "std[1] = 0 must be a finite number > 0");
  REQUIRE_ERROR(run(kMean, {0.25f, 0.5f, -2.0f}), "std[2] = -2 must be a finite number > 0");
  REQUIRE_ERROR(run(kMean, {NAN, 0.5f, 2.0f}), "std[0] = nan must be a finite number > 0");
  REQUIRE_ERROR(run({0.5f, INFINITY, 0.0f}, kStd), "mean[1] = inf is not finite");
  REQUIRE_ERROR(input_normalize_cpu<float>(2, 0, 3, kX.data(), kMean, kStd, y.data()),
                "sizes must be positive, got (N,S,S,C) = (2,0,0,3)");
  // the check alone, as the trainer calls it when it reads its options
  input_check_norm(1, {0.286f}, {0.353f});
  REQUIRE_ERROR(input_check_norm(1, {}, {0.353f}),
                "mean has 0 values but the images have 1 channel");
}

// --- crop and flip ---

namespace {
// Two 3x4 images of two channels: byte (n, h, w, c) = 120 n + 10 (4 h + w) + c, so the value
// names the pixel it came from.
std::vector<uint8_t> numbered_images() {
  std::vector<uint8_t> x;
  for (int n = 0; n < 2; n++)
    for (int p = 0; p < 12; p++)
      for (int c = 0; c < 2; c++) x.push_back(uint8_t(120 * n + 10 * p + c));
  return x;
}

// The formula on byte v with mean 0.5 and stddev 0.25 (both channels), in acc_t<T>.
template <typename T> double want(int v) {
  using A = acc_t<T>;
  return double(T((A(v) / A(255) - A(0.5)) / A(0.25)));
}
}  // namespace

TEST_CASE_TEMPLATE("input_normalize_crop_cpu: each sample's window and flip, by hand", T, float,
                   double, half_t) {
  const std::vector<uint8_t> x = numbered_images();  // (2,3,4,2)
  // sample 0: the 2x2 window at row 1, column 2: pixels (1,2) (1,3) (2,2) (2,3) = 6 7 10 11
  // sample 1: at row 0, column 1, flipped: columns 2 then 1: pixels (0,2) (0,1) (1,2) (1,1)
  //           = 2 1 6 5, plus 120 for image 1
  const InputCrop crop[2] = {{1, 2, 0}, {0, 1, 1}};
  std::vector<T> y(2 * 2 * 2 * 2, T(-999.0f));
  input_normalize_crop_cpu<T>(2, 3, 4, 2, 2, x.data(), crop, {0.5f, 0.5f}, {0.25f, 0.25f},
                              y.data());
  std::vector<double> expect;
  for (int p : {6, 7, 10, 11, 12 + 2, 12 + 1, 12 + 6, 12 + 5})
    for (int c = 0; c < 2; c++) expect.push_back(want<T>(10 * (p % 12) + 120 * (p / 12) + c));
  require_equal(doubles(y), expect);
}

TEST_CASE("input_normalize_crop_cpu: a flip of the whole image mirrors each row") {
  // one 3x3 single-channel image, the whole of it (S = 3) flipped
  const std::vector<uint8_t> x = {0, 51, 102, 153, 204, 255, 1, 2, 3};
  const InputCrop flip[1] = {{0, 0, 1}};
  std::vector<float> y(9), want_y(9);
  input_normalize_crop_cpu<float>(1, 3, 3, 1, 3, x.data(), flip, {0.0f}, {1.0f}, y.data());
  const std::vector<uint8_t> mirrored = {102, 51, 0, 255, 204, 153, 3, 2, 1};
  input_normalize_cpu<float>(1, 3, 1, mirrored.data(), {0.0f}, {1.0f}, want_y.data());
  require_equal(doubles(y), doubles(want_y));
}

TEST_CASE("input_normalize_crop_cpu: mirror flips every sample once more") {
  // the 3x3 image of the case above; sample 0 unflipped, sample 1 flipped: mirrored, sample 0
  // comes out flipped and sample 1 as it is
  std::vector<uint8_t> x = {0, 51, 102, 153, 204, 255, 1, 2, 3};
  x.insert(x.end(), x.begin(), x.end());  // (2,3,3,1): the same image twice
  const InputCrop crops[2] = {{0, 0, 0}, {0, 0, 1}};
  std::vector<float> y(18), plain(9), flipped(9);
  input_normalize_crop_cpu<float>(2, 3, 3, 1, 3, x.data(), crops, {0.0f}, {1.0f}, y.data(),
                                  /*mirror=*/true);
  const InputCrop none[1] = {{0, 0, 0}}, flip[1] = {{0, 0, 1}};
  input_normalize_crop_cpu<float>(1, 3, 3, 1, 3, x.data(), none, {0.0f}, {1.0f}, plain.data());
  input_normalize_crop_cpu<float>(1, 3, 3, 1, 3, x.data(), flip, {0.0f}, {1.0f}, flipped.data());
  require_equal(doubles(std::vector<float>(y.begin(), y.begin() + 9)), doubles(flipped));
  require_equal(doubles(std::vector<float>(y.begin() + 9, y.end())), doubles(plain));
  // and without crops (null): every sample mirrored
  std::vector<float> z(9);
  input_normalize_crop_cpu<float>(1, 3, 3, 1, 3, x.data(), nullptr, {0.0f}, {1.0f}, z.data(),
                                  true);
  require_equal(doubles(z), doubles(flipped));
}

TEST_CASE("input_normalize_cpu equals input_normalize_crop_cpu with zero crops") {
  const int N = 3, S = 7, C = 3;
  std::vector<uint8_t> x(size_t(N) * S * S * C);
  for (size_t i = 0; i < x.size(); i++) x[i] = uint8_t(i * 37 + 11);
  const std::vector<InputCrop> zero(N);
  std::vector<half_t> a(x.size()), b(x.size());
  input_normalize_cpu<half_t>(N, S, C, x.data(), kMean, kStd, a.data());
  input_normalize_crop_cpu<half_t>(N, S, S, C, S, x.data(), zero.data(), kMean, kStd, b.data());
  for (size_t i = 0; i < x.size(); i++) REQUIRE(a[i].bits == b[i].bits);
}

TEST_CASE("input_normalize_crop_cpu refuses a window outside the image, naming the sample") {
  const std::vector<uint8_t> x = numbered_images();  // (2,3,4,2)
  std::vector<float> y(2 * 2 * 2 * 2);
  const auto run = [&](InputCrop second, int S = 2) {
    const InputCrop crop[2] = {{0, 0, 0}, second};
    input_normalize_crop_cpu<float>(2, 3, 4, 2, S, x.data(), crop, {0.5f, 0.5f},
                                    {0.25f, 0.25f}, y.data());
  };
  run({1, 2, 1});  // the last window that fits
  REQUIRE_ERROR(run({2, 0, 0}),
                "sample 1: the 2x2 window at (top 2, left 0) does not lie inside the 3x4 image");
  REQUIRE_ERROR(run({0, 3, 0}), "sample 1: the 2x2 window at (top 0, left 3)");
  REQUIRE_ERROR(run({-1, 0, 0}), "sample 1: the 2x2 window at (top -1, left 0)");
  REQUIRE_ERROR(run({0, -5, 1}), "sample 1: the 2x2 window at (top 0, left -5)");
  REQUIRE_ERROR(run({0, 2147483647, 0}), "does not lie inside the 3x4 image");
  REQUIRE_ERROR(run({0, 0, 0}, 4), "the 4x4 window is larger than the 3x4 images");
  REQUIRE_ERROR(input_normalize_crop_cpu<float>(2, 3, 0, 2, 2, x.data(), nullptr, {0.5f, 0.5f},
                                                {0.25f, 0.25f}, y.data()),
                "sizes must be positive, got (N,Hin,Win,C) = (2,3,0,2) and S = 2");
  // the check alone, as a GPU caller runs it on the host before copying the crops over
  const InputCrop ok[2] = {{0, 0, 0}, {1, 2, 1}};
  input_check_crops(2, 3, 4, 2, ok);
  const InputCrop bad[2] = {{0, 0, 0}, {1, 3, 0}};
  REQUIRE_ERROR(input_check_crops(2, 3, 4, 2, bad), "sample 1");
}
