// softmax cross-entropy and top-1 GPU kernels against the CPU reference.
//
// Tolerances. The GPU sums a row's K exponentials in another order than the CPU (lanes, then
// a warp tree), and its expf is within 2 ulp where the CPU's is within 1: log S differs by at
// most about (K + 4) 2^-24 (S >= 1, each term <= 1). So:
//   loss: absolute 2 (K + 4) 2^-24 * (1 + the largest |m - z|, which the smoothing term and
//         the label term scale) plus relative 1e-5 for the mean over rows in another order;
//   dlogits: p = exp(z - m - log S) then moves by p * that log S error, so absolute
//         |g| 2 (K + 4) 2^-24 (p <= 1, g = dloss / N); fp16 results also one fp16 ulp (2^-10
//         relative) of the stored value.
// top-1 counts are integers: exact.
// With class weights, a row's loss and gradient are scaled by its label's weight: the bounds
// above times the largest weight.
#include <cmath>
#include <vector>

#include "kernels/softmax_xent.h"
#include "tests/kernels/gpu_compare.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {

struct Case {
  int N, K;
  float smoothing;
};
const Case kCases[] = {{1, 1, 0.0f}, {3, 10, 0.1f}, {37, 1000, 0.0f}, {37, 1000, 0.1f},
                       {513, 7, 0.05f}, {129, 33, 0.0f}};

std::vector<int32_t> random_labels(int N, int K, uint64_t seed) {
  std::vector<int32_t> v(static_cast<size_t>(N));
  for (int n = 0; n < N; n++) v[size_t(n)] = int32_t(rng_u64(seed, uint64_t(n)) % uint64_t(K));
  return v;
}

// The stored gradient dz0 + g (p - q) rounds once more in T: nvcc may fuse it into an fma
// where the CPU rounds twice, so one ulp of the result (fp16's 2^-10, fp32's 2^-23) on top of
// the error of p.
template <typename T> double ulp_rtol() { return std::ldexp(1.0, sizeof(T) == 2 ? -10 : -23); }

// Runs forward, backward (into a prefilled dlogits) and top-1 (onto a count of 5) on the GPU
// and the CPU and compares. `spread`: the largest |m - z| in the logits. `weights`: (K) class
// weights, or empty for none.
template <typename T>
void compare(int N, int K, float smoothing, const std::vector<T>& z,
             const std::vector<int32_t>& labels, float dloss, double spread,
             const std::vector<float>& weights = {}) {
  INFO("N " << N << " K " << K << " smoothing " << smoothing << " dloss " << dloss
            << (weights.empty() ? "" : " weighted"));
  const size_t nz = size_t(N) * size_t(K);
  const std::vector<T> dz0 = random_values<T>(nz, 41, -1, 1);
  const float* w = weights.empty() ? nullptr : weights.data();
  float want_loss = 0;
  std::vector<T> want_dz = dz0;
  softmax_xent_forward_cpu<T>(N, K, z.data(), labels.data(), smoothing, &want_loss, w);
  softmax_xent_backward_cpu<T>(N, K, z.data(), labels.data(), smoothing, dloss, want_dz.data(),
                               w);
  const int64_t want_count = 5 + top1_correct_cpu<T>(N, K, z.data(), labels.data());

  Stream st;
  DeviceBuffer d_z = upload(z), d_labels = upload(labels), d_dz = upload(dz0);
  DeviceBuffer d_dloss = upload(std::vector<float>{dloss});
  DeviceBuffer d_count = upload(std::vector<int64_t>{5});
  DeviceBuffer d_loss = poisoned<float>(1, st.get());
  DeviceBuffer d_w;
  if (w) d_w = upload(weights);
  const float* dw = w ? ptr<float>(d_w) : nullptr;
  softmax_xent_forward_gpu<T>(N, K, ptr<T>(d_z), ptr<int32_t>(d_labels), smoothing,
                              ptr<float>(d_loss), st.get(), dw);
  softmax_xent_backward_gpu<T>(N, K, ptr<T>(d_z), ptr<int32_t>(d_labels), smoothing,
                               ptr<float>(d_dloss), ptr<T>(d_dz), st.get(), dw);
  top1_correct_gpu<T>(N, K, ptr<T>(d_z), ptr<int32_t>(d_labels), ptr<int64_t>(d_count),
                      st.get());
  st.synchronize();
  double w_max = 1;
  for (float x : weights) w_max = std::max(w_max, double(x));
  const double log_s_err = 2 * (K + 4) * std::ldexp(1.0, -24);
  require_close_values(download<float>(d_loss, 1), {want_loss},
                       w_max * log_s_err * (1 + spread), 1e-5);
  const double g = std::fabs(double(dloss) / N);
  require_close_values(download<T>(d_dz, nz), want_dz, w_max * g * log_s_err, ulp_rtol<T>());
  REQUIRE(download<int64_t>(d_count, 1)[0] == want_count);
}

}  // namespace

