// cuBLAS under the simulator (sim/include/cublas_v2.h): GemmEx as a host task on the handle's
// stream, products summed in k order in fp32 (fp16 operands widened exactly), then
// alpha * sum + beta * C rounded to C's type. beta = 0 does not read C, as cuBLAS.
#include <cublas_v2.h>

#include <cuda_fp16.h>

#include <cstdio>
#include <functional>
#include <string>

#include "sim/sim.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
};

namespace {
float load(const void* p, cudaDataType t, size_t i) {
  return t == CUDA_R_16F ? float(static_cast<const __half*>(p)[i]) : static_cast<const float*>(p)[i];
}
void store(void* p, cudaDataType t, size_t i, float v) {
  if (t == CUDA_R_16F)
    static_cast<__half*>(p)[i] = __float2half_rn(v);
  else
    static_cast<float*>(p)[i] = v;
}
struct Gemm {
  cublasOperation_t ta, tb;
  int m, n, k;
  float alpha, beta;
  const void *A, *B;
  void* C;
  cudaDataType at, bt, ct;
  int lda, ldb, ldc;
};
void gemm(const Gemm* g) {
  for (int j = 0; j < g->n; j++)
    for (int i = 0; i < g->m; i++) {
      float s = 0;
      for (int l = 0; l < g->k; l++) {
        const size_t ai = g->ta == CUBLAS_OP_N ? size_t(l) * g->lda + i : size_t(i) * g->lda + l;
        const size_t bi = g->tb == CUBLAS_OP_N ? size_t(j) * g->ldb + l : size_t(l) * g->ldb + j;
        s += load(g->A, g->at, ai) * load(g->B, g->bt, bi);
      }
      const size_t ci = size_t(j) * g->ldc + i;
      const float c = g->beta == 0 ? 0.0f : g->beta * load(g->C, g->ct, ci);
      store(g->C, g->ct, ci, g->alpha * s + c);
    }
}

// The bytes a GEMM touches from `p`: elements 0 .. last of type t (last: the largest index it
// reads or writes). "" when they lie in one allocation, else what is wrong.
std::string outside(const char* name, const void* p, cudaDataType t, size_t last) {
  const size_t bytes = (last + 1) * (t == CUDA_R_16F ? 2 : 4);
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const cutrain_sim::Lookup l = cutrain_sim::look_up(a, bytes);
  if (l.kind == cutrain_sim::Lookup::inside) return "";
  char s[96];
  std::snprintf(s, sizeof s, "%s: %zu bytes at %p ", name, bytes, p);
  return s + cutrain_sim::describe_miss(l, a, bytes);
}
}  // namespace

cublasStatus_t cublasCreate(cublasHandle_t* h) {
  *h = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
  h->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasSetWorkspace(cublasHandle_t, void*, size_t) { return CUBLAS_STATUS_SUCCESS; }
const char* cublasGetStatusString(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    default: return "cuBLAS error";
  }
}
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void* alpha, const void* A, cudaDataType at,
                            int lda, const void* B, cudaDataType bt, int ldb, const void* beta,
                            void* C, cudaDataType ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t) {
  if (m < 0 || n < 0 || k < 0 || compute != CUBLAS_COMPUTE_32F) return CUBLAS_STATUS_INVALID_VALUE;
  const Gemm g{ta, tb, m, n, k, *static_cast<const float*>(alpha),
               *static_cast<const float*>(beta), A, B, C, at, bt, ct, lda, ldb, ldc};
  // What it reads and writes must lie in the operands' allocations (their tensors, in a
  // pool block): cuBLAS's kernels would fault there, an illegal address, sticky, when the
  // GEMM runs; checked then (the caching allocator's annotations are in stream order).
  const auto check = [g]() -> std::string {
    if (g.m <= 0 || g.n <= 0) return "";
    const size_t M = size_t(g.m), N = size_t(g.n), K = size_t(g.k);
    std::string bad;
    if (g.k > 0) {
      bad = outside("A", g.A, g.at, g.ta == CUBLAS_OP_N ? (K - 1) * size_t(g.lda) + M - 1
                                                        : (M - 1) * size_t(g.lda) + K - 1);
      if (bad.empty())
        bad = outside("B", g.B, g.bt, g.tb == CUBLAS_OP_N ? (N - 1) * size_t(g.ldb) + K - 1
                                                          : (K - 1) * size_t(g.ldb) + N - 1);
    }
    if (bad.empty()) bad = outside("C", g.C, g.ct, (N - 1) * size_t(g.ldc) + M - 1);
    return bad;
  };
  if (cutrain_sim::submit(h->stream, [g, check] {
        const std::string bad = check();
        if (bad.empty()) {
          gemm(&g);
          if (g.m > 0 && g.n > 0)  // C's columns, with what lies between them (lda's rows)
            cutrain_sim::mark_written(reinterpret_cast<uintptr_t>(g.C),
                                      ((size_t(g.n) - 1) * size_t(g.ldc) + size_t(g.m)) *
                                          (g.ct == CUDA_R_16F ? 2 : 4));
          return;
        }
        cutrain_sim::fault(cudaErrorIllegalAddress,
                           "cutrain-sim: cublasGemmEx reads or writes outside its operands (an "
                           "illegal address on a GPU)\n    " + bad + "\n");
      }) != cudaSuccess)
    return CUBLAS_STATUS_EXECUTION_FAILED;
  return CUBLAS_STATUS_SUCCESS;
}
