// linear and a plain GEMM through cuBLAS (kernels/vendor.h): a selectable alternative to
// cutrain's own kernels, a second reference in the tests, and the tensor-core ceiling of the
// benchmarks. Host code only: cuBLAS launches the kernels.
//
// Precision: cublasGemmEx with CUBLAS_COMPUTE_32F: products summed in fp32 for fp16 and fp32
// data alike, fp16 on tensor cores. fp32 data stays fp32 (TF32 would need
// CUBLAS_COMPUTE_32F_FAST_TF32 or the TF32 math mode; neither is asked for). alpha and beta are
// floats; beta = 0 for outputs that are written (cuBLAS does not read C then), beta = 1 for the
// backward's += targets.
//
// Row-major math on a column-major library. cuBLAS reads an (r x c) matrix column-major with a
// leading dimension ld. cutrain stores matrices row-major, and a row-major (R x Cc) array is,
// byte for byte, the column-major (Cc x R) array of its transpose, with ld = Cc. So each
// row-major product is computed as its transpose, (A B)^T = B^T A^T: the operands swap, and an
// operand the row-major math uses untransposed is passed "as stored" (op N).
//   forward   y (N,K) = x (N,C) w^T + b          x (N,C), w (K,C), b (K)
//     y^T (K x N) = w (K x C) * x^T (C x N); w is stored as (C x K), so op T
//     gemm(T, N, m=K, n=N, k=C, A=w lda=C, B=x ldb=C, C=y ldc=K)
//   bias, before it: y^T (K x N) = b (K x 1) * ones^T (1 x N), beta 0; the product then adds
//     with beta 1, so y is rounded once (b + sum in fp32), as on the CPU
//     gemm(N, N, m=K, n=N, k=1, A=b lda=K, B=ones ldb=1, C=y ldc=K)
//   dx (N,C) += dy (N,K) w (K,C):  dx^T (C x N) = w^T (C x K) * dy^T (K x N)
//     gemm(N, N, m=C, n=N, k=K, A=w lda=C, B=dy ldb=K, C=dx ldc=C)
//   dw (K,C) += dy^T (K,N) x (N,C):  dw^T (C x K) = x^T (C x N) * dy (N x K); dy stored (K x N)
//     gemm(N, T, m=C, n=K, k=N, A=x lda=C, B=dy ldb=K, C=dw ldc=C)
//   db (K) += dy^T ones:  db (K x 1) = dy^T (K x N) * ones (N x 1): a GEMV, written as a GemmEx
//     with n = 1 since cuBLAS has no fp16 GEMV
//     gemm(N, N, m=K, n=1, k=N, A=dy lda=K, B=ones ldb=N, C=db ldc=K)
//   gemm_f16_cublas  C (M,N) = A (M,K) B (K,N):  C^T (N x M) = B^T (N x K) * A^T (K x M)
//     gemm(N, N, m=N, n=M, k=K, A=B lda=N, B=A ldb=K, C=C ldc=N)
//
// Handles: one cublasHandle_t per (device, thread), created on first use, destroyed when the
// thread exits, bound at every call to the call's stream and to a workspace from the caching
// allocator on that stream. (Without cublasSetWorkspace a handle uses its default workspace
// whatever the stream, so one thread driving two streams through it, as GPU replicas on one
// device do, would have two GEMMs share one scratch buffer at once.)
#include "kernels/check.h"
#include "kernels/vendor.h"

#if defined(CUTRAIN_CUDA)
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <type_traits>
#include <vector>

