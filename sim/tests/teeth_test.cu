// The simulator's teeth: kernels broken on purpose, each the way real kernels break, and the
// check that must catch it, with the message it must give (sim/README.md). Each case runs the
// correct kernel beside the broken one first, so a check that fires on everything fails here too.
// Built only by `make SIM=1` (sim/sim.mk); run by `make sim-test`.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cutrain_sim.h>
#include <doctest/doctest.h>
#include <mma.h>

#include <cmath>
#include <string>
#include <vector>

namespace {

// ---- the kernels -------------------------------------------------------------------------------
__global__ void scale_kernel(int n, const float* x, float* y, bool off_by_one) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (off_by_one ? i <= n : i < n) y[i] = 2 * x[i];
}

// The sum of each block's 256 values: shared-memory tree. `sync_first` false drops the barrier
// between the writes of the block's values and the first reads of them.
__global__ void block_sum_kernel(const float* x, float* sums, bool sync_first) {
  __shared__ float s[256];
  const unsigned t = threadIdx.x;
  s[t] = x[blockIdx.x * 256 + t];
  if (sync_first) __syncthreads();
  for (unsigned half = 128; half > 0; half /= 2) {
    if (t < half) s[t] += s[t + half];
    __syncthreads();
  }
  if (t == 0) sums[blockIdx.x] = s[0];
}

// The sum of a warp's 32 values by a butterfly; `first` is the first offset (16 is right).
__global__ void warp_sum_kernel(const float* x, float* y, int first) {
  float v = x[threadIdx.x];
  for (int off = first; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
  y[threadIdx.x] = v;
}

// Lanes 0..30 exchange with lane ^ 16 under a mask without lane 31: lane 15 reads lane 31.
__global__ void mask_missing_lane_kernel(const float* x, float* y, unsigned mask) {
  float v = x[threadIdx.x];
  if (threadIdx.x < 31 || mask == 0xffffffffu) v += __shfl_xor_sync(mask, v, 16);
  y[threadIdx.x] = v;
}

// `mode` 0: every thread at one barrier; 1: half the block returns first; 2: the two halves
// at two different barriers.
__global__ void barrier_kernel(float* y, int mode) {
  if (mode == 1 && threadIdx.x >= 16) return;
  if (mode == 2 && threadIdx.x >= 16) {
    y[threadIdx.x] = 2;
    __syncthreads();
    y[threadIdx.x] += 3;
  } else {
    __syncthreads();
    y[threadIdx.x] = 1;
  }
}

// Reads shared memory that `write` decides whether anyone wrote.
__global__ void shared_read_kernel(float* y, bool write) {
  __shared__ float s[32];
  if (write) s[threadIdx.x] = float(threadIdx.x);
  __syncthreads();
  y[threadIdx.x] = s[31 - threadIdx.x];
}

__global__ void fill_kernel(int n, float* y, float v) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = v;
}
__global__ void copy_kernel(int n, const float* x, float* y) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i];
}

// A 16-byte load from `p + offset` floats, as kernels/cuda_util.cuh's load128 makes it.
__global__ void load16_kernel(const float* p, int offset, float* y) {
  const int4 bits = *reinterpret_cast<const int4*>(p + offset);
  float v[4];
  memcpy(v, &bits, 16);
  y[0] = v[0] + v[1] + v[2] + v[3];
}

// More static shared memory than a block may have: 64 KiB > 48 KiB (nvcc would refuse it; the
// simulator sees it when the declaration runs).
__global__ void big_shared_kernel(float* y) {
  __shared__ float a[8192];  // 32 KiB
  __shared__ float b[8192];  // 32 KiB more
  a[threadIdx.x] = 1;
  b[threadIdx.x] = 2;
  y[threadIdx.x] = a[threadIdx.x] + b[threadIdx.x];
}

// One warp multiplies a 16x16 fp16 tile by itself (WMMA), its first operand read from
// x + offset: an offset past 0 reads beyond the 256 halves of the allocation.
__global__ void wmma_square_kernel(const __half* x, int offset, float* y) {
  nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, __half, nvcuda::wmma::row_major> a;
  nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, __half, nvcuda::wmma::row_major> b;
  nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> c;
  nvcuda::wmma::fill_fragment(c, 0.0f);
  nvcuda::wmma::load_matrix_sync(a, x + offset, 16);
  nvcuda::wmma::load_matrix_sync(b, x, 16);
  nvcuda::wmma::mma_sync(c, a, b, c);
  nvcuda::wmma::store_matrix_sync(y, c, 16, nvcuda::wmma::mem_row_major);
}

