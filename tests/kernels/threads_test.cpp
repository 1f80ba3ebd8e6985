// Every CPU kernel that runs on OpenMP threads gives the same bytes on 1 thread and on 4.
//
// The trainer promises reproducible runs and exact resume whatever the machine's core count,
// so kernels/parallel.h allows only loops where each thread owns whole outputs and sums them
// in the 1-thread order. A reduction split over threads (partial sums added at the end) would
// change the rounding, and these random fp32/fp16 inputs would show it in the last bits.
// Sizes are odd (tails of every split) and large enough for worth_threads() to say yes.
#include <omp.h>

#include <cstring>
#include <functional>
#include <vector>

#include "kernels/batchnorm.h"
#include "kernels/conv2d.h"
#include "kernels/elementwise.h"
#include "kernels/input.h"
#include "kernels/linear.h"
#include "kernels/parallel.h"
#include "kernels/pool.h"
#include "kernels/rng.h"
#include "tests/test_util.h"

using namespace cutrain;

namespace {

template <typename T> std::vector<T> random_values(size_t n, uint64_t seed) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; i++) v[i] = T(rng_uniform(seed, i) * 4 - 2);
  return v;
}

// Raw bytes of a buffer, for comparing results of any type.
struct Bytes {
  void* data;
  size_t size;
};
template <typename V> Bytes bytes(V& v) { return {v.data(), v.size() * sizeof(v[0])}; }

// Runs `run` on 1 thread and on 4, each time from the same starting contents of `outs` (the
// backward kernels accumulate into them), and requires the same bytes in every output.
void require_same_on_1_and_4_threads(const char* what, const std::vector<Bytes>& outs,
                                     const std::function<void()>& run) {
  INFO(what);
  std::vector<std::vector<unsigned char>> start, one;
  for (const Bytes& b : outs) {
    const auto* p = static_cast<const unsigned char*>(b.data);
    start.emplace_back(p, p + b.size);
  }
  const int saved = omp_get_max_threads();
  omp_set_dynamic(0);  // 4 means 4: the runtime may not hand out fewer
  omp_set_num_threads(1);
  run();
  for (const Bytes& b : outs) {
    const auto* p = static_cast<const unsigned char*>(b.data);
    one.emplace_back(p, p + b.size);
  }
  for (size_t i = 0; i < outs.size(); i++) std::memcpy(outs[i].data, start[i].data(), outs[i].size);
  omp_set_num_threads(4);
  int team = 0;
#pragma omp parallel
  {
#pragma omp single
    team = omp_get_num_threads();
  }
  REQUIRE(team == 4);
  run();
  omp_set_num_threads(saved);
  for (size_t i = 0; i < outs.size(); i++) {
    INFO("output " << i);
    REQUIRE(one[i] != start[i]);  // the kernel wrote something
    REQUIRE(std::memcmp(outs[i].data, one[i].data(), outs[i].size) == 0);
  }
}

}  // namespace

TEST_CASE_TEMPLATE("conv2d CPU: the same bytes on 1 and 4 threads", T, float, half_t) {
  for (const int stride : {1, 2}) {
    Conv2dShape s;
    s.N = 5, s.H = 13, s.W = 11, s.C = 9, s.K = 11, s.R = 3, s.S = 3;
    s.stride_h = s.stride_w = stride, s.pad_h = s.pad_w = 1;
    REQUIRE(worth_threads(s.forward_flops()));
    const size_t nx = size_t(s.N) * s.H * s.W * s.C, nw = size_t(s.K) * s.R * s.S * s.C;
    const size_t ny = size_t(s.N) * s.P() * s.Q() * s.K, K = size_t(s.K);
    const std::vector<T> x = random_values<T>(nx, 1), w = random_values<T>(nw, 2),
                         b = random_values<T>(K, 3), dy = random_values<T>(ny, 4);
    std::vector<T> y(ny), dx = random_values<T>(nx, 5), dw = random_values<T>(nw, 6),
                          db = random_values<T>(K, 7);
    require_same_on_1_and_4_threads("conv2d forward", {bytes(y)}, [&] {
      conv2d_forward_cpu<T>(s, x.data(), w.data(), b.data(), y.data());
    });
    require_same_on_1_and_4_threads("conv2d backward data", {bytes(dx)}, [&] {
      conv2d_backward_data_cpu<T>(s, dy.data(), w.data(), dx.data());
    });
    require_same_on_1_and_4_threads("conv2d backward filter", {bytes(dw), bytes(db)}, [&] {
      conv2d_backward_filter_cpu<T>(s, x.data(), dy.data(), dw.data(), db.data());
    });
  }
}

