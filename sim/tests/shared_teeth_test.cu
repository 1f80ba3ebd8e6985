// The simulator's teeth for shared memory per variable (sim/README.md): each __shared__
// variable, and the launch's dynamic shared memory, has bounds of its own, so an overrun of one
// is reported instead of writing into the next; an extern __shared__ array used by a launch that
// forgot its dynamic size is reported too. Each is caught under 16 seeds, the correct kernel
// passing beside it. And a function-scope `static __shared__` is per block, as on a GPU.
// Built only by `make SIM=1` (sim/sim.mk); run by `make sim-test`.
#include <cuda_runtime.h>
#include <cutrain_sim.h>
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "sim/tests/teeth.h"

using namespace cutrain_sim_teeth;

namespace {

// p[i] = v, out of the compiler's sight (it may drop a store it can prove past an array's end).
__device__ __noinline__ void store(float* p, int i, float v) { p[i] = v; }

// Two static arrays of 32 floats; a block of 32 + over threads: thread 32 on writes past a's
// end (b's bytes, or the padding before them, on a GPU).
__global__ void two_statics_kernel(float* y, int over) {
  __shared__ float a[32];
  __shared__ float b[32];
  const int t = threadIdx.x;
  if (t < 32) b[t] = 1;
  if (t < 32 + over) store(a, t, 2);
  __syncthreads();
  if (t < 32) y[t] = b[t] + a[t];
}

// Dynamic shared memory of `n` floats, with a static array beside it.
__global__ void dynamic_kernel(float* y, int n) {
  extern __shared__ float dyn[];
  __shared__ float beside[32];
  const int t = threadIdx.x;
  beside[t] = 3;
  if (t < n) dyn[t] = float(t);
  __syncthreads();
  y[t] = beside[t] + (t < n ? dyn[n - 1 - t] : 0);
}

// Each block sums its threads' indices in a function-scope static __shared__ counter.
__global__ void static_shared_kernel(int* sums) {
  static __shared__ int s;
  if (threadIdx.x == 0) s = 0;
  __syncthreads();
  atomicAdd(&s, int(threadIdx.x));
  __syncthreads();
  if (threadIdx.x == 0) sums[blockIdx.x] = s;
}

}  // namespace

TEST_CASE("sim teeth: a write past one __shared__ array is caught, not written into the next") {
  float* y = device_array<float>(64);
  under_16_seeds([&] {
    two_statics_kernel<<<1, 32>>>(y, 0);
    REQUIRE(finish().empty());
    std::vector<float> got(32);
    REQUIRE(cudaMemcpy(got.data(), y, 32 * sizeof(float), cudaMemcpyDeviceToHost) ==
            cudaSuccess);
    REQUIRE(got == std::vector<float>(32, 3.0f));
    two_statics_kernel<<<1, 33>>>(y, 1);  // thread 32 writes a[32]
    const std::string report = finish();
    INFO(report);
    REQUIRE(report.find("invalid __shared__ write") != std::string::npos);
    REQUIRE(report.find("thread (32,0,0)") != std::string::npos);
    REQUIRE(report.find("shared_teeth_test.cu:") != std::string::npos);
    REQUIRE(report.find("start 0 bytes past the end of __shared__ sim/tests/shared_teeth_test.cu:") !=
            std::string::npos);
    REQUIRE(report.find(" a (128 bytes)") != std::string::npos);
  });
  REQUIRE(cudaFree(y) == cudaSuccess);
}

TEST_CASE("sim teeth: dynamic shared memory has the launch's size: an overrun, or none given") {
  float* y = device_array<float>(32);
  under_16_seeds([&] {
    dynamic_kernel<<<1, 32, 32 * sizeof(float)>>>(y, 32);
    REQUIRE(finish().empty());
    std::vector<float> got(32);
    REQUIRE(cudaMemcpy(got.data(), y, 32 * sizeof(float), cudaMemcpyDeviceToHost) ==
            cudaSuccess);
    for (int t = 0; t < 32; t++) REQUIRE(got[size_t(t)] == 3.0f + float(31 - t));
    // 16 floats given, 32 used: thread 16 on writes past the end.
    dynamic_kernel<<<1, 32, 16 * sizeof(float)>>>(y, 32);
    std::string report = finish();
    {
      INFO(report);
      REQUIRE(report.find("invalid __shared__ write") != std::string::npos);
      REQUIRE(report.find("of the dynamic shared memory (64 bytes: the launch's third "
                          "argument) run past its end by ") != std::string::npos);
    }
    cutrain_sim::reset_errors();
    // The size forgotten: no dynamic shared memory at all.
    dynamic_kernel<<<1, 32>>>(y, 32);
    report = finish();
    INFO(report);
    REQUIRE(report.find("of the dynamic shared memory (0 bytes: the launch's third argument) "
                        "run past its end by") != std::string::npos);
  });
  REQUIRE(cudaFree(y) == cudaSuccess);
}

TEST_CASE("sim: a function-scope static __shared__ variable is each block's own") {
  cutrain_sim::reset_errors();
  const int blocks = 6;
  int* sums = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&sums), blocks * sizeof(int)) == cudaSuccess);
  static_shared_kernel<<<blocks, 64>>>(sums);
  REQUIRE(finish().empty());
  std::vector<int> got(blocks);
  REQUIRE(cudaMemcpy(got.data(), sums, blocks * sizeof(int), cudaMemcpyDeviceToHost) ==
          cudaSuccess);
  REQUIRE(got == std::vector<int>(blocks, 64 * 63 / 2));
  REQUIRE(cudaFree(sums) == cudaSuccess);
}
