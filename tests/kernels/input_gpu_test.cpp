// input_normalize_gpu against input_normalize_crop_cpu: the same bits, for random images,
// random crop windows and flips, short rows (several samples a block) and long rows (several
// elements a thread), with and without crops, and outputs near the fp16 limits.
#include <cmath>
#include <vector>

#include "kernels/input.h"
#include "kernels/rng.h"
#include "tests/kernels/gpu_compare.h"
#include "tests/test_util.h"

using namespace cutrain;
using cutrain_test::require_same_bits;
using cutrain_test::upload;
using cutrain_test::download;

namespace {
struct Case {
  int N, Hin, Win, C, S;
  bool crop;
};

// Runs both on random bytes and random windows and demands identical outputs. The output is
// poisoned (0xff bytes: NaN in f32 and f16) so an element the kernel skips cannot pass.
template <typename T>
void compare(const Case& k, const std::vector<float>& mean, const std::vector<float>& stddev,
             uint64_t seed) {
  INFO("N " << k.N << ", " << k.Hin << "x" << k.Win << "x" << k.C << " -> S " << k.S
            << (k.crop ? ", random crops and flips" : ", no crop"));
  std::vector<uint8_t> x(size_t(k.N) * k.Hin * k.Win * k.C);
  for (size_t i = 0; i < x.size(); i++) x[i] = uint8_t(rng_u64(seed, i));
  std::vector<InputCrop> crop(size_t(k.N));
  for (int n = 0; n < k.N; n++) {
    crop[size_t(n)].top = int(rng_u64(seed, uint64_t(n), 1) % uint64_t(k.Hin - k.S + 1));
    crop[size_t(n)].left = int(rng_u64(seed, uint64_t(n), 2) % uint64_t(k.Win - k.S + 1));
    crop[size_t(n)].flip = int(rng_u64(seed, uint64_t(n), 3) & 1);
  }
  // both edges and a flip must be exercised: force them on the first samples
  if (k.crop && k.N >= 2) {
    crop[0] = {k.Hin - k.S, k.Win - k.S, 1};
    crop[1] = {0, 0, 0};
  }
  for (bool mirror : {false, true}) {
  INFO((mirror ? "mirrored" : "as cropped"));
  std::vector<T> want(size_t(k.N) * k.S * k.S * k.C);
  input_normalize_crop_cpu<T>(k.N, k.Hin, k.Win, k.C, k.S, x.data(),
                              k.crop ? crop.data() : nullptr, mean, stddev, want.data(), mirror);

  Stream stream;
  DeviceBuffer dx = upload(x), dcrop = upload(crop), dmean = upload(mean),
               dstd = upload(stddev);
  DeviceBuffer dy(want.size() * sizeof(T));
  memset_async(dy.data(), 0xff, dy.bytes(), stream.get());
  input_normalize_gpu<T>(k.N, k.Hin, k.Win, k.C, k.S, static_cast<const uint8_t*>(dx.data()),
                         k.crop ? static_cast<const InputCrop*>(dcrop.data()) : nullptr,
                         static_cast<const float*>(dmean.data()),
                         static_cast<const float*>(dstd.data()), static_cast<T*>(dy.data()),
                         stream.get(), mirror);
  stream.synchronize();
  require_same_bits(download<T>(dy, want.size()), want, "y");
  }
}
}  // namespace

TEST_CASE_TEMPLATE("input [gpu]: equals input_normalize_crop_cpu bit for bit", T, float, half_t) {
  REQUIRE_GPU();
  const std::vector<float> mean3 = {0.485f, 0.456f, 0.406f}, std3 = {0.229f, 0.224f, 0.225f};
  const std::vector<float> mean1 = {0.286f}, std1 = {0.353f};
  // rows of 87 elements: 2 samples a block, odd sizes everywhere
  compare<T>({5, 37, 41, 3, 29, true}, mean3, std3, 1);
  // rows of 7: 36 samples a block, more than N (the block's spare threads leave)
  compare<T>({3, 9, 8, 1, 7, true}, mean1, std1, 2);
  // rows of 300: one sample a block, two elements a thread
  compare<T>({4, 120, 131, 3, 100, true}, mean3, std3, 3);
  // exactly 256 elements a row; and many samples, so blocks loop over several of them
  compare<T>({67, 90, 90, 1, 64, true}, mean1, std1, 4);
  compare<T>({301, 28, 28, 1, 28, true}, mean1, std1, 5);
  // no crop (null), the images already the network's size
  compare<T>({2, 16, 16, 3, 16, false}, mean3, std3, 6);
}

TEST_CASE("input [gpu]: outputs near the fp16 limits are the CPU's bits, and finite") {
  REQUIRE_GPU();
  // stddev 1/60000: |y| up to 60000, just under fp16's 65504
  compare<half_t>({3, 17, 19, 1, 15, true}, {0.0f}, {1.0f / 60000}, 7);
  // stddev 1e7: |y| down to ~2e-10 .. 5e-8, fp16 subnormals (2^-24 = 6e-8) and zeros
  compare<half_t>({3, 17, 19, 1, 15, true}, {0.5f}, {1e7f}, 8);
  std::vector<uint8_t> x(256);
  for (int v = 0; v < 256; v++) x[size_t(v)] = uint8_t(v);
  std::vector<half_t> y(256);
  input_normalize_cpu<half_t>(1, 16, 1, x.data(), {0.0f}, {1.0f / 60000}, y.data());
  for (const half_t& h : y) REQUIRE(std::isfinite(float(h)));
}

TEST_CASE("input [gpu]: bad sizes are refused before any launch") {
  REQUIRE_GPU();
  const std::vector<float> m(17, 0.5f);
  DeviceBuffer d(64);
  const auto* p = static_cast<const float*>(d.data());
  REQUIRE_ERROR(input_normalize_gpu<float>(1, 4, 4, 17, 4, static_cast<const uint8_t*>(d.data()),
                                           nullptr, p, p, static_cast<float*>(d.data()),
                                           nullptr),
                "at most 16 channels, got 17");
  REQUIRE_ERROR(input_normalize_gpu<float>(1, 4, 4, 1, 5, static_cast<const uint8_t*>(d.data()),
                                           nullptr, p, p, static_cast<float*>(d.data()),
                                           nullptr),
                "the 5x5 window is larger than the 4x4 images");
}
