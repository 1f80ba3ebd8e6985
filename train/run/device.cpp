#include "train/run/device.h"

#include <string>

#include "kernels/check.h"
#include "kernels/gpu.h"

namespace cutrain {

std::string RunDevice::describe() const {
  std::string d = device == Device::cpu
                      ? "cpu"
                      : "cuda:" + std::to_string(gpu) + " (" + gpu_name(gpu) + ")";
  return d + " " + (dtype == DType::f16 ? "fp16" : "fp32");
}

RunDevice choose_device(const std::string& device, const std::string& precision) {
  USER_CHECK(device == "auto" || device == "cpu" || device == "cuda",
        "--device " << device << ": expected auto, cpu or cuda");
  USER_CHECK(precision == "auto" || precision == "fp16" || precision == "fp32",
        "--precision " << precision << ": expected auto, fp16 or fp32");
  RunDevice r;
  if (device == "cuda") {
    // gpu_usable() is false in a CPU-only build, and its reason says so.
    USER_CHECK(gpu_usable(), "--device cuda: " << gpu_unavailable_reason());
    r.device = Device::cuda;
  } else if (device == "auto") {
    if (gpu_usable())
      r.device = Device::cuda;
    else
      r.notice = "cutrain: running on the CPU: " + gpu_unavailable_reason();
  }
  const bool half = precision == "fp16" || (precision == "auto" && r.device == Device::cuda);
  r.dtype = half ? DType::f16 : DType::f32;
  return r;
}

}  // namespace cutrain
