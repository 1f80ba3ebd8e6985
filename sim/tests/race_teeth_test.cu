// The simulator's teeth for shared-memory hazards (racecheck's rule, sim/racecheck.cpp): two
// threads' accesses to one byte of shared memory, at least one a write and not both atomics,
// with no barrier between them and no warp collective naming both lanes. Each kernel below
// is written for the purpose, broken one way, and caught under 16 seeds with its report
// (whatever order the threads ran in: most of these compute the right values here, because a
// simulated thread runs until it must meet the others); its correct version passes beside it.
// Built only by `make SIM=1` (sim/sim.mk); run by `make sim-test`.
#include <cuda_runtime.h>
#include <cutrain_sim.h>
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <cuda_pipeline_primitives.h>

#include "sim/tests/teeth.h"

using namespace cutrain_sim_teeth;

namespace {

// y[t] = sum over tiles k of x[k][63 - t], through a shared tile: each tile is loaded, the
// block meets, each thread reads another's element; without the trailing barrier the next
// tile's load overwrites elements that other threads may still have to read.
__global__ void tiled_kernel(const float* x, float* y, int tiles, bool trailing_barrier) {
  __shared__ float tile[64];
  const int t = threadIdx.x;
  float acc = 0;
  for (int k = 0; k < tiles; k++) {
    tile[t] = x[k * 64 + t];
    __syncthreads();
    acc += tile[63 - t];
    if (trailing_barrier) __syncthreads();
  }
  y[t] = acc;
}

// y[0] = the sum of x's 128 values, a tree of halvings in shared memory; without the barrier
// between levels, a level reads sums the level before has not finished (other warps').
__global__ void tree_kernel(const float* x, float* y, bool level_barriers) {
  __shared__ float s[128];
  const int t = threadIdx.x;
  s[t] = x[t];
  __syncthreads();
  for (int stride = 64; stride > 0; stride /= 2) {
    if (t < stride) s[t] += s[t + stride];
    if (level_barriers) __syncthreads();
  }
  if (t == 0) y[0] = s[0];
}

// *count = how many of x's 64 values are positive, counted in shared memory: n++ is a read
// and a write of every counting thread, atomicAdd is one atomic.
__global__ void count_kernel(const float* x, int* count, bool atomic) {
  __shared__ int n;
  const int t = threadIdx.x;
  if (t == 0) n = 0;
  __syncthreads();
  if (x[t] > 0) {
    if (atomic)
      atomicAdd(&n, 1);
    else
      n++;
  }
  __syncthreads();
  if (t == 0) *count = n;
}

// One warp sums 32 values in shared memory, warp-synchronously (the unrolled last warp of a
// block's reduction): the steps need no block barrier, but a __syncwarp between them (Volta's
// independent thread scheduling: without it, the lanes of one warp are not in step).
__global__ void warp_kernel(const float* x, float* y, bool syncwarp) {
  __shared__ float s[32];
  const int t = threadIdx.x;
  s[t] = x[t];
  __syncthreads();
  for (int offset = 16; offset > 0; offset /= 2) {
    if (t < offset) s[t] += s[t + offset];
    if (syncwarp) __syncwarp();
  }
  if (t == 0) y[0] = s[0];
}

// Each thread logs its index when it starts and when it ends (a slot from an atomic counter
// each time), reading 64 values of global memory between the two.
__global__ void order_kernel(const float* x, float* y, int* next, int* log) {
  const int t = threadIdx.x;
  log[atomicAdd(next, 1)] = t;
  float acc = 0;
  for (int i = 0; i < 64; i++) acc += x[i];
  y[t] = acc;
  log[atomicAdd(next, 1)] = t;
}

// y = x reversed within each block of 64, through shared memory filled by asynchronous copies
// of 16 bytes (4 floats: threads 0 to 15 issue one each), in two groups: the first half of the
// tile, then the second. `waits`: 2 waits for both groups before the barrier; 1 waits for the
// first only (the second half is read before it lands); 0 waits for neither.
__global__ void async_reverse_kernel(const float* x, float* y, int waits) {
  __shared__ __align__(16) float tile[64];
  const int t = threadIdx.x;
  const float* in = x + blockIdx.x * 64;
  if (t < 8) __pipeline_memcpy_async(&tile[4 * t], &in[4 * t], 16);
  __pipeline_commit();
  if (t >= 8 && t < 16) __pipeline_memcpy_async(&tile[4 * t], &in[4 * t], 16);
  __pipeline_commit();
  if (waits == 2) __pipeline_wait_prior(0);
  if (waits == 1) __pipeline_wait_prior(1);
  __syncthreads();
  y[blockIdx.x * 64 + t] = tile[63 - t];
}

std::vector<float> host_values(int n) {
  std::vector<float> v(size_t(n), 0.0f);
  for (int i = 0; i < n; i++) v[size_t(i)] = float(i % 7) - 2.0f;  // small integers: exact sums
  return v;
}

float* device_values(int n) {
  float* p = device_array<float>(n);
  const std::vector<float> v = host_values(n);
  REQUIRE(cudaMemcpy(p, v.data(), size_t(n) * sizeof(float), cudaMemcpyHostToDevice) ==
          cudaSuccess);
  return p;
}

template <class T> T read_one(const T* p) {
  T v{};
  REQUIRE(cudaMemcpy(&v, p, sizeof v, cudaMemcpyDeviceToHost) == cudaSuccess);
  return v;
}

// The report names a hazard on the __shared__ variable `var`, and both threads' lines.
void check_report(const std::string& report, const std::string& var) {
  INFO(report);
  CHECK(report.find("shared memory hazard: ") != std::string::npos);
  CHECK(report.find("__shared__ sim/tests/race_teeth_test.cu:") != std::string::npos);
  CHECK(report.find(" " + var + " (") != std::string::npos);  // "file:line name (bytes)"
  CHECK(report.find("    at ") != std::string::npos);
  CHECK(report.find("    and thread (") != std::string::npos);
  CHECK(report.find("race_teeth_test.cu:") != std::string::npos);
}

}  // namespace