namespace cutrain {

bool cublas_built() { return true; }

namespace {

// Library failures are runtime failures, like CUDA's (kernels/check.h): report the call,
// file:line and cuBLAS's own words, then abort.
[[noreturn]] void cublas_fail(const char* call, const char* file, int line, cublasStatus_t st) {
  if (cuda_errors_throw())  // a graph capture refused (nothing ran), or the tests (kernels/check.h)
    throw_error(file, line, std::string(call) + ": " + cublasGetStatusString(st));
  std::fprintf(stderr, "cuBLAS error at %s:%d\n  %s\n  %s\n", file, line, call,
               cublasGetStatusString(st));
  std::abort();
}
#define CUBLAS_CHECK(call)                                                      \
  do {                                                                          \
    cublasStatus_t cutrain_st_ = (call);                                        \
    if (cutrain_st_ != CUBLAS_STATUS_SUCCESS)                                   \
      cublas_fail(#call, __FILE__, __LINE__, cutrain_st_);                      \
  } while (0)


// cuBLAS's recommended workspace (the cuBLAS docs: 32 MiB covers Hopper, 4 MiB the rest).
constexpr size_t kWorkspaceBytes = size_t(32) << 20;

// The calling thread's handle for `device` (the current one), bound to `stream` and to `ws`.
struct BoundHandle {
  cublasHandle_t h = nullptr;
  DeviceBuffer ws;  // back to the pool, stream-ordered, when the call's GEMMs are queued
};
BoundHandle cublas_handle(int device, cudaStream_t stream) {
  struct Handles {
    std::vector<cublasHandle_t> h;  // indexed by device
    ~Handles() {
      // At thread exit a failure is printed, not fatal: nothing is left to protect.
      for (cublasHandle_t x : h) {
        if (!x) continue;
        const cublasStatus_t st = cublasDestroy(x);
        if (st != CUBLAS_STATUS_SUCCESS)
          std::fprintf(stderr, "cuBLAS error at %s:%d (ignored, in cleanup)\n  %s\n  %s\n",
                       __FILE__, __LINE__, "cublasDestroy(x)", cublasGetStatusString(st));
      }
    }
  };
  thread_local Handles handles;
  if (size_t(device) >= handles.h.size()) handles.h.resize(size_t(device) + 1, nullptr);
  cublasHandle_t& h = handles.h[size_t(device)];
  if (!h) {
    CUBLAS_CHECK(cublasCreate(&h));  // binds to the current device
    // Sums in fp32 even when the output is fp16: by default cuBLAS may add split-K partial
    // sums in the output's type (cublas_api.h, CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION).
    CUBLAS_CHECK(cublasSetMathMode(
        h, cublasMath_t(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
  }
  CUBLAS_CHECK(cublasSetStream(h, stream));  // (and resets the workspace to the default)
  BoundHandle b;
  b.h = h;
  b.ws = DeviceBuffer(kWorkspaceBytes, device, stream);
  CUBLAS_CHECK(cublasSetWorkspace(h, b.ws.data(), kWorkspaceBytes));
  return b;
}

template <typename T> cudaDataType data_type() {
  static_assert(std::is_same<T, float>::value || std::is_same<T, half_t>::value,
                "the cuBLAS paths take float or half_t");
  return std::is_same<T, half_t>::value ? CUDA_R_16F : CUDA_R_32F;
}

// A device vector of at least n ones of type T, for the bias broadcast and the db reduction;
// one per (device, thread, T), grown geometrically. Filling it is the one place here that
// waits: the copy is synchronised once per growth (the first calls of a run), so that every
// stream may read the buffer afterwards without an event. Outgrown buffers are kept until the
// thread exits, since work queued on other streams may still read them.
template <typename T>
const T* ones(int device, int n, cudaStream_t stream) {
  struct Ones {
    std::vector<DeviceBuffer> bufs;  // back() is the current one
    int n = 0;
  };
  thread_local std::vector<Ones> per_device;
  if (size_t(device) >= per_device.size()) per_device.resize(size_t(device) + 1);
  Ones& o = per_device[size_t(device)];
  if (n > o.n) {
    const int cap = std::max({n, 1024, o.n < (1 << 29) ? 2 * o.n : n});
    const std::vector<T> host(size_t(cap), T(1.0f));
    DeviceBuffer b(size_t(cap) * sizeof(T), device, stream);
    CUDA_CHECK(cudaMemcpyAsync(b.data(), host.data(), size_t(cap) * sizeof(T),
                               cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    o.bufs.push_back(std::move(b));
    o.n = cap;
  }
  return static_cast<const T*>(o.bufs.back().data());
}

const float kOne = 1.0f, kZero = 0.0f;

void check_linear_sizes(int N, int C, int K) {
  CHECK(N > 0 && C > 0 && K > 0,
        "linear (cuBLAS): sizes must be positive, got N=" << N << " C=" << C << " K=" << K);
}

}  // namespace

template <typename T>
void linear_forward_cublas(int N, int C, int K, const T* x, const T* w, const T* b, T* y,
                           cudaStream_t stream) {
  check_linear_sizes(N, C, K);
  const int dev = current_device();
  const BoundHandle bound = cublas_handle(dev, stream);
  cublasHandle_t h = bound.h;
  const cudaDataType t = data_type<T>();
  if (b) {  // y^T (K x N) = b (K x 1) * ones^T (1 x N)
    const T* one = ones<T>(dev, N, stream);
    CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, K, N, 1, &kOne, b, t, K, one, t, 1,
                              &kZero, y, t, K, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  // y^T (K x N) = w (K x C) * x^T (C x N) + (b ? y^T : 0)
  CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, K, N, C, &kOne, w, t, C, x, t, C,
                            b ? &kOne : &kZero, y, t, K, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
}

template <typename T>
void linear_backward_cublas(int N, int C, int K, const T* x, const T* w, const T* dy, T* dx,
                            T* dw, T* db, cudaStream_t stream) {
  check_linear_sizes(N, C, K);
  const int dev = current_device();
  const BoundHandle bound = cublas_handle(dev, stream);
  cublasHandle_t h = bound.h;
  const cudaDataType t = data_type<T>();
  if (dx)  // dx^T (C x N) += w^T (C x K) * dy^T (K x N)
    CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, C, N, K, &kOne, w, t, C, dy, t, K,
                              &kOne, dx, t, C, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  if (dw)  // dw^T (C x K) += x^T (C x N) * dy (N x K)
    CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, C, K, N, &kOne, x, t, C, dy, t, K,
                              &kOne, dw, t, C, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  if (db) {  // db (K x 1) += dy^T (K x N) * ones (N x 1)
    const T* one = ones<T>(dev, N, stream);
    CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, K, 1, N, &kOne, dy, t, K, one, t, N,
                              &kOne, db, t, K, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
}

void gemm_f16_cublas(int M, int N, int K, const half_t* A, const half_t* B, half_t* C,
                     cudaStream_t stream) {
  CHECK(M > 0 && N > 0 && K > 0,
        "gemm (cuBLAS): sizes must be positive, got M=" << M << " N=" << N << " K=" << K);
  const BoundHandle bound = cublas_handle(current_device(), stream);
  cublasHandle_t h = bound.h;
  // C^T (N x M) = B^T (N x K) * A^T (K x M)
  CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &kOne, B, CUDA_R_16F, N, A,
                            CUDA_R_16F, K, &kZero, C, CUDA_R_16F, N, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
}

}  // namespace cutrain

#else  // CPU-only build: every entry point says so

namespace cutrain {

bool cublas_built() { return false; }

namespace {
[[noreturn]] void no_cublas(const char* what) {
  throw Error(std::string("cannot run ") + what +
              " through cuBLAS: this build has no cuBLAS (it is a CPU-only build)");
}
}  // namespace

template <typename T>
void linear_forward_cublas(int, int, int, const T*, const T*, const T*, T*, cudaStream_t) {
  no_cublas("linear forward");
}
template <typename T>
void linear_backward_cublas(int, int, int, const T*, const T*, const T*, T*, T*, T*,
                            cudaStream_t) {
  no_cublas("linear backward");
}
void gemm_f16_cublas(int, int, int, const half_t*, const half_t*, half_t*, cudaStream_t) {
  no_cublas("gemm");
}

}  // namespace cutrain

#endif  // CUTRAIN_CUDA

namespace cutrain {
#define CUTRAIN_INSTANTIATE(T)                                                                 \
  template void linear_forward_cublas<T>(int, int, int, const T*, const T*, const T*, T*,     \
                                         cudaStream_t);                                        \
  template void linear_backward_cublas<T>(int, int, int, const T*, const T*, const T*, T*, T*, \
                                          T*, cudaStream_t);
CUTRAIN_INSTANTIATE(float)
CUTRAIN_INSTANTIATE(half_t)
#undef CUTRAIN_INSTANTIATE
}  // namespace cutrain
