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

namespace cutrain {

bool cudnn_built();
bool cublas_built();

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
template <typename T>
void batchnorm_forward_eval_cudnn(int64_t M, int C, const T* x, const float* gamma,
                                  const float* beta, const float* running_mean,
                                  const float* running_var, double eps, T* y,
                                  cudaStream_t stream);
template <typename T>
void batchnorm_backward_train_cudnn(int64_t M, int C, const T* x, const T* dy,
                                    const float* gamma, const float* save_mean,
                                    const float* save_invstd, double eps, T* dx, float* dgamma,
                                    float* dbeta, cudaStream_t stream);

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

}  // namespace cutrain
