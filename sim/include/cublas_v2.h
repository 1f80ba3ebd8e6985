// The simulator's <cublas_v2.h>: the handle calls cutrain makes and cublasGemmEx, computed on
// the handle's stream by plain loops in fp32 (sim/cublas.cpp). Enough for cutrain's cuBLAS path
// to run under the simulator; it says nothing about cuBLAS's own kernels.
#pragma once
#include "cuda_runtime.h"

struct cublasContext;
typedef cublasContext* cublasHandle_t;
enum cublasStatus_t {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
};
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum cublasMath_t {
  CUBLAS_DEFAULT_MATH = 0,
  CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION = 16,
};
enum cublasComputeType_t { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_TF32 = 77 };
enum cublasGemmAlgo_t { CUBLAS_GEMM_DEFAULT = -1 };

cublasStatus_t cublasCreate(cublasHandle_t* h);
cublasStatus_t cublasDestroy(cublasHandle_t h);
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s);
cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode);
cublasStatus_t cublasSetWorkspace(cublasHandle_t h, void* ws, size_t bytes);
const char* cublasGetStatusString(cublasStatus_t s);
// C = alpha op(A) op(B) + beta C, column-major; alpha and beta are host floats (read now).
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                            int n, int k, const void* alpha, const void* A, cudaDataType at,
                            int lda, const void* B, cudaDataType bt, int ldb, const void* beta,
                            void* C, cudaDataType ct, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo);