TEST_CASE("sim teeth: a tiled loop without its trailing barrier is a hazard on bytes already written") {
  const int tiles = 3;
  const float* x = device_values(tiles * 64);
  float* y = device_array<float>(64);
  under_16_seeds([&] {
    tiled_kernel<<<1, 64>>>(x, y, tiles, true);
    REQUIRE(finish().empty());
    std::vector<float> got(64);
    REQUIRE(cudaMemcpy(got.data(), y, sizeof(float) * 64, cudaMemcpyDeviceToHost) == cudaSuccess);
    const std::vector<float> v = host_values(tiles * 64);
    for (int t = 0; t < 64; t++) {
      float want = 0;
      for (int k = 0; k < tiles; k++) want += v[size_t(k * 64 + 63 - t)];
      REQUIRE(got[size_t(t)] == want);
    }
    tiled_kernel<<<1, 64>>>(x, y, tiles, false);
    const std::string report = finish();
    check_report(report, "tile");
    // The second tile's store meets the first tile's reads: a write after a read, or a read
    // after that write, in the order this seed ran them.
    CHECK((report.find("write-after-read") != std::string::npos ||
           report.find("read-after-write") != std::string::npos));
  });
  cudaFree(const_cast<float*>(x));
  cudaFree(y);
}

TEST_CASE("sim teeth: a tree reduction without the barrier between levels is a hazard") {
  const float* x = device_values(128);
  float* y = device_array<float>(1);
  under_16_seeds([&] {
    tree_kernel<<<1, 128>>>(x, y, true);
    REQUIRE(finish().empty());
    float want = 0;
    for (float v : host_values(128)) want += v;
    REQUIRE(read_one(y) == want);
    tree_kernel<<<1, 128>>>(x, y, false);
    check_report(finish(), "s");
  });
  cudaFree(const_cast<float*>(x));
  cudaFree(y);
}

