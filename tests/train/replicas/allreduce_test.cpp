// The ring all-reduce alone (train/replicas/ring.h), on real threads: against a plain sum in double
// for R = 1..5 and sizes not divisible by R (sizes below R included), the same bits on every
// replica and in every run, back-to-back collectives of different sizes, fp16, and abort.
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "kernels/ring_reduce.h"
#include "tests/test_util.h"
#include "train/replicas/ring.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {

// Runs f(r) on R threads at once and joins them.
template <typename F> void on_threads(int R, F&& f) {
  std::vector<std::thread> t;
  for (int r = 0; r < R; r++) t.emplace_back([&f, r] { f(r); });
  for (auto& x : t) x.join();
}

// Rank r's input: n values in [-1, 1), a function of (r, n, salt).
std::vector<float> input(int r, int64_t n, uint64_t salt) {
  if (n == 0) return {};
  return uniform({int(n)}, DType::f32, 1000 * salt + 17 * uint64_t(r) + uint64_t(n)).to_floats();
}

}  // namespace

TEST_CASE("ring_reduce_cpu: dst = (dst + src) * scale, in fp32 for fp16") {
  std::vector<float> d = {1, 2, 3}, s = {0.5f, -2, 1e-3f};
  ring_reduce_cpu<float>(3, d.data(), s.data(), 1.0);
  require_equal(doubles(d), {1.5, 0, double(3.0f + 1e-3f)});
  ring_reduce_cpu<float>(3, d.data(), s.data(), 0.5);
  require_near(doubles(d), {1.0, -1.0, (double(3.0f + 1e-3f) + 1e-3) / 2}, 1e-6);
  // In fp16, 2048 + 1 would round to 2048 before the halving; in fp32 it is 2049, halved
  // 1024.5, a tie between the fp16 neighbours 1024 and 1025: nearest even, 1024. One rounding.
  std::vector<half_t> hd = {half_t(2048.0f)}, hs = {half_t(1.0f)};
  ring_reduce_cpu<half_t>(1, hd.data(), hs.data(), 0.5);
  REQUIRE(float(hd[0]) == 1024.0f);
  hd[0] = half_t(2048.0f), hs[0] = half_t(3.0f);  // 2051 / 2 = 1025.5: a tie, to even 1026
  ring_reduce_cpu<half_t>(1, hd.data(), hs.data(), 0.5);
  REQUIRE(float(hd[0]) == 1026.0f);
}

TEST_CASE("ring: chunks cover [0, n) in order, sizes within one, empty ones when n < R") {
  for (int R = 1; R <= 5; R++)
    for (int64_t n : {0, 1, 2, 3, 4, 5, 7, 64, 1001}) {
      int64_t at = 0, lo = n, hi = 0;
      for (int c = 0; c < R; c++) {
        const auto [b, e] = ring_chunk(n, R, c);
        REQUIRE(b == at);
        REQUIRE(e >= b);
        lo = std::min(lo, e - b), hi = std::max(hi, e - b);
        at = e;
      }
      REQUIRE(at == n);
      REQUIRE(hi - lo <= 1);
    }
}

TEST_CASE("ring all-reduce: the average of R replicas, the same bits on each, every run") {
  for (int R = 1; R <= 5; R++) {
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(R - 1), int64_t(R + 1), int64_t(7),
                      int64_t(1000), int64_t(4099)}) {
      INFO("R = " << R << ", n = " << n);
      Ring ring(R);
      std::vector<std::vector<float>> buf(static_cast<size_t>(R)), again(static_cast<size_t>(R));
      for (int r = 0; r < R; r++) buf[size_t(r)] = again[size_t(r)] = input(r, n, 1);
      on_threads(R, [&](int r) { ring.all_reduce(r, buf[size_t(r)].data(), n, DType::f32, true); });
      // The plain sum in double, divided by R; fp32 sums of R values in [-1, 1) are within
      // R * 2^-24 * R of it (R - 1 additions, each rounding at most half an ulp of <= R).
      for (int64_t i = 0; i < n; i++) {
        double want = 0;
        for (int r = 0; r < R; r++) want += double(again[size_t(r)][size_t(i)]);
        want /= R;
        REQUIRE(std::abs(double(buf[0][size_t(i)]) - want) <= 1e-6 * R);
      }
      for (int r = 1; r < R; r++)
        REQUIRE(std::memcmp(buf[size_t(r)].data(), buf[0].data(), size_t(n) * 4) == 0);
      // A second run of the same collective: the same bits (the order of the sums is fixed).
      on_threads(R, [&](int r) {
        ring.all_reduce(r, again[size_t(r)].data(), n, DType::f32, true);
      });
      REQUIRE(std::memcmp(again[0].data(), buf[0].data(), size_t(n) * 4) == 0);
    }
  }
}

