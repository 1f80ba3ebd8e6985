// The simulator checks the runtime's calls as CUDA checks them (sim/README.md, "Calls"):
//   - copies, memsets and peer copies: a range that runs past its allocation (or starts in the
//     red zone after it), or memory a call needs on the device that is not: cudaErrorInvalidValue,
//     nothing written; a freed pointer too (a kernel's access to one: an illegal address);
//   - cuBLAS's GEMM reading or writing outside its operands: an illegal address, sticky;
//   - devices: a launch only into a stream of the current device, an event record only with
//     its event and stream on one device (a wait may cross devices), a kernel touching another
//     device's memory only with peer access;
//   - captures: cudaFree during one frees nothing and breaks it; an event wait forks another
//     stream into the capture and a wait back joins it (a replay runs the nodes in their
//     order); a fork never joined back, or a wait on an event recorded outside the capture
//     (unless cudaEventWaitExternal), fails the capture.
// Built only by `make SIM=1` (sim/sim.mk); run by `make sim-test`.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cutrain_sim.h>
#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace {

__global__ void fill_kernel(int n, float* y, float v) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = v;
}
// y = x * a + b
__global__ void affine_kernel(int n, const float* x, float* y, float a, float b) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * a + b;
}

bool reported(const std::string& part) {
  return cutrain_sim::last_report().find(part) != std::string::npos;
}

std::vector<float> read(const float* dev, int n) {
  std::vector<float> v(size_t(n), -1.0f);
  REQUIRE(cudaMemcpy(v.data(), dev, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  return v;
}

float* device_floats(int n) {
  float* p = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(float)) == cudaSuccess);
  return p;
}

}  // namespace

TEST_CASE("sim: a copy or memset past its allocation is refused, nothing written") {
  cutrain_sim::reset_errors();
  const int n = 100;
  float* dev = device_floats(n);
  REQUIRE(cudaMemset(dev, 0, n * sizeof(float)) == cudaSuccess);
  const std::vector<float> ones(n + 8, 1.0f);
  // 8 floats too many: the whole copy is refused.
  REQUIRE(cudaMemcpy(dev, ones.data(), (n + 8) * sizeof(float), cudaMemcpyHostToDevice) ==
          cudaErrorInvalidValue);
  REQUIRE(reported("cudaMemcpyAsync: the destination, 432 bytes at "));
  REQUIRE(reported("runs past its end by 32 bytes"));
  REQUIRE(read(dev, n) == std::vector<float>(n, 0.0f));
  // A source that starts just past the end (in the allocation's red zone).
  std::vector<float> back(4, 7.0f);
  REQUIRE(cudaMemcpy(back.data(), dev + n, 4 * sizeof(float), cudaMemcpyDeviceToHost) ==
          cudaErrorInvalidValue);
  REQUIRE(reported("starts 0 bytes past the end of 400 bytes at"));
  REQUIRE(back == std::vector<float>(4, 7.0f));
  // A memset past the end, and one of memory that is no allocation (pageable host memory).
  REQUIRE(cudaMemset(dev + 90, 0xff, 11 * sizeof(float)) == cudaErrorInvalidValue);
  REQUIRE(cudaMemset(back.data(), 0, sizeof(float)) == cudaErrorInvalidValue);
  REQUIRE(reported("cudaMemsetAsync: the memory, 4 bytes at "));
  REQUIRE(back[0] == 7.0f);
  REQUIRE(read(dev, n) == std::vector<float>(n, 0.0f));
  // The copy that fits goes through.
  REQUIRE(cudaMemcpy(dev, ones.data(), n * sizeof(float), cudaMemcpyHostToDevice) ==
          cudaSuccess);
  REQUIRE(read(dev, n) == std::vector<float>(n, 1.0f));
  cudaGetLastError();
  REQUIRE(cudaFree(dev) == cudaSuccess);
  cutrain_sim::reset_errors();
}

