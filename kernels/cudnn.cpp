// conv2d and batchnorm through cuDNN (kernels/vendor.h): a selectable alternative to cutrain's
// own kernels and a second reference for them. Host code only: cuDNN launches the kernels.
//
// Layouts: activations NHWC, filters KRSC, which cuDNN calls CUDNN_TENSOR_NHWC for both (its
// filter "NHWC" is K,R,S,C). Precision: fp16 data computes in fp32 (cuDNN's "pseudo half":
// CUDNN_DATA_FLOAT compute type) with tensor cores allowed; fp32 data computes in fp32 with
// CUDNN_FMA_MATH, which keeps cuDNN off TF32 (DEFAULT_MATH would allow TF32 on Ampere and
// later, 10 mantissa bits: not a reference for fp32). Accumulation: every cuDNN op computes
// out = alpha * op(in) + beta * out; forward outputs use beta = 0 (cuDNN does not read y then,
// so the tests can poison it) and the backward outputs beta = 1, the += of the CPU references.
//
// Algorithm: the first one in cuDNN's own ranking (cudnnGet*Algorithm_v7, fastest first by
// its heuristics for this shape, dtype and GPU) that works, needs at most kWorkspaceCap of
// workspace, and is deterministic; only when no deterministic one fits, the first that works,
// with a notice on stderr.
// Not cudnnFind*AlgorithmEx: that one times every algorithm on the device, blocks the host,
// overwrites its output argument (our += targets) and, timing being noisy, may pick a different
// algorithm in the next process, so a resumed run would not reproduce the bits of the first.
// The choice is made once per (device, thread, dtype, shape) and remembered, with the
// descriptors, in a per-thread cache. The workspace comes from DeviceBuffer on the call's
// stream, so the caching allocator recycles it without synchronising.
//
// cuDNN 9 marks this whole API (descriptors, cudnnConvolution*, cudnnBatchNormalization*) as
// deprecated in favour of its graph API; it is still shipped and supported in 9.x, and the
// deprecation attributes are only active when CUDNN_WARN_DEPRECATED is defined (we do not), so
// the build stays free of warnings. The graph API would need ~5x the code for the same calls.
//
// Handles: one cudnnHandle_t per (device, thread), created on first use, destroyed when the
// thread exits, bound to the call's stream at every call (cudnnSetStream is cheap).
// Batchnorm is in kernels/cudnn_batchnorm.cpp; what the two share, in kernels/cudnn_util.h.
#include "kernels/cudnn_util.h"

#include <string>

namespace cutrain {
namespace cudnn_detail {
void cudnn_missing(const char* what) {
#if defined(CUTRAIN_CUDA)
  const char* why = "cudnn.h was not found when it was built";
#else
  const char* why = "it is a CPU-only build";
#endif
  throw Error(std::string("cannot run ") + what + " through cuDNN: this build has no cuDNN (" +
              why + ")");
}
}  // namespace cudnn_detail
}  // namespace cutrain

#if defined(CUTRAIN_CUDNN)
#include <array>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <sstream>
#include <vector>