// ---- helpers -------------------------------------------------------------------------------------
struct Device {
  std::vector<void*> ptrs;
  float* alloc(size_t n) {
    void* p = nullptr;
    REQUIRE(cudaMalloc(&p, n * sizeof(float)) == cudaSuccess);
    ptrs.push_back(p);
    return static_cast<float*>(p);
  }
  float* upload(const std::vector<float>& v) {
    float* p = alloc(v.size());
    REQUIRE(cudaMemcpy(p, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice) ==
            cudaSuccess);
    return p;
  }
  std::vector<float> download(const float* p, size_t n) {
    std::vector<float> v(n);
    REQUIRE(cudaMemcpy(v.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
    return v;
  }
  ~Device() {
    cutrain_sim::reset_errors();
    for (void* p : ptrs) cudaFree(p);
  }
};

// Synchronises; returns the error, and the simulator's report in *report.
cudaError_t finish(std::string* report) {
  const cudaError_t e = cudaDeviceSynchronize();
  *report = cutrain_sim::last_report();
  return e;
}

std::vector<float> iota(size_t n, float scale = 1) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; i++) v[i] = float(i % 97) * scale - 3;
  return v;
}

}  // namespace

TEST_CASE("sim teeth: an off-by-one bound reads and writes past the allocations") {
  cutrain_sim::reset_errors();
  Device d;
  const int n = 1000;  // 4000 bytes: the allocation's padding would hide the extra element
  const std::vector<float> x = iota(n);
  float* xd = d.upload(x);
  float* yd = d.alloc(n);
  std::string report;
  scale_kernel<<<(n + 255) / 256, 256>>>(n, xd, yd, false);
  REQUIRE(finish(&report) == cudaSuccess);
  REQUIRE(report.empty());
  const std::vector<float> y = d.download(yd, n);
  for (int i = 0; i < n; i++) REQUIRE(y[size_t(i)] == 2 * x[size_t(i)]);

  scale_kernel<<<(n + 255) / 256, 256>>>(n, xd, yd, true);
  REQUIRE(finish(&report) == cudaErrorIllegalAddress);
  INFO(report);
  REQUIRE(report.find("invalid __global__ read") != std::string::npos);
  REQUIRE(report.find("in kernel scale_kernel") != std::string::npos);
  REQUIRE(report.find("block (3,0,0), thread (232,0,0)") != std::string::npos);  // i = 1000
  REQUIRE(report.find("starts 0 bytes past the end of 4000 bytes at") != std::string::npos);
  // The error is sticky, as a GPU's: the device refuses work until the process ends (here,
  // until the simulator is told to forget it).
  REQUIRE(cudaMemset(yd, 0, 4) == cudaErrorIllegalAddress);
}

TEST_CASE("sim teeth: a shared-memory reduction without its first barrier is caught") {
  cutrain_sim::reset_errors();
  Device d;
  const int blocks = 8;
  const std::vector<float> x = iota(256 * blocks, 0.5f);
  float* xd = d.upload(x);
  float* sd = d.alloc(blocks);
  std::string report;
  block_sum_kernel<<<blocks, 256>>>(xd, sd, true);
  REQUIRE(finish(&report) == cudaSuccess);
  const std::vector<float> sums = d.download(sd, blocks);
  for (int b = 0; b < blocks; b++) {
    double want = 0;
    for (int t = 0; t < 256; t++) want += x[size_t(b * 256 + t)];
    REQUIRE(std::fabs(sums[size_t(b)] - want) <= 1e-3 * std::fabs(want) + 1e-3);
  }
  // Without the barrier some thread adds s[t + half] before its owner wrote it: the threads'
  // random order makes that happen, and the shadow of shared memory reports it.
  block_sum_kernel<<<blocks, 256>>>(xd, sd, false);
  REQUIRE(finish(&report) == cudaErrorLaunchFailure);
  INFO(report);
  REQUIRE(report.find("read of __shared__ memory that no thread wrote") != std::string::npos);
  REQUIRE(report.find("in kernel block_sum_kernel") != std::string::npos);
  REQUIRE(report.find("teeth_test.cu") != std::string::npos);  // the variable's declaration
}

TEST_CASE("sim teeth: a butterfly with a wrong first offset gives a wrong sum") {
  cutrain_sim::reset_errors();
  Device d;
  const std::vector<float> x = iota(32);
  float want = 0;
  for (float v : x) want += v;
  float* xd = d.upload(x);
  float* yd = d.alloc(32);
  std::string report;
  warp_sum_kernel<<<1, 32>>>(xd, yd, 16);
  REQUIRE(finish(&report) == cudaSuccess);
  for (float v : d.download(yd, 32)) REQUIRE(v == want);  // small integers: exact
  warp_sum_kernel<<<1, 32>>>(xd, yd, 8);  // lanes 0-15 never meet lanes 16-31
  REQUIRE(finish(&report) == cudaSuccess);
  int wrong = 0;
  for (float v : d.download(yd, 32)) wrong += v != want;
  REQUIRE(wrong == 32);
}

