#include "train/device.h"

#include "kernels/check.h"
#include "kernels/gpu.h"

namespace cutrain {

bool cuda_training_ops_built() { return false; }

namespace {
const char* kNoOps =
    "this build has no CUDA kernels for the training ops yet (conv2d, batchnorm, pooling, "
    "linear, the loss and the optimizer run on the CPU only until the [kernels] issue)";
}  // namespace

std::string RunDevice::describe() const {
  std::string d = device == Device::cpu ? "cpu" : "cuda:0 (" + gpu_name(0) + ")";
  return d + " " + (dtype == DType::f16 ? "fp16" : "fp32");
}

RunDevice choose_device(const std::string& device, const std::string& precision) {
  CHECK(device == "auto" || device == "cpu" || device == "cuda",
        "--device " << device << ": expected auto, cpu or cuda");
  CHECK(precision == "auto" || precision == "fp16" || precision == "fp32",
        "--precision " << precision << ": expected auto, fp16 or fp32");
  RunDevice r;
  if (device == "cuda") {
    CHECK(gpu_usable(), "--device cuda: " << gpu_unavailable_reason());
    CHECK(cuda_training_ops_built(), "--device cuda: " << kNoOps << "; use --device cpu");
    r.device = Device::cuda;
  } else if (device == "auto") {
    if (!gpu_usable()) {
      r.notice = "cutrain: running on the CPU: " + gpu_unavailable_reason();
    } else if (!cuda_training_ops_built()) {
      r.notice = "cutrain: running on the CPU: found " + gpu_name(0) + ", but " + kNoOps;
    } else {
      r.device = Device::cuda;
    }
  }
  const bool half = precision == "fp16" || (precision == "auto" && r.device == Device::cuda);
  r.dtype = half ? DType::f16 : DType::f32;
  return r;
}

}  // namespace cutrain