namespace cutrain {

bool cudnn_built() { return true; }

namespace cudnn_detail {

void cudnn_fail(const char* call, const char* file, int line, cudnnStatus_t st) {
  char detail[512] = {0};
  cudnnGetLastErrorString(detail, sizeof(detail));
  if (cuda_errors_throw())  // a graph capture refused (nothing ran), or the tests (kernels/check.h)
    throw_error(file, line, std::string(call) + ": " + cudnnGetErrorString(st) + " " + detail);
  std::fprintf(stderr, "cuDNN error at %s:%d\n  %s\n  %s\n  %s\n", file, line, call,
               cudnnGetErrorString(st), detail);
  std::abort();
}

void cudnn_warn(const char* call, const char* file, int line, cudnnStatus_t st) {
  std::fprintf(stderr, "cuDNN error at %s:%d (ignored, in cleanup)\n  %s\n  %s\n", file, line,
               call, cudnnGetErrorString(st));
}


cudnnHandle_t cudnn_handle(int device, cudaStream_t stream) {
  struct Handles {
    std::vector<cudnnHandle_t> h;  // indexed by device
    ~Handles() {
      for (cudnnHandle_t x : h)
        if (x) CUDNN_CHECK_NOTHROW(cudnnDestroy(x));
    }
  };
  thread_local Handles handles;
  if (size_t(device) >= handles.h.size()) handles.h.resize(size_t(device) + 1, nullptr);
  cudnnHandle_t& h = handles.h[size_t(device)];
  if (!h) CUDNN_CHECK(cudnnCreate(&h));  // binds to the current device
  CUDNN_CHECK(cudnnSetStream(h, stream));
  return h;
}

void check_elements(const char* what, int64_t n) {
  CHECK(n <= int64_t(INT_MAX), "cuDNN: " << what << " has " << n
                                         << " elements, more than cuDNN takes (2^31 - 1)");
}

namespace {

constexpr size_t kWorkspaceCap = size_t(256) << 20;  // 256 MiB

DeviceBuffer workspace(size_t bytes, int device, cudaStream_t stream) {
  return bytes ? DeviceBuffer(bytes, device, stream) : DeviceBuffer();
}

// ---- conv2d ----

struct Algo {
  int algo = -1;  // the cudnnConvolution*Algo_t, -1 until chosen
  size_t ws = 0;  // its workspace in bytes
};

struct ConvPlan {
  TensorDesc x, y, bias;  // x (N,H,W,C), y (N,P,Q,K), bias (1,1,1,K), all NHWC
  FilterDesc w;           // w (K,R,S,C)
  ConvDesc conv;
  Algo fwd, bwd_data, bwd_filter;
};

std::string describe(const Conv2dShape& s, cudnnDataType_t dt) {
  std::ostringstream os;
  os << (dt == CUDNN_DATA_HALF ? "f16" : "f32") << " N=" << s.N << " H=" << s.H << " W=" << s.W
     << " C=" << s.C << " K=" << s.K << " R=" << s.R << " S=" << s.S << " stride "
     << s.stride_h << "x" << s.stride_w << " pad " << s.pad_h << "x" << s.pad_w;
  return os.str();
}

// The calling thread's plan for (device, dtype, shape), descriptors set up on first use.
ConvPlan& conv_plan(int device, cudnnDataType_t dt, const Conv2dShape& s) {
  conv2d_check_shape(s);
  thread_local std::map<std::array<int, 13>, std::unique_ptr<ConvPlan>> plans;
  const std::array<int, 13> key = {device, int(dt), s.N, s.H, s.W, s.C, s.K, s.R, s.S,
                                   s.stride_h, s.stride_w, s.pad_h, s.pad_w};
  std::unique_ptr<ConvPlan>& p = plans[key];
  if (p) return *p;
  check_elements("conv2d input x", int64_t(s.N) * s.H * s.W * s.C);
  check_elements("conv2d output y", int64_t(s.N) * s.P() * s.Q() * s.K);
  check_elements("conv2d filter w", int64_t(s.K) * s.R * s.S * s.C);
  auto plan = std::make_unique<ConvPlan>();
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(plan->x.get(), CUDNN_TENSOR_NHWC, dt, s.N, s.C, s.H,
                                         s.W));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(plan->y.get(), CUDNN_TENSOR_NHWC, dt, s.N, s.K, s.P(),
                                         s.Q()));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(plan->bias.get(), CUDNN_TENSOR_NHWC, dt, 1, s.K, 1, 1));
  CUDNN_CHECK(cudnnSetFilter4dDescriptor(plan->w.get(), dt, CUDNN_TENSOR_NHWC, s.K, s.C, s.R,
                                         s.S));
  CUDNN_CHECK(cudnnSetConvolution2dDescriptor(plan->conv.get(), s.pad_h, s.pad_w, s.stride_h,
                                              s.stride_w, 1, 1, CUDNN_CROSS_CORRELATION,
                                              CUDNN_DATA_FLOAT));
  CUDNN_CHECK(cudnnSetConvolutionMathType(
      plan->conv.get(), dt == CUDNN_DATA_HALF ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
  // cuDNN's output size must be ours (Conv2dShape::P, Q): a cheap second opinion.
  int n = 0, k = 0, p_ = 0, q = 0;
  CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(plan->conv.get(), plan->x.get(),
                                                    plan->w.get(), &n, &k, &p_, &q));
  CHECK(n == s.N && k == s.K && p_ == s.P() && q == s.Q(),
        "cuDNN: output " << n << "x" << p_ << "x" << q << "x" << k << " differs from conv2d's "
                         << s.N << "x" << s.P() << "x" << s.Q() << "x" << s.K);
  p = std::move(plan);
  return *p;
}

// From cuDNN's ranked list (fastest first), the first entry that works and fits the cap,
// deterministic ones first (see the top of the file). ws_of(algo, &bytes) asks cuDNN for the
// exact workspace of a candidate; one it cannot size is passed over. Falling back to a
// non-deterministic algorithm is said once (resume is then no longer bit-exact).
template <typename Perf, typename WsOf>
Algo pick_algo(const std::vector<Perf>& perf, int count, WsOf ws_of, const char* what,
               const Conv2dShape& s, cudnnDataType_t dt) {
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < count; i++) {
      const Perf& p = perf[size_t(i)];
      if (p.status != CUDNN_STATUS_SUCCESS || p.memory > kWorkspaceCap) continue;
      if (pass == 0 && p.determinism != CUDNN_DETERMINISTIC) continue;
      size_t ws = 0;
      if (ws_of(p.algo, &ws) != CUDNN_STATUS_SUCCESS || ws > kWorkspaceCap) continue;
      if (pass == 1)
        std::fprintf(stderr,
                     "cutrain: cuDNN has no deterministic %s algorithm for conv2d %s within a "
                     "%zu MiB workspace: using a non-deterministic one (results may differ "
                     "from run to run; --conv tc or direct are deterministic)\n",
                     what, describe(s, dt).c_str(), kWorkspaceCap >> 20);
      return Algo{int(p.algo), ws};
    }
  }
  CHECK(false, "cuDNN has no " << what << " algorithm for conv2d " << describe(s, dt)
                               << " within a " << (kWorkspaceCap >> 20)
                               << " MiB workspace; use another --conv implementation");
  return Algo{};
}

