// The constructs sim/rewrite.py turns into host code (sim/tests/rewrite_test.py checks the text
// and that it compiles), run: each gives the result a GPU would.
// Built only by `make SIM=1` (sim/sim.mk); run by `make sim-test`.
#include <cuda_runtime.h>
#include <cutrain_sim.h>
#include <doctest/doctest.h>

#include <vector>

namespace {

template <int Scale> struct Times { static constexpr int value = Scale; };

// y[i] = x[i] * T::value + add
template <class T> __global__ void scale_kernel(int n, const float* x, float* y, float add) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * T::value + add;
}
__global__ void plus_one(int n, const float* x, float* y) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] + 1;
}
__global__ void minus_one(int n, const float* x, float* y) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] - 1;
}

// Each block reverses its 64 values through two shared arrays declared in one line, one
// aligned, and sums them in a third.
__global__ void reverse_kernel(const float* x, float* y) {
  __shared__ alignas(16) float a[64], b[64];
  __shared__ __align__(8) float total[1];
  const int t = threadIdx.x;
  a[t] = x[blockIdx.x * 64 + t];
  if (t == 0) total[0] = 0;
  __syncthreads();
  b[t] = a[63 - t];
  atomicAdd(&total[0], a[t]);
  __syncthreads();
  y[blockIdx.x * 64 + t] = b[t] + 0 * total[0];
}

#define LAUNCH_PLUS(kern, blocks, n, x, y) \
  kern<<<blocks,                           \
         256>>>(n, x, y)

std::vector<float> run(const std::vector<float>& in, void (*launch)(int, const float*, float*)) {
  const int n = int(in.size());
  float *x = nullptr, *y = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&x), n * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&y), n * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMemcpy(x, in.data(), n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  launch(n, x, y);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  std::vector<float> out(size_t(n), 0.0f);
  REQUIRE(cudaMemcpy(out.data(), y, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  REQUIRE(cudaFree(x) == cudaSuccess);
  REQUIRE(cudaFree(y) == cudaSuccess);
  return out;
}

std::vector<float> values(int n) {
  std::vector<float> v(size_t(n), 0.0f);
  for (int i = 0; i < n; i++) v[size_t(i)] = float(i % 13);
  return v;
}

}  // namespace

TEST_CASE("sim: rewrite: launches of templates, through macros, of a chosen or subscripted kernel") {
  cutrain_sim::reset_errors();
  const int n = 300;
  const std::vector<float> x = values(n);
  // A template argument that is itself a template (`>>` at the end of the kernel's name), a
  // comment in the configuration, a shift there.
  std::vector<float> y = run(x, [](int n, const float* x, float* y) {
    scale_kernel<Times<3>><<<(n + 255) >> 8 /* blocks */, 256  // threads
                           >>>(n, x, y, 0.5f);
  });
  for (int i = 0; i < n; i++) REQUIRE(y[size_t(i)] == x[size_t(i)] * 3 + 0.5f);
  // Through a macro spread over lines.
  y = run(x, [](int n, const float* x, float* y) { LAUNCH_PLUS(plus_one, (n + 255) / 256, n, x, y); });
  for (int i = 0; i < n; i++) REQUIRE(y[size_t(i)] == x[size_t(i)] + 1);
  // Chosen by a condition, and from a table.
  static bool minus;
  for (const bool m : {false, true}) {
    minus = m;
    y = run(x, [](int n, const float* x, float* y) {
      (minus ? minus_one : plus_one)<<<(n + 255) / 256, 256>>>(n, x, y);
    });
    for (int i = 0; i < n; i++) REQUIRE(y[size_t(i)] == x[size_t(i)] + (m ? -1.0f : 1.0f));
  }
  y = run(x, [](int n, const float* x, float* y) {
    void (*table[2])(int, const float*, float*) = {plus_one, minus_one};
    const int which = 1;
    table[which]<<<(n + 255) / 256, 256>>>(n, x, y);
  });
  for (int i = 0; i < n; i++) REQUIRE(y[size_t(i)] == x[size_t(i)] - 1);
  REQUIRE(cutrain_sim::last_report().empty());
}

TEST_CASE("sim: rewrite: several __shared__ declarators in one line, aligned") {
  cutrain_sim::reset_errors();
  const int blocks = 3, n = 64 * blocks;
  const std::vector<float> x = values(n);
  const std::vector<float> y =
      run(x, [](int, const float* x, float* y) { reverse_kernel<<<3, 64>>>(x, y); });
  for (int b = 0; b < blocks; b++)
    for (int t = 0; t < 64; t++) REQUIRE(y[size_t(b * 64 + t)] == x[size_t(b * 64 + 63 - t)]);
  REQUIRE(cutrain_sim::last_report().empty());
}