TEST_CASE("sim: cuBLAS reading past an operand is an illegal address when the GEMM runs") {
  cutrain_sim::reset_errors();
  cublasHandle_t h;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  const int m = 8, n = 4, k = 16;
  float* a = device_floats(m * k - 1);  // one element short
  float* b = device_floats(k * n);
  float* c = device_floats(m * n);
  const float one = 1, zero = 0;
  REQUIRE(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a, CUDA_R_32F, m, b,
                       CUDA_R_32F, k, &zero, c, CUDA_R_32F, m, CUBLAS_COMPUTE_32F,
                       CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);  // asynchronous, as cuBLAS
  REQUIRE(cudaDeviceSynchronize() == cudaErrorIllegalAddress);
  REQUIRE(reported("cublasGemmEx reads or writes outside its operands"));
  REQUIRE(reported("A: 512 bytes at"));
  cutrain_sim::reset_errors();
  REQUIRE(cudaFree(a) == cudaSuccess);
  REQUIRE(cudaFree(b) == cudaSuccess);
  REQUIRE(cudaFree(c) == cudaSuccess);
  REQUIRE(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS);
}

TEST_CASE("sim: launches, records and peer memory follow the devices' rules") {
  int devices = 0;
  REQUIRE(cudaGetDeviceCount(&devices) == cudaSuccess);
  if (devices < 2) return;  // (make sim-test simulates two)
  cutrain_sim::reset_errors();
  const int n = 64;
  float* on0 = device_floats(n);
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  cudaStream_t s1;
  cudaEvent_t e1;
  REQUIRE(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaEventCreateWithFlags(&e1, cudaEventDisableTiming) == cudaSuccess);
  float* on1 = device_floats(n);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  cudaEvent_t e0;
  REQUIRE(cudaEventCreateWithFlags(&e0, cudaEventDisableTiming) == cudaSuccess);

  // A launch into device 1's stream while device 0 is current.
  fill_kernel<<<1, n, 0, s1>>>(n, on1, 1.0f);
  REQUIRE(cudaGetLastError() == cudaErrorInvalidResourceHandle);
  REQUIRE(reported("launch into a stream of another device"));
  // A record of device 0's event on device 1's stream; a wait across devices is fine.
  REQUIRE(cudaEventRecord(e0, s1) == cudaErrorInvalidResourceHandle);
  REQUIRE(cudaEventRecord(e1, s1) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(nullptr, e1, 0) == cudaSuccess);
  cudaGetLastError();

  // Device 1's kernel writing device 0's memory: only with peer access from 1 to 0.
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  const cudaError_t was = cudaDeviceDisablePeerAccess(0);  // a known start, whatever ran before
  REQUIRE((was == cudaSuccess || was == cudaErrorPeerAccessNotEnabled));
  cudaGetLastError();
  fill_kernel<<<1, n, 0, s1>>>(n, on0, 2.0f);
  REQUIRE(cudaStreamSynchronize(s1) == cudaErrorIllegalAddress);
  REQUIRE(reported("device 0's memory, and this kernel runs on device 1 without peer access"));
  cutrain_sim::reset_errors();
  REQUIRE(cudaDeviceEnablePeerAccess(0, 0) == cudaSuccess);
  fill_kernel<<<1, n, 0, s1>>>(n, on0, 2.0f);
  REQUIRE(cudaStreamSynchronize(s1) == cudaSuccess);
  REQUIRE(read(on0, n) == std::vector<float>(n, 2.0f));
  if (was != cudaSuccess) REQUIRE(cudaDeviceDisablePeerAccess(0) == cudaSuccess);

  REQUIRE(cudaFree(on1) == cudaSuccess);
  REQUIRE(cudaEventDestroy(e1) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s1) == cudaSuccess);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  REQUIRE(cudaEventDestroy(e0) == cudaSuccess);
  REQUIRE(cudaFree(on0) == cudaSuccess);
  cutrain_sim::reset_errors();
}