TEST_CASE_TEMPLATE("linear CPU: the same bytes on 1 and 4 threads", T, float, half_t) {
  const int N = 67, C = 63, K = 65;
  REQUIRE(worth_threads(int64_t(N) * C * K));
  const size_t nx = size_t(N) * C, nw = size_t(K) * C, ny = size_t(N) * K;
  const std::vector<T> x = random_values<T>(nx, 1), w = random_values<T>(nw, 2),
                       b = random_values<T>(size_t(K), 3), dy = random_values<T>(ny, 4);
  std::vector<T> y(ny), dx = random_values<T>(nx, 5), dw = random_values<T>(nw, 6),
                 db = random_values<T>(size_t(K), 7);
  require_same_on_1_and_4_threads("linear forward", {bytes(y)}, [&] {
    linear_forward_cpu<T>(N, C, K, x.data(), w.data(), b.data(), y.data());
  });
  require_same_on_1_and_4_threads("linear backward", {bytes(dx), bytes(dw), bytes(db)}, [&] {
    linear_backward_cpu<T>(N, C, K, x.data(), w.data(), dy.data(), dx.data(), dw.data(),
                           db.data());
  });
}

TEST_CASE_TEMPLATE("batchnorm CPU: the same bytes on 1 and 4 threads", T, float, half_t) {
  using A = acc_t<T>;
  const int64_t M = 5 * 41 * 37;  // N*H*W
  const int C = 37;               // two whole blocks of 16 channels and a tail of 5
  REQUIRE(worth_threads(M * C));
  const size_t n = size_t(M) * C, Cs = size_t(C);
  const std::vector<T> x = random_values<T>(n, 1), dy = random_values<T>(n, 2);
  const std::vector<A> gamma = random_values<A>(Cs, 3), beta = random_values<A>(Cs, 4);
  std::vector<A> mean(Cs), invstd(Cs), run_mean = random_values<A>(Cs, 5), run_var(Cs, A(1.5f));
  std::vector<A> dgamma = random_values<A>(Cs, 6), dbeta = random_values<A>(Cs, 7);
  std::vector<T> y(n), dx = random_values<T>(n, 8);
  require_same_on_1_and_4_threads(
      "batchnorm forward train", {bytes(y), bytes(mean), bytes(invstd), bytes(run_mean),
                                  bytes(run_var)},
      [&] {
        batchnorm_forward_train_cpu<T>(M, C, x.data(), gamma.data(), beta.data(), 1e-5, 0.1, false,
                                       y.data(), mean.data(), invstd.data(), run_mean.data(),
                                       run_var.data());
      });
  require_same_on_1_and_4_threads("batchnorm forward eval", {bytes(y)}, [&] {
    std::fill(y.begin(), y.end(), T(0.0f));
    batchnorm_forward_eval_cpu<T>(M, C, x.data(), gamma.data(), beta.data(), run_mean.data(),
                                  run_var.data(), 1e-5, false, y.data());
  });
  require_same_on_1_and_4_threads(
      "batchnorm backward train", {bytes(dx), bytes(dgamma), bytes(dbeta)}, [&] {
        batchnorm_backward_train_cpu<T>(M, C, x.data(), nullptr, dy.data(), gamma.data(),
                                        mean.data(), invstd.data(), false, dx.data(), dgamma.data(),
                                        dbeta.data());
      });
  require_same_on_1_and_4_threads(
      "batchnorm backward eval", {bytes(dx), bytes(dgamma), bytes(dbeta)}, [&] {
        batchnorm_backward_eval_cpu<T>(M, C, x.data(), nullptr, dy.data(), gamma.data(),
                                       run_mean.data(), run_var.data(), 1e-5, false, dx.data(),
                                       dgamma.data(), dbeta.data());
      });
}