TEST_CASE("sim teeth: a shuffle that reads a lane missing from its mask is reported") {
  cutrain_sim::reset_errors();
  Device d;
  float* xd = d.upload(iota(32));
  float* yd = d.alloc(32);
  std::string report;
  mask_missing_lane_kernel<<<1, 32>>>(xd, yd, 0xffffffffu);
  REQUIRE(finish(&report) == cudaSuccess);
  mask_missing_lane_kernel<<<1, 32>>>(xd, yd, 0x7fffffffu);
  REQUIRE(finish(&report) == cudaErrorLaunchFailure);
  INFO(report);
  REQUIRE(report.find("__shfl_xor_sync reads a lane that is not in its mask") != std::string::npos);
  REQUIRE(report.find("lane 15 reads lane 31, mask 0x7fffffff") != std::string::npos);
  REQUIRE(report.find("in kernel mask_missing_lane_kernel") != std::string::npos);
}

TEST_CASE("sim teeth: a mask naming lanes the block does not have is reported") {
  cutrain_sim::reset_errors();
  Device d;
  float* xd = d.upload(iota(32));
  float* yd = d.alloc(32);
  std::string report;
  warp_sum_kernel<<<1, 24>>>(xd, yd, 16);  // a full mask in a warp of 24 lanes
  REQUIRE(finish(&report) == cudaErrorLaunchFailure);
  INFO(report);
  REQUIRE(report.find("__shfl_xor_sync: the mask names absent lanes") != std::string::npos);
  REQUIRE(report.find("this warp has 24 lanes") != std::string::npos);
}

TEST_CASE("sim teeth: divergent barriers are reported") {
  cutrain_sim::reset_errors();
  Device d;
  float* yd = d.alloc(32);
  std::string report;
  barrier_kernel<<<2, 32>>>(yd, 0);
  REQUIRE(finish(&report) == cudaSuccess);
  barrier_kernel<<<2, 32>>>(yd, 1);
  REQUIRE(finish(&report) == cudaErrorLaunchFailure);
  {
    INFO(report);
    REQUIRE(report.find("divergent barrier: a thread exited while others wait at __syncthreads") !=
            std::string::npos);
    REQUIRE(report.find("in kernel barrier_kernel") != std::string::npos);
  }
  cutrain_sim::reset_errors();
  barrier_kernel<<<2, 32>>>(yd, 2);
  REQUIRE(finish(&report) == cudaErrorLaunchFailure);
  INFO(report);
  REQUIRE(report.find("divergent barrier: threads wait at different barriers") !=
          std::string::npos);
}

TEST_CASE("sim teeth: a read of shared memory no thread wrote is reported") {
  cutrain_sim::reset_errors();
  Device d;
  float* yd = d.alloc(32);
  std::string report;
  shared_read_kernel<<<1, 32>>>(yd, true);
  REQUIRE(finish(&report) == cudaSuccess);
  for (int i = 0; i < 32; i++) REQUIRE(d.download(yd, 32)[size_t(i)] == float(31 - i));
  shared_read_kernel<<<1, 32>>>(yd, false);
  REQUIRE(finish(&report) == cudaErrorLaunchFailure);
  INFO(report);
  REQUIRE(report.find("read of __shared__ memory that no thread wrote") != std::string::npos);
  REQUIRE(report.find("teeth_test.cu:") != std::string::npos);  // the declaration
  REQUIRE(report.find(" s (128 bytes), byte ") != std::string::npos);
}

TEST_CASE("sim teeth: a consumer stream that forgot the producer's event reads stale data") {
  cutrain_sim::reset_errors();
  Device d;
  const int n = 300;
  float* buf = d.alloc(n);
  float* out = d.alloc(n);
  cudaStream_t producer, consumer;
  cudaEvent_t ready;
  REQUIRE(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming) == cudaSuccess);
  cutrain_sim::hold_stream(producer);  // it runs only when someone waits for it
  for (int waits = 1; waits >= 0; waits--) {
    REQUIRE(cudaMemset(buf, 0, n * sizeof(float)) == cudaSuccess);
    fill_kernel<<<2, 256, 0, producer>>>(n, buf, 7.0f);
    REQUIRE(cudaEventRecord(ready, producer) == cudaSuccess);
    if (waits) REQUIRE(cudaStreamWaitEvent(consumer, ready, 0) == cudaSuccess);
    copy_kernel<<<2, 256, 0, consumer>>>(n, buf, out);
    REQUIRE(cudaStreamSynchronize(consumer) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(producer) == cudaSuccess);
    const std::vector<float> got = d.download(out, n);
    int stale = 0;
    for (float v : got) stale += v != 7.0f;
    REQUIRE(stale == (waits ? 0 : n));
  }
  cutrain_sim::hold_stream(nullptr);
  cudaEventDestroy(ready);
  cudaStreamDestroy(producer);
  cudaStreamDestroy(consumer);
}

