// batchnorm through cuDNN (kernels/vendor.h): training forward, eval forward, training
// backward, in cuDNN's spatial mode. Host code; handles and checks from kernels/cudnn_util.h.
//
// Layout: cutrain's (M, C) view of NHWC activations (kernels/batchnorm.h) is given to cuDNN as
// an NHWC tensor of n = M "images" of 1x1 pixels and C channels. Spatial mode takes per-channel
// statistics over n*h*w = M values: exactly cutrain's. gamma, beta and every per-channel
// vector are fp32 for fp16 and fp32 data alike (cuDNN derives that descriptor itself, and
// cutrain keeps BN statistics in fp32).
//
// How cuDNN's outputs relate to cutrain's, checked because the names differ:
//   resultSaveMean        = the batch mean                             = save_mean
//   resultSaveInvVariance = 1 / sqrt(var + eps), var the biased batch variance (despite the
//                           name, an inverse standard deviation)         = save_invstd
//   resultRunningMean/Var = (1 - f) * running + f * batch value, f = exponentialAverageFactor,
//                           where the running variance takes the unbiased var * M / (M - 1)
//                           = running_mean / running_var with f = momentum
// So nothing needs correcting. The header (cudnn_ops.h) leaves the biased/unbiased question
// open; the answer is what frameworks rely on: PyTorch hands cuDNN's running_var and
// save_invstd through unchanged and documents running_var as unbiased, and MXNet (issue
// #21111) and onnxruntime (PR #8172) measured both. tests/kernels/vendor_gpu_test.cpp compares
// all five outputs with the CPU reference, so a cuDNN that changed this would be caught.
//
// Modes: training uses CUDNN_BATCHNORM_SPATIAL_PERSISTENT, cuDNN's faster kernels for NHWC
// (what PyTorch picks for channels-last training). The caveat in cuDNN's documentation for it
// (a scaled atomic integer reduction that may overflow on extreme inputs) is about NCHW only.
// Eval uses CUDNN_BATCHNORM_SPATIAL: there it is a per-channel affine map, nothing to reduce.
//
// Accumulation: y is written (beta = 0: not read), the backward's dx, dgamma and dbeta are
// accumulated (beta = 1), the += of the CPU reference. cuDNN's backward writes all three, so a
// gradient the caller does not want (null) goes to a scratch buffer.
#include "kernels/cudnn_util.h"

#if defined(CUTRAIN_CUDNN)

namespace cutrain {

using namespace cudnn_detail;  // this file's helpers (kernels/cudnn_util.h)

namespace {

constexpr cudnnBatchNormMode_t kTrainMode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
constexpr cudnnBatchNormMode_t kEvalMode = CUDNN_BATCHNORM_SPATIAL;

// x (M,C) as one NHWC image of M x 1 pixels (n = 1, c = C, h = M, w = 1): the same bytes, the
// statistics over the same M values. Not n = M: cuDNN's batchnorm kernels limit the batch
// dimension (PyTorch sends cuDNN no batch above 880,801 in training, 65,535 in evaluation),
// and M = N*H*W passes that at once (128 x 32 x 32 = 131,072). With the derived per-channel
// (1,C,1,1) fp32 descriptor that gamma, beta, the saved and the running statistics share.
struct BnDescs {
  TensorDesc x, param;
  BnDescs(int64_t M, int C, cudnnDataType_t dt, cudnnBatchNormMode_t mode) {
    CHECK(M >= 1 && C >= 1,
          "batchnorm (cuDNN): M and C must be positive, got M=" << M << " C=" << C);
    check_elements("batchnorm x", M * C);
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(x.get(), CUDNN_TENSOR_NHWC, dt, 1, C, int(M), 1));
    CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(param.get(), x.get(), mode));
  }
};

void check_eps(double eps) {
  CHECK(eps >= CUDNN_BN_MIN_EPSILON,
        "batchnorm (cuDNN): eps " << eps << " is below cuDNN's minimum " << CUDNN_BN_MIN_EPSILON);
}

}  // namespace

template <typename T>
void batchnorm_forward_train_cudnn(int64_t M, int C, const T* x, const float* gamma,
                                   const float* beta, double eps, double momentum, T* y,
                                   float* save_mean, float* save_invstd, float* running_mean,
                                   float* running_var, cudaStream_t stream) {
  CHECK(M >= 2, "batchnorm: training needs M >= 2 values per channel (one value has no "
                "variance), got M=" << M);
  check_eps(eps);
  const int dev = current_device();
  cudnnHandle_t h = cudnn_handle(dev, stream);
  BnDescs d(M, C, data_type<T>(), kTrainMode);
  CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
      h, kTrainMode, &kOne, &kZero, d.x.get(), x, d.x.get(), y, d.param.get(), gamma, beta,
      momentum, running_mean, running_var, eps, save_mean, save_invstd));
}