TEST_CASE_TEMPLATE("softmax_xent [gpu]: loss, gradient and top-1 match the CPU", T, float,
                   half_t) {
  REQUIRE_GPU();
  for (const Case& c : kCases) {
    const std::vector<T> z = random_values<T>(size_t(c.N) * size_t(c.K), 42, -5, 5);
    // dloss 1 in fp32; 1024, a typical loss scale, in fp16.
    compare<T>(c.N, c.K, c.smoothing, z, random_labels(c.N, c.K, 43), sizeof(T) == 2 ? 1024 : 1,
               10);
  }
}

TEST_CASE_TEMPLATE("softmax_xent [gpu]: class weights: loss and gradient match the CPU", T, float,
                   half_t) {
  REQUIRE_GPU();
  for (const Case& c : kCases) {
    const std::vector<T> z = random_values<T>(size_t(c.N) * size_t(c.K), 42, -5, 5);
    // Weights in [0, 4), every third class 0 (a class without training samples).
    std::vector<float> w = random_values<float>(size_t(c.K), 49, 0, 4);
    for (size_t k = 0; k < w.size(); k += 3) w[k] = 0;
    compare<T>(c.N, c.K, c.smoothing, z, random_labels(c.N, c.K, 43), sizeof(T) == 2 ? 1024 : 1,
               10, w);
  }
}

TEST_CASE_TEMPLATE("softmax_xent [gpu]: top-1 ties go to the first largest; NaN as on the CPU",
                   T, float, half_t) {
  REQUIRE_GPU();
  const int N = 301, K = 45;
  // Logits in {0, 1, 2}: most rows have their maximum several times, one at a lane > 0 and
  // one in a later pass of the lanes (k >= 32); labels often sit on a later copy (must not
  // count) or on the first (must count).
  std::vector<T> z(size_t(N) * K);
  for (size_t i = 0; i < z.size(); i++) z[i] = T(float(rng_u64(44, i) % 3));
  for (int n = 0; n < N; n += 7) z[size_t(n) * K] = T(NAN);          // NaN at k = 0: answer 0
  for (int n = 3; n < N; n += 11) z[size_t(n) * K + 40] = T(NAN);    // NaN later: passed over
  std::vector<int32_t> labels(static_cast<size_t>(N));
  for (int n = 0; n < N; n++) {
    const T* row = z.data() + size_t(n) * K;
    int first = 0;  // the first maximum as the CPU finds it, or a random class
    for (int k = 1; k < K; k++)
      if (float(row[k]) > float(row[first])) first = k;
    labels[size_t(n)] = n % 2 ? first : int32_t(rng_u64(45, uint64_t(n)) % K);
  }
  const int64_t cpu = top1_correct_cpu<T>(N, K, z.data(), labels.data());
  REQUIRE(cpu >= N / 2);  // the test does test something
  Stream st;
  DeviceBuffer d_z = upload(z), d_labels = upload(labels);
  DeviceBuffer d_count = upload(std::vector<int64_t>{0});
  top1_correct_gpu<T>(N, K, ptr<T>(d_z), ptr<int32_t>(d_labels), ptr<int64_t>(d_count),
                      st.get());
  st.synchronize();
  REQUIRE(download<int64_t>(d_count, 1)[0] == cpu);
}