TEST_CASE_TEMPLATE("pooling CPU: the same bytes on 1 and 4 threads", T, float, half_t) {
  Pool2dShape s;  // overlapping 3x3 windows, stride 2: inputs under two windows sum gradients
  s.N = 9, s.H = 19, s.W = 17, s.C = 37, s.R = 3, s.S = 3;
  s.stride_h = s.stride_w = 2, s.pad_h = s.pad_w = 1;
  REQUIRE(worth_threads(s.output_numel() * s.R * s.S));
  const std::vector<T> x = random_values<T>(size_t(s.input_numel()), 1),
                       dy = random_values<T>(size_t(s.output_numel()), 2);
  std::vector<T> y(size_t(s.output_numel())), dx = random_values<T>(size_t(s.input_numel()), 3);
  require_same_on_1_and_4_threads("maxpool forward", {bytes(y)},
                                  [&] { maxpool2d_forward_cpu<T>(s, x.data(), y.data()); });
  require_same_on_1_and_4_threads("maxpool backward", {bytes(dx)}, [&] {
    maxpool2d_backward_cpu<T>(s, x.data(), dy.data(), dx.data());
  });
  const int N = 7, H = 31, W = 33, C = 37;
  REQUIRE(worth_threads(int64_t(N) * H * W * C));
  const std::vector<T> gx = random_values<T>(size_t(N) * H * W * C, 4),
                       gdy = random_values<T>(size_t(N) * C, 5);
  std::vector<T> gy(size_t(N) * C), gdx = random_values<T>(size_t(N) * H * W * C, 6);
  require_same_on_1_and_4_threads("global avgpool forward", {bytes(gy)}, [&] {
    global_avgpool_forward_cpu<T>(N, H, W, C, gx.data(), gy.data());
  });
  require_same_on_1_and_4_threads("global avgpool backward", {bytes(gdx)}, [&] {
    global_avgpool_backward_cpu<T>(N, H, W, C, gdy.data(), gdx.data());
  });
}

TEST_CASE_TEMPLATE("elementwise CPU: the same bytes on 1 and 4 threads", T, float, half_t) {
  const int64_t n = 300007;
  REQUIRE(worth_threads(n));
  const std::vector<T> a = random_values<T>(size_t(n), 1), b = random_values<T>(size_t(n), 2);
  std::vector<T> y(static_cast<size_t>(n)), dx = random_values<T>(size_t(n), 3);
  require_same_on_1_and_4_threads("relu forward", {bytes(y)},
                                  [&] { relu_forward_cpu<T>(n, a.data(), y.data()); });
  require_same_on_1_and_4_threads("relu backward", {bytes(dx)},
                                  [&] { relu_backward_cpu<T>(n, a.data(), b.data(), dx.data()); });
  require_same_on_1_and_4_threads("add", {bytes(y)},
                                  [&] { add_forward_cpu<T>(n, a.data(), b.data(), y.data()); });
  require_same_on_1_and_4_threads("accumulate", {bytes(dx)},
                                  [&] { accumulate_cpu<T>(n, a.data(), dx.data()); });
}

TEST_CASE_TEMPLATE("input_normalize CPU: the same bytes on 1 and 4 threads", T, float, half_t) {
  const int N = 37, S = 49, C = 3;
  REQUIRE(worth_threads(int64_t(N) * S * S * C));
  std::vector<uint8_t> x(size_t(N) * S * S * C);
  for (size_t i = 0; i < x.size(); i++) x[i] = uint8_t(rng_u64(1, i));
  const std::vector<float> mean = {0.49f, 0.48f, 0.45f}, stddev = {0.25f, 0.24f, 0.26f};
  std::vector<T> y(x.size(), T(0.0f));
  require_same_on_1_and_4_threads("input normalize", {bytes(y)}, [&] {
    input_normalize_cpu<T>(N, S, C, x.data(), mean, stddev, y.data());
  });
}
