// defines: cuDNN and cuBLAS versions of conv2d, batchnorm and linear: selectable alternatives
// to cutrain's own kernels (--conv cudnn, --linear cublas) and a second reference in the tests.
//
// Same math, layouts (NHWC activations, KRSC filters, (K,C) linear weights) and accumulate
// rule (+=, through the libraries' beta = 1) as the CPU references; T = float or half_t, sums
// in fp32. Device pointers, queued on `stream`. One library handle per (device, thread), bound
// to the stream at each call; every library call is checked with file:line.
//
// cudnn_built() / cublas_built() say whether this build has the library (cuDNN is optional:
// the Makefile enables it when cudnn.h is found); calling a function of a library the build
// lacks throws cutrain::Error saying so.
#pragma once
#include <cstdint>

#include "kernels/conv2d.h"
#include "kernels/gpu.h"
#include "kernels/half.h"
#include "kernels/launch_plan.h"

namespace cutrain {

bool cudnn_built();
bool cublas_built();

// Launch costs: the conv2d and linear entry points below cost what conv2d_*_gpu_cost and
// linear_*_gpu_cost (conv2d.h, linear.h) say for ConvImpl::cudnn and LinearImpl::cublas; the
// rest have theirs here. Every count is a library call's: launches: estimated until a GPU
// profile confirms (the library picks its kernels per shape and GPU).

// conv2d through cuDNN (kernels/cudnn.cpp); the algorithm is cuDNN's fastest for the shape,
// found once per shape and remembered, within a workspace cap.
template <typename T>
void conv2d_forward_cudnn(const Conv2dShape& s, const T* x, const T* w, const T* b, T* y,
                          cudaStream_t stream);
template <typename T>
void conv2d_backward_data_cudnn(const Conv2dShape& s, const T* dy, const T* w, T* dx,
                                cudaStream_t stream);
template <typename T>
void conv2d_backward_filter_cudnn(const Conv2dShape& s, const T* x, const T* dy, T* dw, T* db,
                                  cudaStream_t stream);

// batchnorm through cuDNN (kernels/cudnn_batchnorm.cpp; spatial mode over M = N*H*W pixels):
// the arguments of batchnorm_forward_train_cpu and friends (kernels/batchnorm.h); per-channel
// values in fp32.
template <typename T>
void batchnorm_forward_train_cudnn(int64_t M, int C, const T* x, const float* gamma,
                                   const float* beta, double eps, double momentum, T* y,
                                   float* save_mean, float* save_invstd, float* running_mean,
                                   float* running_var, cudaStream_t stream);
// 1 call (cudnnBatchNormalizationForwardTraining): counted as 1 kernel reading x twice.
inline LaunchCost batchnorm_forward_train_cudnn_cost(int64_t M, int C, size_t elem) {
  return {"batchnorm_forward_train cudnn", 1, 3 * nbytes(M * C, elem), 8.0 * double(M * C),
          false, true};
}
template <typename T>
void batchnorm_forward_eval_cudnn(int64_t M, int C, const T* x, const float* gamma,
                                  const float* beta, const float* running_mean,
                                  const float* running_var, double eps, T* y,
                                  cudaStream_t stream);
// 1 call (cudnnBatchNormalizationForwardInference): 1 kernel, x read, y written.
inline LaunchCost batchnorm_forward_eval_cudnn_cost(int64_t M, int C, size_t elem) {
  return {"batchnorm_forward_eval cudnn", 1, 2 * nbytes(M * C, elem), 4.0 * double(M * C),
          false, true};
}
template <typename T>
void batchnorm_backward_train_cudnn(int64_t M, int C, const T* x, const T* dy,
                                    const float* gamma, const float* save_mean,
                                    const float* save_invstd, double eps, T* dx, float* dgamma,
                                    float* dbeta, cudaStream_t stream);
// 1 call (cudnnBatchNormalizationBackward): counted as 1 kernel reading x and dy twice, dx
// read and written (or only written, into scratch, when dx is not wanted).
inline LaunchCost batchnorm_backward_train_cudnn_cost(int64_t M, int C, size_t elem, bool dx) {
  return {"batchnorm_backward_train cudnn", 1, (dx ? 6 : 5) * nbytes(M * C, elem),
          12.0 * double(M * C), false, true};
}

// linear through cuBLAS (kernels/cublas.cpp): cublasGemmEx, fp32 compute.
template <typename T>
void linear_forward_cublas(int N, int C, int K, const T* x, const T* w, const T* b, T* y,
                           cudaStream_t stream);
template <typename T>
void linear_backward_cublas(int N, int C, int K, const T* x, const T* w, const T* dy, T* dx,
                            T* dw, T* db, cudaStream_t stream);

// A plain row-major GEMM, C (M x N) = A (M x K) * B (K x N), fp16 in, fp32 compute, fp16 out:
// the tensor-core ceiling the kernel benchmark measures in the same run.
void gemm_f16_cublas(int M, int N, int K, const half_t* A, const half_t* B, half_t* C,
                     cudaStream_t stream);
// 1 call (cublasGemmEx): A and B read, C written, 2*M*N*K tensor flops.
inline LaunchCost gemm_f16_cublas_cost(int M, int N, int K) {
  const double m = M, n = N, k = K;
  return {"gemm_f16 cublas", 1, nbytes(int64_t(M) * K + int64_t(K) * N + int64_t(M) * N, 2),
          2 * m * n * k, true, true};
}

}  // namespace cutrain