template <typename T>
void batchnorm_forward_eval_cudnn(int64_t M, int C, const T* x, const float* gamma,
                                  const float* beta, const float* running_mean,
                                  const float* running_var, double eps, T* y,
                                  cudaStream_t stream) {
  check_eps(eps);
  const int dev = current_device();
  cudnnHandle_t h = cudnn_handle(dev, stream);
  BnDescs d(M, C, data_type<T>(), kEvalMode);
  CUDNN_CHECK(cudnnBatchNormalizationForwardInference(h, kEvalMode, &kOne, &kZero, d.x.get(), x,
                                                      d.x.get(), y, d.param.get(), gamma, beta,
                                                      running_mean, running_var, eps));
}

template <typename T>
void batchnorm_backward_train_cudnn(int64_t M, int C, const T* x, const T* dy,
                                    const float* gamma, const float* save_mean,
                                    const float* save_invstd, double eps, T* dx, float* dgamma,
                                    float* dbeta, cudaStream_t stream) {
  check_eps(eps);
  const int dev = current_device();
  cudnnHandle_t h = cudnn_handle(dev, stream);
  BnDescs d(M, C, data_type<T>(), kTrainMode);
  // Scratch for the gradients not wanted: dx's is written (beta 0); the per-channel ones share
  // beta 1 with a wanted one, so cuDNN reads the scratch too: harmless, it is thrown away.
  DeviceBuffer dx_scratch, param_scratch;
  if (!dx) dx_scratch = DeviceBuffer(size_t(M) * size_t(C) * sizeof(T), dev, stream);
  if (!dgamma || !dbeta) param_scratch = DeviceBuffer(2 * size_t(C) * sizeof(float), dev, stream);
  float* scratch = static_cast<float*>(param_scratch.data());
  T* dx_out = dx ? dx : static_cast<T*>(dx_scratch.data());
  const float* beta_dx = dx ? &kOne : &kZero;
  CUDNN_CHECK(cudnnBatchNormalizationBackward(
      h, kTrainMode, &kOne, beta_dx, &kOne, &kOne, d.x.get(), x, d.x.get(), dy, d.x.get(), dx_out,
      d.param.get(), gamma, dgamma ? dgamma : scratch, dbeta ? dbeta : scratch + C, eps,
      save_mean, save_invstd));
}

}  // namespace cutrain

#else  // no cuDNN in this build: every entry point says so

namespace cutrain {

template <typename T>
void batchnorm_forward_train_cudnn(int64_t, int, const T*, const float*, const float*, double,
                                   double, T*, float*, float*, float*, float*, cudaStream_t) {
  cudnn_detail::cudnn_missing("batchnorm forward (training)");
}
template <typename T>
void batchnorm_forward_eval_cudnn(int64_t, int, const T*, const float*, const float*,
                                  const float*, const float*, double, T*, cudaStream_t) {
  cudnn_detail::cudnn_missing("batchnorm forward (eval)");
}
template <typename T>
void batchnorm_backward_train_cudnn(int64_t, int, const T*, const T*, const float*,
                                    const float*, const float*, double, T*, float*, float*,
                                    cudaStream_t) {
  cudnn_detail::cudnn_missing("batchnorm backward");
}

}  // namespace cutrain

#endif  // CUTRAIN_CUDNN

namespace cutrain {
#define CUTRAIN_INSTANTIATE(T)                                                               \
  template void batchnorm_forward_train_cudnn<T>(int64_t, int, const T*, const float*,      \
                                                 const float*, double, double, T*, float*,  \
                                                 float*, float*, float*, cudaStream_t);      \
  template void batchnorm_forward_eval_cudnn<T>(int64_t, int, const T*, const float*,       \
                                                const float*, const float*, const float*,   \
                                                double, T*, cudaStream_t);                   \
  template void batchnorm_backward_train_cudnn<T>(int64_t, int, const T*, const T*,         \
                                                  const float*, const float*, const float*, \
                                                  double, T*, float*, float*, cudaStream_t);
CUTRAIN_INSTANTIATE(float)
CUTRAIN_INSTANTIATE(half_t)
#undef CUTRAIN_INSTANTIATE
}  // namespace cutrain