TEST_CASE("ring all-reduce: many collectives of different sizes back to back, sum and any") {
  // Exercises the flow control: fast ranks run ahead into the next collective while slow ones
  // still read the last one. Rank r sleeps a little in some rounds to shuffle the timing.
  const int R = 4, rounds = 40;
  Ring ring(R);
  std::vector<std::vector<std::vector<float>>> bufs(static_cast<size_t>(R));
  for (int r = 0; r < R; r++)
    for (int k = 0; k < rounds; k++) bufs[size_t(r)].push_back(input(r, 1 + (k * 37) % 300, uint64_t(k)));
  std::vector<std::vector<char>> flags(static_cast<size_t>(R), std::vector<char>(static_cast<size_t>(rounds)));
  on_threads(R, [&](int r) {
    for (int k = 0; k < rounds; k++) {
      if ((k + r) % 7 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
      auto& b = bufs[size_t(r)][size_t(k)];
      ring.all_reduce(r, b.data(), int64_t(b.size()), DType::f32, false);
      flags[size_t(r)][size_t(k)] = ring.any(r, r == k % R && k % 3 == 0);
    }
  });
  for (int k = 0; k < rounds; k++) {
    INFO("round " << k);
    const auto& b0 = bufs[0][size_t(k)];
    double worst = 0;
    for (size_t i = 0; i < b0.size(); i++) {
      double want = 0;
      for (int r = 0; r < R; r++) want += double(input(r, int64_t(b0.size()), uint64_t(k))[i]);
      worst = std::max(worst, std::abs(double(b0[i]) - want));
    }
    REQUIRE(worst <= 4e-6 * R);  // a sum this time: no 1/R
    for (int r = 1; r < R; r++) {
      REQUIRE(std::memcmp(bufs[size_t(r)][size_t(k)].data(), b0.data(), b0.size() * 4) == 0);
      REQUIRE(flags[size_t(r)][size_t(k)] == flags[0][size_t(k)]);
    }
    REQUIRE(bool(flags[0][size_t(k)]) == (k % 3 == 0));
  }
}

TEST_CASE("ring all-reduce: fp16 buffers are added in fp32, the same bits everywhere") {
  const int R = 3;
  const int64_t n = 1001;
  Ring ring(R);
  std::vector<Tensor> t;
  for (int r = 0; r < R; r++) t.push_back(uniform({int(n)}, DType::f16, 50 + uint64_t(r)));
  std::vector<std::vector<double>> in;
  for (const Tensor& x : t) in.push_back(x.to_doubles());
  on_threads(R, [&](int r) { ring.all_reduce(r, t[size_t(r)].raw(), n, DType::f16, true); });
  std::vector<double> want(static_cast<size_t>(n));
  for (size_t i = 0; i < size_t(n); i++) want[i] = (in[0][i] + in[1][i] + in[2][i]) / R;
  // R - 1 = 2 fp16 roundings of the sum (|sum| < 3: half an ulp 2^-10 each), one of the
  // average: within 2e-3 of the exact average.
  require_close(t[0], want, 2e-3);
  for (int r = 1; r < R; r++) REQUIRE(std::memcmp(t[size_t(r)].raw(), t[0].raw(), t[0].bytes()) == 0);
}

TEST_CASE("ring: abort wakes the replicas waiting for a peer that failed") {
  const int R = 3;
  Ring ring(R);
  std::vector<float> a(10, 1.0f), b(10, 1.0f);
  std::atomic<int> threw{0};
  std::thread t0([&] {
    try {
      ring.all_reduce(0, a.data(), 10, DType::f32, true);
    } catch (const Error& e) {
      if (std::string(e.what()).find("replica 2 failed: boom") != std::string::npos) threw++;
    }
  });
  std::thread t1([&] {
    try {
      ring.all_reduce(1, b.data(), 10, DType::f32, true);
    } catch (const Error& e) {
      if (std::string(e.what()).find("replica 2 failed: boom") != std::string::npos) threw++;
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // rank 2 never comes
  ring.abort("replica 2 failed: boom");
  t0.join(), t1.join();
  REQUIRE(threw == 2);
  REQUIRE_ERROR(ring.all_reduce(2, a.data(), 10, DType::f32, true), "aborted");
}
