// The CUDA runtime wrappers: buffers, streams, events, copies, and the device's caching
// allocator in a steady state. Skipped when no device is usable; in a CPU-only build, the
// same calls must refuse with a clear reason.
#include <vector>

#include "kernels/arrival_counters.h"
#include "kernels/gpu.h"
#include "nn/tensor.h"
#include "tests/test_util.h"

using namespace cutrain;
using cutrain_test::test_gpu;
using cutrain_test::require_close;

TEST_CASE("gpu: without a usable device every entry point says why") {
  if (gpu_usable()) return;  // the other tests cover this case
  REQUIRE_FALSE(gpu_unavailable_reason().empty());
  REQUIRE(gpu_count() == 0);
  REQUIRE_ERROR(Stream(), "cannot create a CUDA stream");
  REQUIRE_ERROR(PinnedBuffer(16), "cannot allocate pinned memory");
  REQUIRE_ERROR(Tensor::zeros({4}, DType::f32, test_gpu()), "cannot place a tensor on cuda");
  CudaGraph g;
  REQUIRE_ERROR(g.capture(nullptr, [] {}), "cannot capture a CUDA graph");
  if (!cuda_compiled()) {
    REQUIRE(gpu_unavailable_reason().find("without CUDA") != std::string::npos);
    REQUIRE_ERROR(arrival_counters(nullptr, 1), "count arrivals");
  }
}

#if defined(CUTRAIN_CUDA)
// The test runner turns on set_cuda_errors_throw (tests/main.cpp): a failing CUDA call fails its
// test case, naming the call, file:line and CUDA's error, instead of aborting every test after
// it. Needs no device: the error code is handed to CUDA_CHECK as it is.
TEST_CASE("gpu: in the tests a failing CUDA call throws, naming the call, file:line and the error") {
  REQUIRE(cuda_errors_throw());
  REQUIRE_ERROR([] { CUDA_CHECK(cudaErrorInvalidValue); }(), "cudaErrorInvalidValue");
  REQUIRE_ERROR([] { CUDA_CHECK(cudaErrorInvalidValue); }(), "gpu_test.cpp:");
  REQUIRE_ERROR([] { CUDA_CHECK(cudaErrorInvalidValue); }(), "invalid argument");
}
#endif

TEST_CASE("gpu [gpu]: pinned -> device -> pinned on a stream, ordered by an event") {
  REQUIRE_GPU();
  const size_t n = 1 << 20;
  PinnedBuffer src(n * 4), dst(n * 4);
  float* s = static_cast<float*>(src.data());
  for (size_t i = 0; i < n; i++) s[i] = float(i) * 0.5f;
  DeviceBuffer dev(n * 4);
  Stream copy, compute;
  Event copied;
  copy_async(dev.data(), src.data(), n * 4, copy.get());
  copied.record(copy.get());
  copied.wait(compute.get());  // compute waits for the copy without blocking the host
  copy_async(dst.data(), dev.data(), n * 4, compute.get());
  compute.synchronize();
  REQUIRE(copied.done());
  const float* d = static_cast<const float*>(dst.data());
  for (size_t i = 0; i < n; i += 4099) REQUIRE(d[i] == float(i) * 0.5f);
}

TEST_CASE("gpu [gpu]: tensors round-trip through the device, f32 -> f16 on the device") {
  REQUIRE_GPU();
  Tensor t = Tensor::from_floats({1.0f, -2.5f, 65504.0f, 70000.0f, 1e-8f}, {5});
  Tensor d = t.to(test_gpu());
  REQUIRE(d.device() == Device::cuda);
  require_close(d.to(Context::cpu()), {1.0, -2.5, 65504.0, 70000.0, double(1e-8f)}, 0);
  Tensor h = d.to(DType::f16).to(Context::cpu());
  Tensor want = t.to(DType::f16);
  for (int i = 0; i < 5; i++) REQUIRE(h.data<half_t>()[i].bits == want.data<half_t>()[i].bits);
}

namespace {
// Under CUTRAIN_EXACT_ALLOC=1 (run.sh's memcheck) the allocator caches nothing: the tests of
// its cache skip, saying why.
bool skip_when_exact() {
  if (!device_allocator(0).exact()) return false;
  cutrain_test::skip("CUTRAIN_EXACT_ALLOC=1: the allocator caches nothing, so there is no cache to test");
  return true;
}
}  // namespace

TEST_CASE("gpu [gpu]: a steady-state step makes no cudaMalloc") {
  REQUIRE_GPU();
  if (skip_when_exact()) return;
  CachingAllocator& pool = device_allocator(0);
  auto step = [] {
    std::vector<Tensor> acts;
    for (int i = 0; i < 6; i++) acts.push_back(Tensor::empty({64, 28, 28, 32}, DType::f16, test_gpu()));
    acts.push_back(Tensor::empty({64, 10}, DType::f32, test_gpu()));
  };
  step();  // the first step fills the pool
  const size_t before = pool.stats().backend_allocs;
  for (int i = 0; i < 10; i++) step();
  REQUIRE(pool.stats().backend_allocs == before);
}

TEST_CASE("gpu [gpu]: a stream's cached blocks go back to cudaFree when it is destroyed") {
  REQUIRE_GPU();
  if (skip_when_exact()) return;
  CachingAllocator& a = device_allocator(0);
  const size_t cached_before = a.stats().bytes_cached;
  const size_t frees_before = a.stats().backend_frees;
  {
    Stream s(0);
    { DeviceBuffer b(size_t(3) << 20, 0, s.get()); }  // freed into s's part of the pool
    REQUIRE(a.stats().bytes_cached == cached_before + (size_t(3) << 20));
  }
  REQUIRE(a.stats().bytes_cached == cached_before);  // not left under a dead stream's key
  REQUIRE(a.stats().backend_frees == frees_before + 1);
}

TEST_CASE("gpu [gpu]: arrival counters: zero, one array per stream, grown without losing it") {
  REQUIRE_GPU();
  Stream a, b;
  unsigned* pa = arrival_counters(a.get(), 10);
  REQUIRE(pa != nullptr);
  REQUIRE(arrival_counters(a.get(), 1) == pa);  // the same array for the same stream
  REQUIRE(arrival_counters(b.get(), 10) != pa);  // another for another stream
  a.synchronize();
  std::vector<unsigned> got(1024, 1);
  copy_sync(got.data(), pa, got.size() * sizeof(unsigned));
  REQUIRE(got == std::vector<unsigned>(1024, 0));  // zeroed on the stream: 1024 at least
  unsigned* big = arrival_counters(a.get(), 5000);  // grows: a new array, zeroed too
  REQUIRE(big != pa);
  REQUIRE(arrival_counters(a.get(), 10) == big);
  a.synchronize();
  got.assign(5000, 1);
  copy_sync(got.data(), big, got.size() * sizeof(unsigned));
  REQUIRE(got == std::vector<unsigned>(5000, 0));
  REQUIRE_ERROR(arrival_counters(a.get(), -1), "arrival_counters");
}