void choose_forward(cudnnHandle_t h, ConvPlan& p, const Conv2dShape& s, cudnnDataType_t dt) {
  int max = 0, count = 0;
  CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max));
  std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(size_t(max > 0 ? max : 1));
  CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, p.x.get(), p.w.get(), p.conv.get(),
                                                     p.y.get(), max, &count, perf.data()));
  auto ws_of = [&](cudnnConvolutionFwdAlgo_t a, size_t* b) {
    return cudnnGetConvolutionForwardWorkspaceSize(h, p.x.get(), p.w.get(), p.conv.get(),
                                                   p.y.get(), a, b);
  };
  p.fwd = pick_algo(perf, count, ws_of, "forward", s, dt);
}

void choose_backward_data(cudnnHandle_t h, ConvPlan& p, const Conv2dShape& s,
                          cudnnDataType_t dt) {
  int max = 0, count = 0;
  CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max));
  std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(size_t(max > 0 ? max : 1));
  CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
      h, p.w.get(), p.y.get(), p.conv.get(), p.x.get(), max, &count, perf.data()));
  auto ws_of = [&](cudnnConvolutionBwdDataAlgo_t a, size_t* b) {
    return cudnnGetConvolutionBackwardDataWorkspaceSize(h, p.w.get(), p.y.get(), p.conv.get(),
                                                        p.x.get(), a, b);
  };
  p.bwd_data = pick_algo(perf, count, ws_of, "backward-data", s, dt);
}

void choose_backward_filter(cudnnHandle_t h, ConvPlan& p, const Conv2dShape& s,
                            cudnnDataType_t dt) {
  int max = 0, count = 0;
  CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max));
  std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(size_t(max > 0 ? max : 1));
  CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
      h, p.x.get(), p.y.get(), p.conv.get(), p.w.get(), max, &count, perf.data()));
  auto ws_of = [&](cudnnConvolutionBwdFilterAlgo_t a, size_t* b) {
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, p.x.get(), p.y.get(), p.conv.get(),
                                                          p.w.get(), a, b);
  };
  p.bwd_filter = pick_algo(perf, count, ws_of, "backward-filter", s, dt);
}

}  // namespace
}  // namespace cudnn_detail

template <typename T>
void conv2d_forward_cudnn(const Conv2dShape& s, const T* x, const T* w, const T* b, T* y,
                          cudaStream_t stream) {
  using namespace cudnn_detail;
  const int dev = current_device();
  const cudnnDataType_t dt = data_type<T>();
  cudnnHandle_t h = cudnn_handle(dev, stream);
  ConvPlan& p = conv_plan(dev, dt, s);
  if (p.fwd.algo < 0) choose_forward(h, p, s, dt);
  DeviceBuffer ws = workspace(p.fwd.ws, dev, stream);
  // y = conv(x, w)  (beta = 0: y is not read)
  CUDNN_CHECK(cudnnConvolutionForward(h, &kOne, p.x.get(), x, p.w.get(), w, p.conv.get(),
                                      cudnnConvolutionFwdAlgo_t(p.fwd.algo), ws.data(),
                                      p.fwd.ws, &kZero, p.y.get(), y));
  // y += b, broadcast over (N,P,Q). For fp16 y is rounded twice (after the sum, after the
  // bias), where the CPU rounds once: half an ulp more, inside the tests' tolerance.
  if (b) CUDNN_CHECK(cudnnAddTensor(h, &kOne, p.bias.get(), b, &kOne, p.y.get(), y));
}

