// The simulator's runtime keeps CUDA's rules where code may rely on them (sim/runtime.h):
//   - copies (copy_on): cudaMemcpyAsync with pinned memory is queued on its stream, while
//     pageable memory (a std::vector) is not: a pageable source is staged at the call, and a
//     copy into pageable memory returns once it is done. A simulator that queued them would
//     write into a vector its owner may have freed meanwhile, which a GPU allows.
//   - events: one destroyed while a stream's wait for it is still queued still orders that
//     stream (CUDA releases it once the device is done with it); the simulator had freed it at
//     once, and the queued wait then locked and read freed memory.
//   - handles: a destroyed or never-given stream, event, graph or executable graph is
//     cudaErrorInvalidResourceHandle (the registry, sim/runtime.h), never a cast of freed memory.
// Built only by `make SIM=1` (sim/sim.mk); run by `make sim-test`.
#include <cuda_runtime.h>
#include <cutrain_sim.h>
#include <doctest/doctest.h>

#include <vector>

namespace {

__global__ void fill_kernel(int n, float* y, float v) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = v;
}

int count(const float* p, int n, float v) {
  int c = 0;
  for (int i = 0; i < n; i++) c += p[i] == v;
  return c;
}

}  // namespace

TEST_CASE("sim: copies from and into pageable memory are as synchronous as CUDA's; pinned "
          "ones are queued") {
  cutrain_sim::reset_errors();
  const int n = 300;
  const size_t bytes = n * sizeof(float);
  float* dev = nullptr;
  float* pinned = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&dev), bytes) == cudaSuccess);
  REQUIRE(cudaMallocHost(reinterpret_cast<void**>(&pinned), bytes) == cudaSuccess);
  cudaStream_t s;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  // The stream runs nothing until the host waits for it: whatever was only queued is not
  // done when the call returns.
  cutrain_sim::hold_stream(s);

  // A pageable source: reused at once after the call, the device still gets what it held.
  std::vector<float> src(n, 3.0f);
  REQUIRE(cudaMemcpyAsync(dev, src.data(), bytes, cudaMemcpyHostToDevice, s) == cudaSuccess);
  src.assign(n, 9.0f);
  // A pageable destination: written when the call returns, before any synchronisation.
  std::vector<float> back(n, 0.0f);
  REQUIRE(cudaMemcpyAsync(back.data(), dev, bytes, cudaMemcpyDeviceToHost, s) == cudaSuccess);
  REQUIRE(count(back.data(), n, 3.0f) == n);

  // Pinned memory: queued behind the kernel, done only once the stream is.
  for (int i = 0; i < n; i++) pinned[i] = 1.0f;
  fill_kernel<<<2, 256, 0, s>>>(n, dev, 7.0f);
  REQUIRE(cudaMemcpyAsync(pinned, dev, bytes, cudaMemcpyDeviceToHost, s) == cudaSuccess);
  REQUIRE(count(pinned, n, 1.0f) == n);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(count(pinned, n, 7.0f) == n);

  cutrain_sim::hold_stream(nullptr);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  REQUIRE(cudaFreeHost(pinned) == cudaSuccess);
  REQUIRE(cudaFree(dev) == cudaSuccess);
  REQUIRE(cutrain_sim::last_report().empty());
}

TEST_CASE("sim: an event destroyed while a wait for it is queued still orders the waiting "
          "stream") {
  cutrain_sim::reset_errors();
  const int n = 300;
  const size_t bytes = n * sizeof(float);
  float *a = nullptr, *b = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&a), bytes) == cudaSuccess);
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&b), bytes) == cudaSuccess);
  cudaStream_t producer, consumer;
  REQUIRE(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaMemset(a, 0, bytes) == cudaSuccess);
  // The producer runs only when someone waits for it: the consumer's wait must be what
  // makes it run, after the event is gone.
  cutrain_sim::hold_stream(producer);
  cudaEvent_t ready;
  REQUIRE(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming) == cudaSuccess);
  fill_kernel<<<2, 256, 0, producer>>>(n, a, 5.0f);
  REQUIRE(cudaEventRecord(ready, producer) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(consumer, ready, 0) == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, consumer) == cudaSuccess);
  REQUIRE(cudaEventDestroy(ready) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(consumer) == cudaSuccess);
  std::vector<float> got(n);
  REQUIRE(cudaMemcpy(got.data(), b, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
  REQUIRE(count(got.data(), n, 5.0f) == n);
  cutrain_sim::hold_stream(nullptr);
  REQUIRE(cudaStreamDestroy(producer) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(consumer) == cudaSuccess);
  REQUIRE(cudaFree(a) == cudaSuccess);
  REQUIRE(cudaFree(b) == cudaSuccess);
  REQUIRE(cutrain_sim::last_report().empty());
}

TEST_CASE("sim: a destroyed or unknown stream, event or graph is an invalid handle, never used") {
  cutrain_sim::reset_errors();
  const cudaError_t invalid = cudaErrorInvalidResourceHandle;
  float* y = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&y), 64 * sizeof(float)) == cudaSuccess);
  int not_a_handle = 0;

  cudaStream_t s, gone;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&gone, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(gone) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(gone) == invalid);
  REQUIRE(cudaStreamQuery(gone) == invalid);
  REQUIRE(cudaStreamDestroy(gone) == invalid);
  REQUIRE(cudaMemsetAsync(y, 0, 4, gone) == invalid);
  REQUIRE(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(&not_a_handle)) == invalid);
  fill_kernel<<<1, 64, 0, gone>>>(64, y, 1.0f);
  REQUIRE(cudaGetLastError() == invalid);

  cudaEvent_t e;
  REQUIRE(cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess);
  REQUIRE(cudaEventDestroy(e) == cudaSuccess);
  REQUIRE(cudaEventRecord(e, s) == invalid);
  REQUIRE(cudaEventQuery(e) == invalid);
  REQUIRE(cudaEventSynchronize(e) == invalid);
  REQUIRE(cudaStreamWaitEvent(s, e, 0) == invalid);
  REQUIRE(cudaEventDestroy(e) == invalid);
  REQUIRE(cudaEventQuery(reinterpret_cast<cudaEvent_t>(&not_a_handle)) == invalid);

  // A graph and its executable copy are handles of two kinds: one passed as the other is refused.
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  fill_kernel<<<1, 64, 0, s>>>(64, y, 2.0f);
  REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(reinterpret_cast<cudaGraphExec_t>(graph), s) == invalid);
  REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
  REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == invalid);
  REQUIRE(cudaGraphDestroy(graph) == invalid);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  std::vector<float> got(64);
  REQUIRE(cudaMemcpy(got.data(), y, 64 * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  REQUIRE(count(got.data(), 64, 2.0f) == 64);  // the replay ran; nothing else wrote y
  REQUIRE(cudaGraphExecDestroy(exec) == cudaSuccess);
  REQUIRE(cudaGraphExecDestroy(exec) == invalid);

  REQUIRE(cudaGetLastError() == invalid);  // the last refusal, then cleared
  REQUIRE(cudaGetLastError() == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  REQUIRE(cudaFree(y) == cudaSuccess);
  REQUIRE(cutrain_sim::last_report().empty());
}