// fp16 logits near the top of the range: m - z is in the tens of thousands, exact in fp32, and
// every exp sees a non-positive argument, so the loss is large but finite and matches the CPU.
TEST_CASE("softmax_xent [gpu]: fp16 logits near 60000 give a finite loss") {
  REQUIRE_GPU();
  const int N = 65, K = 10;
  std::vector<half_t> z = random_values<half_t>(size_t(N) * K, 46, -65504, 65504);
  for (size_t i = 0; i < z.size(); i += 3) z[i] = half_t(60000.0f + float(i % 5) * 32.0f);
  const std::vector<int32_t> labels = random_labels(N, K, 47);
  float want = 0;
  softmax_xent_forward_cpu<half_t>(N, K, z.data(), labels.data(), 0.1f, &want);
  REQUIRE(std::isfinite(want));
  compare<half_t>(N, K, 0.1f, z, labels, 1024, 131008);
}

// A label outside [0,K) that got past softmax_xent_check is never used as an index: its row's
// loss is NaN (so the mean is), its row of dlogits gets NaN, it never counts as correct; the
// other rows are untouched by it.
TEST_CASE("softmax_xent [gpu]: a bad label gives NaN, never an out-of-bounds read") {
  REQUIRE_GPU();
  const int N = 5, K = 4;
  const std::vector<float> z = random_values<float>(size_t(N) * K, 48, -2, 2);
  std::vector<int32_t> labels = {0, 1, 2, 3, 0};
  const std::vector<float> dz0(size_t(N) * K, 0.0f);
  std::vector<float> want_dz = dz0;
  softmax_xent_backward_cpu<float>(N, K, z.data(), labels.data(), 0.0f, 1.0f, want_dz.data());
  labels[2] = 1000000;  // row 2: far outside
  labels[4] = -1;       // row 4: negative
  Stream st;
  DeviceBuffer d_z = upload(z), d_labels = upload(labels), d_dz = upload(dz0);
  DeviceBuffer d_dloss = upload(std::vector<float>{1.0f}), d_loss = poisoned<float>(1, st.get());
  DeviceBuffer d_count = upload(std::vector<int64_t>{0});
  softmax_xent_forward_gpu<float>(N, K, ptr<float>(d_z), ptr<int32_t>(d_labels), 0.0f,
                                  ptr<float>(d_loss), st.get());
  softmax_xent_backward_gpu<float>(N, K, ptr<float>(d_z), ptr<int32_t>(d_labels), 0.0f,
                                   ptr<float>(d_dloss), ptr<float>(d_dz), st.get());
  top1_correct_gpu<float>(N, K, ptr<float>(d_z), ptr<int32_t>(d_labels), ptr<int64_t>(d_count),
                          st.get());
  st.synchronize();
  REQUIRE(std::isnan(download<float>(d_loss, 1)[0]));
  const std::vector<float> dz = download<float>(d_dz, size_t(N) * K);
  for (int n = 0; n < N; n++)
    for (int k = 0; k < K; k++) {
      const size_t i = size_t(n) * K + size_t(k);
      INFO("row " << n << " k " << k);
      if (n == 2 || n == 4)
        REQUIRE(std::isnan(dz[i]));
      else
        REQUIRE(std::fabs(dz[i] - want_dz[i]) <= 1e-6);
    }
  int64_t want = 0;  // the good rows' top-1, counted on the CPU
  for (int n : {0, 1, 3}) want += top1_correct_cpu<float>(1, K, z.data() + size_t(n) * K,
                                                          labels.data() + n);
  REQUIRE(download<int64_t>(d_count, 1)[0] == want);
}