template <typename T>
void conv2d_backward_data_cudnn(const Conv2dShape& s, const T* dy, const T* w, T* dx,
                                cudaStream_t stream) {
  using namespace cudnn_detail;
  const int dev = current_device();
  const cudnnDataType_t dt = data_type<T>();
  cudnnHandle_t h = cudnn_handle(dev, stream);
  ConvPlan& p = conv_plan(dev, dt, s);
  if (p.bwd_data.algo < 0) choose_backward_data(h, p, s, dt);
  DeviceBuffer ws = workspace(p.bwd_data.ws, dev, stream);
  // dx = 1 * dgrad(dy, w) + 1 * dx
  CUDNN_CHECK(cudnnConvolutionBackwardData(h, &kOne, p.w.get(), w, p.y.get(), dy, p.conv.get(),
                                           cudnnConvolutionBwdDataAlgo_t(p.bwd_data.algo),
                                           ws.data(), p.bwd_data.ws, &kOne, p.x.get(), dx));
}

template <typename T>
void conv2d_backward_filter_cudnn(const Conv2dShape& s, const T* x, const T* dy, T* dw, T* db,
                                  cudaStream_t stream) {
  using namespace cudnn_detail;
  const int dev = current_device();
  const cudnnDataType_t dt = data_type<T>();
  cudnnHandle_t h = cudnn_handle(dev, stream);
  ConvPlan& p = conv_plan(dev, dt, s);
  if (dw) {
    if (p.bwd_filter.algo < 0) choose_backward_filter(h, p, s, dt);
    DeviceBuffer ws = workspace(p.bwd_filter.ws, dev, stream);
    // dw = 1 * wgrad(x, dy) + 1 * dw
    CUDNN_CHECK(cudnnConvolutionBackwardFilter(
        h, &kOne, p.x.get(), x, p.y.get(), dy, p.conv.get(),
        cudnnConvolutionBwdFilterAlgo_t(p.bwd_filter.algo), ws.data(), p.bwd_filter.ws, &kOne,
        p.w.get(), dw));
  }
  // db[k] = 1 * sum_{n,p,q} dy[n][p][q][k] + 1 * db[k]
  if (db) CUDNN_CHECK(cudnnConvolutionBackwardBias(h, &kOne, p.y.get(), dy, &kOne, p.bias.get(),
                                                   db));
}

}  // namespace cutrain

#else  // no cuDNN in this build: every entry point says so

namespace cutrain {

bool cudnn_built() { return false; }

template <typename T>
void conv2d_forward_cudnn(const Conv2dShape&, const T*, const T*, const T*, T*, cudaStream_t) {
  cudnn_detail::cudnn_missing("conv2d forward");
}
template <typename T>
void conv2d_backward_data_cudnn(const Conv2dShape&, const T*, const T*, T*, cudaStream_t) {
  cudnn_detail::cudnn_missing("conv2d backward-data");
}
template <typename T>
void conv2d_backward_filter_cudnn(const Conv2dShape&, const T*, const T*, T*, T*,
                                  cudaStream_t) {
  cudnn_detail::cudnn_missing("conv2d backward-filter");
}

}  // namespace cutrain

#endif  // CUTRAIN_CUDNN

namespace cutrain {
#define CUTRAIN_INSTANTIATE(T)                                                                 \
  template void conv2d_forward_cudnn<T>(const Conv2dShape&, const T*, const T*, const T*, T*, \
                                        cudaStream_t);                                         \
  template void conv2d_backward_data_cudnn<T>(const Conv2dShape&, const T*, const T*, T*,     \
                                              cudaStream_t);                                   \
  template void conv2d_backward_filter_cudnn<T>(const Conv2dShape&, const T*, const T*, T*,   \
                                                T*, cudaStream_t);
CUTRAIN_INSTANTIATE(float)
CUTRAIN_INSTANTIATE(half_t)
#undef CUTRAIN_INSTANTIATE
}  // namespace cutrain