TEST_CASE("sim teeth: a non-atomic shared counter is a hazard, atomicAdd is none") {
  const float* x = device_values(64);
  int* count = device_array<int>(1);
  int positive = 0;
  for (float v : host_values(64)) positive += v > 0;
  under_16_seeds([&] {
    count_kernel<<<1, 64>>>(x, count, true);
    REQUIRE(finish().empty());
    REQUIRE(read_one(count) == positive);
    count_kernel<<<1, 64>>>(x, count, false);
    const std::string report = finish();
    check_report(report, "n");
    // Two threads' n++: one reads what another wrote, or writes what another read.
    CHECK((report.find("read-after-write") != std::string::npos ||
           report.find("write-after-read") != std::string::npos ||
           report.find("write-after-write") != std::string::npos));
  });
  cudaFree(const_cast<float*>(x));
  cudaFree(count);
}

TEST_CASE("sim teeth: warp-synchronous code without __syncwarp is a hazard") {
  const float* x = device_values(32);
  float* y = device_array<float>(1);
  under_16_seeds([&] {
    warp_kernel<<<1, 32>>>(x, y, true);
    REQUIRE(finish().empty());
    float want = 0;
    for (float v : host_values(32)) want += v;
    REQUIRE(read_one(y) == want);
    warp_kernel<<<1, 32>>>(x, y, false);
    const std::string report = finish();
    check_report(report, "s");
    CHECK(report.find("nor a warp collective") != std::string::npos);
  });
  cudaFree(const_cast<float*>(x));
  cudaFree(y);
}

TEST_CASE("sim: CUTRAIN_SIM_INTERLEAVE lets threads make way inside a barrier phase, by the seed") {
  const float* x = device_values(64);
  float* y = device_array<float>(32);
  int* next = device_array<int>(1);
  int* log = device_array<int>(64);
  // Whether some thread's two entries are apart: another ran in between.
  const auto interleaved = [&] {
    REQUIRE(cudaMemset(next, 0, sizeof(int)) == cudaSuccess);
    order_kernel<<<1, 32>>>(x, y, next, log);
    REQUIRE(finish().empty());
    std::vector<int> got(64);
    REQUIRE(cudaMemcpy(got.data(), log, sizeof(int) * 64, cudaMemcpyDeviceToHost) == cudaSuccess);
    for (size_t i = 0; i < 64; i += 2)
      if (got[i] != got[i + 1]) return true;
    return false;
  };
  under_16_seeds([&] { REQUIRE_FALSE(interleaved()); });  // each thread runs to its end
  cutrain_sim::set_interleave(0.05);
  under_16_seeds([&] { REQUIRE(interleaved()); });
  cutrain_sim::set_interleave(0);
  cudaFree(const_cast<float*>(x));
  for (void* p : {static_cast<void*>(y), static_cast<void*>(next), static_cast<void*>(log)})
    cudaFree(p);
}

TEST_CASE("sim teeth: an asynchronous copy read before its wait is caught, with the wait it passes") {
  const float* x = device_values(128);
  float* y = device_array<float>(128);
  const std::vector<float> v = host_values(128);
  under_16_seeds([&] {
    async_reverse_kernel<<<2, 64>>>(x, y, 2);
    REQUIRE(finish().empty());
    std::vector<float> got(128);
    REQUIRE(cudaMemcpy(got.data(), y, sizeof(float) * 128, cudaMemcpyDeviceToHost) == cudaSuccess);
    for (int b = 0; b < 2; b++)
      for (int t = 0; t < 64; t++) REQUIRE(got[size_t(b * 64 + t)] == v[size_t(b * 64 + 63 - t)]);
    for (const int waits : {1, 0}) {  // the second group, or both, never waited for
      INFO("waits " << waits);
      async_reverse_kernel<<<2, 64>>>(x, y, waits);
      const std::string report = finish();
      INFO(report);
      CHECK(report.find("read of __shared__ memory that an asynchronous copy has not delivered") !=
            std::string::npos);
      CHECK(report.find(" tile (") != std::string::npos);
      CHECK(report.find("race_teeth_test.cu:") != std::string::npos);
    }
  });
  cudaFree(const_cast<float*>(x));
  cudaFree(y);
}
