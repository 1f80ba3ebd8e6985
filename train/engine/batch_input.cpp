#include "train/engine/batch_input.h"

#include "kernels/check.h"
#include "kernels/gpu.h"
#include "kernels/input.h"
#include "nn/dispatch.h"
#include "nn/gpu_context.h"

namespace cutrain {

Tensor input_tensor(const uint8_t* images, int n, int S, int C, const Normalization& norm,
                    DType dtype) {
  CHECK(int(norm.mean.size()) == C && int(norm.std.size()) == C,
        "input: " << C << " channels but " << norm.mean.size() << " means and "
                  << norm.std.size() << " standard deviations");
  const std::vector<float> mean(norm.mean.begin(), norm.mean.end());
  const std::vector<float> stddev(norm.std.begin(), norm.std.end());
  Tensor x = Tensor::empty({n, S, S, C}, dtype);  // (n,S,S,C)
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    input_normalize_cpu<T>(n, S, C, images, mean, stddev, x.data<T>());
  });
  return x;
}

// --- GPU ---------------------------------------------------------------------------------------

namespace {
// The GPU functions below need a device; without one (a CPU-only build, or no GPU answering)
// say so in the caller's words rather than deep inside a tensor allocation.
void require_gpu(const char* what) {
  CHECK(gpu_usable(), what << ": no GPU to prepare the batch on (" << gpu_unavailable_reason()
                           << "); on the CPU use input_tensor");
}
}  // namespace

DeviceNormalization::DeviceNormalization(const Normalization& norm) {
  require_gpu("DeviceNormalization");
  const int C = int(norm.mean.size());
  CHECK(C >= 1, "DeviceNormalization: no channels (the mean is empty)");
  const std::vector<float> mean(norm.mean.begin(), norm.mean.end());
  const std::vector<float> stddev(norm.std.begin(), norm.std.end());
  input_check_norm(C, mean, stddev);  // on the host: the kernel cannot report a zero stddev
  const cudaStream_t stream = gpu_context().stream;
  mean_ = Tensor::empty({C}, DType::f32, Device::cuda);  // (C) f32
  std_ = Tensor::empty({C}, DType::f32, Device::cuda);   // (C) f32
  // From locals, so wait for the copies before they go out of scope (as DeviceStep::reset
  // does: for a pageable source the CUDA docs promise little). Once per trainer or evaluation.
  copy_async(mean_.raw(), mean.data(), mean_.bytes(), stream);
  copy_async(std_.raw(), stddev.data(), std_.bytes(), stream);
  Event done;
  done.record(stream);
  done.synchronize();
}

Tensor input_tensor_gpu(const uint8_t* d_images, int n, int S, int C,
                        const DeviceNormalization& norm, DType dtype) {
  require_gpu("input_tensor_gpu");
  CHECK(norm.channels() == C, "input: " << C << " channels but " << norm.channels()
                                        << " means and standard deviations");
  CHECK(dtype == DType::f32 || dtype == DType::f16,
        "input_tensor_gpu: the input must be f32 or f16 on a GPU, got " << dtype_name(dtype));
  Tensor x = Tensor::empty({n, S, S, C}, dtype, Device::cuda);  // (n,S,S,C)
  if (n == 0) return x;
  // The loader has already cropped and flipped: the window is the whole image (crop null).
  const cudaStream_t stream = gpu_context().stream;
#if defined(CUTRAIN_CUDA)
  if (dtype == DType::f16)
    input_normalize_gpu<half_t>(n, S, S, C, S, d_images, nullptr, norm.mean(), norm.stddev(),
                                x.data<half_t>(), stream);
  else
    input_normalize_gpu<float>(n, S, S, C, S, d_images, nullptr, norm.mean(), norm.stddev(),
                               x.data<float>(), stream);
#else
  (void)d_images, (void)stream;  // unreachable: require_gpu threw
#endif
  return x;
}

Tensor labels_tensor_gpu(const int32_t* d_labels, int n) {
  require_gpu("labels_tensor_gpu");
  Tensor y = Tensor::empty({n}, DType::i32, Device::cuda);  // (n) i32
  if (n > 0) copy_async(y.raw(), d_labels, y.bytes(), gpu_context().stream);
  return y;
}

}  // namespace cutrain
