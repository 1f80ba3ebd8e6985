// The simulator's teeth for memory that the caching allocator hands out (kernels/gpu.h's
// DeviceBuffer: its blocks are rounded up and reused, and it annotates each tensor's bytes,
// kernels/nvtx_memory.h): a write one element past a tensor, inside its block; a read of a
// tensor given back to the pool; and, for a plain cudaMalloc, an overrun into the red zone
// after it. Each is caught, with its report, under 16 seeds (the block and thread orders), and
// the correct kernel passes beside it.
// Built only by `make SIM=1` (sim/sim.mk); run by `make sim-test`.
#include <cuda_runtime.h>
#include <cutrain_sim.h>
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "kernels/gpu.h"
#include "sim/tests/teeth.h"

using namespace cutrain_sim_teeth;

namespace {

__global__ void scale_kernel(int n, const float* x, float* y, bool off_by_one) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (off_by_one ? i <= n : i < n) y[i] = 2 * x[i % n];
}

}  // namespace
TEST_CASE("sim teeth: a write one element past a tensor, inside its pool block, is caught") {
  const int n = 1000;  // 4000 bytes in a block of 4096: the block would hide the extra element
  under_16_seeds([&] {
    cutrain::DeviceBuffer x(n * sizeof(float)), y(n * sizeof(float));
    cutrain::memset_async(x.data(), 0, n * sizeof(float), nullptr);
    scale_kernel<<<(n + 255) / 256, 256>>>(n, static_cast<float*>(x.data()),
                                           static_cast<float*>(y.data()), false);
    REQUIRE(finish().empty());
    scale_kernel<<<(n + 255) / 256, 256>>>(n, static_cast<float*>(x.data()),
                                           static_cast<float*>(y.data()), true);
    const std::string report = finish();
    INFO(report);
    REQUIRE(report.find("invalid __global__ write") != std::string::npos);
    REQUIRE(report.find("block (3,0,0), thread (232,0,0)") != std::string::npos);  // i = 1000
    REQUIRE(report.find("starts 0 bytes past the end of its tensor (4000 bytes at") !=
            std::string::npos);
    REQUIRE(report.find("inside the caching allocator's block of 4096 bytes") !=
            std::string::npos);
  });
}

TEST_CASE("sim teeth: a kernel queued after its tensor was freed reads a tensor back in the "
          "pool") {
  const int n = 256;
  under_16_seeds([&] {
    cutrain::DeviceBuffer y(n * sizeof(float));
    float* x = nullptr;
    {
      // Right: the kernel is queued, then the tensor freed; the stream runs them in that order.
      cutrain::DeviceBuffer t(n * sizeof(float));
      cutrain::memset_async(t.data(), 0, n * sizeof(float), nullptr);
      scale_kernel<<<1, n>>>(n, static_cast<float*>(t.data()), static_cast<float*>(y.data()),
                             false);
      x = static_cast<float*>(t.data());
    }
    REQUIRE(finish().empty());
    // Wrong: the freed tensor's pointer used by a kernel queued after the free.
    scale_kernel<<<1, n>>>(n, x, static_cast<float*>(y.data()), false);
    const std::string report = finish();
    INFO(report);
    REQUIRE(report.find("invalid __global__ read") != std::string::npos);
    REQUIRE(report.find("is in a tensor of 1024 bytes at") != std::string::npos);
    REQUIRE(report.find("that went back to the caching allocator's pool (a use after free)") !=
            std::string::npos);
  });
}

TEST_CASE("sim teeth: an overrun of a cudaMalloc lands in its red zone, never in a neighbour") {
  const int n = 1024;  // 4096 bytes, a multiple of 256: no rounding after it, only the red zone
  under_16_seeds([&] {
    float *x = nullptr, *y = nullptr, *next = nullptr;
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&x), n * sizeof(float)) == cudaSuccess);
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&y), n * sizeof(float)) == cudaSuccess);
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&next), n * sizeof(float)) == cudaSuccess);
    REQUIRE(cudaMemset(x, 0, n * sizeof(float)) == cudaSuccess);
    scale_kernel<<<n / 256, 256>>>(n, x, y, false);
    REQUIRE(finish().empty());
    scale_kernel<<<n / 256 + 1, 256>>>(n, x, y, true);
    const std::string report = finish();
    INFO(report);
    REQUIRE(report.find("invalid __global__ write") != std::string::npos);
    REQUIRE(report.find("starts 0 bytes past the end of 4096 bytes at") != std::string::npos);
    REQUIRE(report.find("in its red zone") != std::string::npos);
    cutrain_sim::reset_errors();
    for (float* p : {x, y, next}) REQUIRE(cudaFree(p) == cudaSuccess);
  });
}

TEST_CASE("sim teeth: a kernel reading device memory never written is caught, a clone too") {
  const int n = 256;
  under_16_seeds([&] {
    float *x = nullptr, *clone = nullptr, *y = nullptr;
    for (float** p : {&x, &clone, &y})
      REQUIRE(cudaMalloc(reinterpret_cast<void**>(p), n * sizeof(float)) == cudaSuccess);
    // Never written: the kernel's first read of it is reported, with the line that reads.
    scale_kernel<<<1, n>>>(n, x, y, false);
    std::string report = finish();
    {
      INFO(report);
      REQUIRE(report.find("read of device memory that was never written") != std::string::npos);
      REQUIRE(report.find("no kernel, memset or copy wrote it") != std::string::npos);
      REQUIRE(report.find("pool_teeth_test.cu:24") != std::string::npos);  // y[i] = 2 * x[...]
    }
    cutrain_sim::reset_errors();
    // A clone of it is no read (the copy carries "never written"); the kernel reading the
    // clone is reported.
    REQUIRE(cudaMemcpy(clone, x, n * sizeof(float), cudaMemcpyDeviceToDevice) == cudaSuccess);
    REQUIRE(finish().empty());
    scale_kernel<<<1, n>>>(n, clone, y, false);
    report = finish();
    {
      INFO(report);
      REQUIRE(report.find("read of device memory that was never written") != std::string::npos);
    }
    cutrain_sim::reset_errors();
    // Written (a memset, then a copy of it): read without a report.
    REQUIRE(cudaMemset(x, 0, n * sizeof(float)) == cudaSuccess);
    REQUIRE(cudaMemcpy(clone, x, n * sizeof(float), cudaMemcpyDeviceToDevice) == cudaSuccess);
    scale_kernel<<<1, n>>>(n, clone, y, false);
    REQUIRE(finish().empty());
    for (float* p : {x, clone, y}) REQUIRE(cudaFree(p) == cudaSuccess);
  });
}

TEST_CASE("sim teeth: a tensor handed out again in a reused block starts unwritten") {
  const int n = 256;
  under_16_seeds([&] {
    cutrain::DeviceBuffer y(n * sizeof(float));
    void* first = nullptr;
    {
      cutrain::DeviceBuffer t(n * sizeof(float));
      cutrain::memset_async(t.data(), 0, n * sizeof(float), nullptr);
      first = t.data();
    }
    REQUIRE(finish().empty());
    cutrain::DeviceBuffer again(n * sizeof(float));  // the same block: written by the last one
    REQUIRE(again.data() == first);
    scale_kernel<<<1, n>>>(n, static_cast<float*>(again.data()), static_cast<float*>(y.data()),
                           false);
    const std::string report = finish();
    INFO(report);
    REQUIRE(report.find("read of device memory that was never written") != std::string::npos);
    REQUIRE(report.find("since its tensor was handed out") != std::string::npos);
  });
}