TEST_CASE("sim: cudaFree during a capture frees nothing and breaks the capture") {
  cutrain_sim::reset_errors();
  const int n = 64;
  float* y = device_floats(n);
  cudaStream_t s;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  fill_kernel<<<1, n, 0, s>>>(n, y, 3.0f);
  REQUIRE(cudaFree(y) == cudaErrorStreamCaptureUnsupported);
  cudaGraph_t graph;
  REQUIRE(cudaStreamEndCapture(s, &graph) == cudaErrorStreamCaptureInvalidated);
  REQUIRE(graph == nullptr);
  // Still allocated: a kernel may write it, and it is freed once.
  fill_kernel<<<1, n, 0, s>>>(n, y, 4.0f);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(read(y, n) == std::vector<float>(n, 4.0f));
  REQUIRE(cudaFree(y) == cudaSuccess);
  REQUIRE(cudaFree(y) == cudaErrorInvalidValue);
  cudaGetLastError();
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  cutrain_sim::reset_errors();
}

TEST_CASE("sim: a capture forks into another stream and joins back; a replay keeps the order") {
  cutrain_sim::reset_errors();
  const int n = 64;
  float *x = device_floats(n), *y = device_floats(n), *z = device_floats(n);
  cudaStream_t origin, side, replay;
  for (cudaStream_t* s : {&origin, &side, &replay})
    REQUIRE(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking) == cudaSuccess);
  cudaEvent_t forked, joined;
  REQUIRE(cudaEventCreateWithFlags(&forked, cudaEventDisableTiming) == cudaSuccess);
  REQUIRE(cudaEventCreateWithFlags(&joined, cudaEventDisableTiming) == cudaSuccess);

  SUBCASE("joined: x = 1 on the origin, y = x + 1 on the side stream, z = 2y on the origin") {
    REQUIRE(cudaStreamBeginCapture(origin, cudaStreamCaptureModeRelaxed) == cudaSuccess);
    fill_kernel<<<1, n, 0, origin>>>(n, x, 1.0f);
    REQUIRE(cudaEventRecord(forked, origin) == cudaSuccess);
    REQUIRE(cudaStreamWaitEvent(side, forked, 0) == cudaSuccess);  // the fork
    affine_kernel<<<1, n, 0, side>>>(n, x, y, 1.0f, 1.0f);
    REQUIRE(cudaEventRecord(joined, side) == cudaSuccess);
    REQUIRE(cudaStreamWaitEvent(origin, joined, 0) == cudaSuccess);  // the join
    affine_kernel<<<1, n, 0, origin>>>(n, y, z, 2.0f, 0.0f);
    cudaGraph_t graph;
    REQUIRE(cudaStreamEndCapture(origin, &graph) == cudaSuccess);
    size_t nodes = 0;
    REQUIRE(cudaGraphGetNodes(graph, nullptr, &nodes) == cudaSuccess);
    REQUIRE(nodes == 3);
    // Nothing ran yet; the side stream left the capture with it: its own work runs now.
    fill_kernel<<<1, n, 0, side>>>(n, z, -1.0f);
    REQUIRE(cudaStreamSynchronize(side) == cudaSuccess);
    REQUIRE(read(z, n) == std::vector<float>(n, -1.0f));
    cudaGraphExec_t exec;
    REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
    REQUIRE(cudaGraphLaunch(exec, replay) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(replay) == cudaSuccess);
    REQUIRE(read(z, n) == std::vector<float>(n, 4.0f));
    REQUIRE(cudaGraphExecDestroy(exec) == cudaSuccess);
    REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
    REQUIRE(cutrain_sim::last_report().empty());
  }
  SUBCASE("a fork never joined back fails the capture") {
    REQUIRE(cudaStreamBeginCapture(origin, cudaStreamCaptureModeRelaxed) == cudaSuccess);
    fill_kernel<<<1, n, 0, origin>>>(n, x, 1.0f);
    REQUIRE(cudaEventRecord(forked, origin) == cudaSuccess);
    REQUIRE(cudaStreamWaitEvent(side, forked, 0) == cudaSuccess);
    affine_kernel<<<1, n, 0, side>>>(n, x, y, 1.0f, 1.0f);
    cudaGraph_t graph;
    REQUIRE(cudaStreamEndCapture(origin, &graph) == cudaErrorStreamCaptureUnjoined);
    REQUIRE(graph == nullptr);
    REQUIRE(cudaStreamQuery(side) == cudaSuccess);  // it left the capture too
  }
  SUBCASE("a wait on work recorded outside the capture: isolation, unless external") {
    fill_kernel<<<1, n, 0, side>>>(n, x, 5.0f);
    REQUIRE(cudaEventRecord(forked, side) == cudaSuccess);
    REQUIRE(cudaStreamBeginCapture(origin, cudaStreamCaptureModeRelaxed) == cudaSuccess);
    REQUIRE(cudaStreamWaitEvent(origin, forked, 0) == cudaErrorStreamCaptureIsolation);
    REQUIRE(reported("waits for an event recorded outside the capture"));
    cudaGraph_t graph;
    REQUIRE(cudaStreamEndCapture(origin, &graph) == cudaErrorStreamCaptureInvalidated);
    cutrain_sim::reset_errors();
    // External: each replay waits for the event's last record before it, then copies.
    REQUIRE(cudaStreamBeginCapture(origin, cudaStreamCaptureModeRelaxed) == cudaSuccess);
    REQUIRE(cudaStreamWaitEvent(origin, forked, cudaEventWaitExternal) == cudaSuccess);
    affine_kernel<<<1, n, 0, origin>>>(n, x, z, 1.0f, 0.0f);
    REQUIRE(cudaStreamEndCapture(origin, &graph) == cudaSuccess);
    cudaGraphExec_t exec;
    REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
    cutrain_sim::hold_stream(side);  // the producer runs only when the replay waits for it
    fill_kernel<<<1, n, 0, side>>>(n, x, 6.0f);
    REQUIRE(cudaEventRecord(forked, side) == cudaSuccess);
    REQUIRE(cudaGraphLaunch(exec, replay) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(replay) == cudaSuccess);
    cutrain_sim::hold_stream(nullptr);
    REQUIRE(read(z, n) == std::vector<float>(n, 6.0f));
    REQUIRE(cudaGraphExecDestroy(exec) == cudaSuccess);
    REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
  }
  cudaGetLastError();
  REQUIRE(cudaEventDestroy(forked) == cudaSuccess);
  REQUIRE(cudaEventDestroy(joined) == cudaSuccess);
  for (cudaStream_t s : {origin, side, replay}) REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  for (float* p : {x, y, z}) REQUIRE(cudaFree(p) == cudaSuccess);
  cutrain_sim::reset_errors();
}

TEST_CASE("sim: a freed pointer is refused by a copy and reported by a kernel, never used") {
  cutrain_sim::reset_errors();
  const int n = 64;
  float* gone = device_floats(n);
  float* y = device_floats(n);
  REQUIRE(cudaFree(gone) == cudaSuccess);
  std::vector<float> host(n, 1.0f);
  REQUIRE(cudaMemcpy(gone, host.data(), n * sizeof(float), cudaMemcpyHostToDevice) ==
          cudaErrorInvalidValue);
  REQUIRE(reported("is in an allocation freed earlier, 256 bytes at"));
  REQUIRE(cudaMemset(gone, 0, 4) == cudaErrorInvalidValue);
  REQUIRE(cudaFree(gone) == cudaErrorInvalidValue);  // freed twice
  cudaGetLastError();
  affine_kernel<<<1, n>>>(n, gone, y, 1.0f, 0.0f);
  REQUIRE(cudaDeviceSynchronize() == cudaErrorIllegalAddress);
  REQUIRE(reported("invalid __global__ read"));
  REQUIRE(reported("(a use after free)"));
  cutrain_sim::reset_errors();
  REQUIRE(cudaFree(y) == cudaSuccess);
}