TEST_CASE("sim teeth: launches above the device's limits are refused") {
  cutrain_sim::reset_errors();
  Device d;
  float* yd = d.alloc(2048);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  fill_kernel<<<1, 1024>>>(2048, yd, 1.0f);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  fill_kernel<<<1, 2048>>>(2048, yd, 1.0f);
  REQUIRE(cudaGetLastError() == cudaErrorInvalidConfiguration);
  std::string report = cutrain_sim::last_report();
  INFO(report);
  REQUIRE(report.find("launch above the device's limits") != std::string::npos);
  REQUIRE(report.find("kernel fill_kernel: a block of 2048 threads (limit 1024)") !=
          std::string::npos);
  REQUIRE(cudaGetLastError() == cudaSuccess);  // a launch error is not sticky
  fill_kernel<<<1, 32, 64 * 1024>>>(32, yd, 1.0f);
  REQUIRE(cudaGetLastError() == cudaErrorInvalidValue);
  REQUIRE(cutrain_sim::last_report().find("dynamic shared memory") != std::string::npos);
  REQUIRE(finish(&report) == cudaSuccess);
}

TEST_CASE("sim teeth: static shared memory above the limit is reported") {
  cutrain_sim::reset_errors();
  Device d;
  float* yd = d.alloc(32);
  std::string report;
  big_shared_kernel<<<1, 32>>>(yd);
  REQUIRE(finish(&report) == cudaErrorInvalidValue);
  INFO(report);
  REQUIRE(report.find("shared memory above the device limit") != std::string::npos);
}

TEST_CASE("sim teeth: a misaligned 16-byte load is reported") {
  cutrain_sim::reset_errors();
  Device d;
  float* xd = d.upload(iota(16));
  float* yd = d.alloc(1);
  std::string report;
  load16_kernel<<<1, 1>>>(xd, 4, yd);
  REQUIRE(finish(&report) == cudaSuccess);
  REQUIRE(d.download(yd, 1)[0] == (4 - 3) + (5 - 3) + (6 - 3) + (7 - 3));
  load16_kernel<<<1, 1>>>(xd, 1, yd);
  REQUIRE(finish(&report) == cudaErrorMisalignedAddress);
  INFO(report);
  REQUIRE(report.find("misaligned 16-byte read") != std::string::npos);
}

TEST_CASE("sim teeth: a WMMA tile load past its allocation is reported once, by the lane that "
          "reads it") {
  cutrain_sim::reset_errors();
  Device d;
  std::vector<__half> x(256);
  for (int i = 0; i < 256; i++) x[size_t(i)] = __float2half(float(i % 7) - 3);
  void* xd = nullptr;
  REQUIRE(cudaMalloc(&xd, 256 * sizeof(__half)) == cudaSuccess);
  d.ptrs.push_back(xd);
  REQUIRE(cudaMemcpy(xd, x.data(), 256 * sizeof(__half), cudaMemcpyHostToDevice) == cudaSuccess);
  float* yd = d.alloc(256);
  std::string report;
  wmma_square_kernel<<<1, 32>>>(static_cast<const __half*>(xd), 0, yd);
  REQUIRE(finish(&report) == cudaSuccess);
  const std::vector<float> y = d.download(yd, 256);
  for (int i = 0; i < 16; i++)
    for (int j = 0; j < 16; j++) {
      float want = 0;
      for (int k = 0; k < 16; k++)
        want += __half2float(x[size_t(i * 16 + k)]) * __half2float(x[size_t(k * 16 + j)]);
      REQUIRE(y[size_t(i * 16 + j)] == want);  // small integers: exact in any order
    }
  // One row too far: the tile's last row (bytes 512 to 543 of a 512-byte allocation) is in no
  // allocation; lanes 16 to 31 read it (element t is lane t % 32's).
  wmma_square_kernel<<<1, 32>>>(static_cast<const __half*>(xd), 16, yd);
  REQUIRE(finish(&report) == cudaErrorIllegalAddress);
  INFO(report);
  REQUIRE(report.find("invalid __global__ read") != std::string::npos);
  REQUIRE(report.find("in kernel wmma_square_kernel") != std::string::npos);
  REQUIRE(report.find("2 bytes at") != std::string::npos);
}
