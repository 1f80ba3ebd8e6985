#include "train/setup/device.h"

#include <algorithm>
#include <string>
#include <thread>

#include "kernels/check.h"
#include "kernels/gpu.h"
#include "kernels/parallel.h"
#include "train/replicas/mpi.h"
#include "train/setup/config.h"

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

int share_compute_threads(int cores, int hw, int processes, int side_by_side) {
  const int n = std::min(cores, hw / std::max(1, processes)) / std::max(1, side_by_side);
  return std::clamp(n, 1, kMaxThreads);
}

int cpu_replicas_side_by_side(const TrainConfig& cfg, const RunDevice& device) {
  return cfg.sync_bn && device.device == Device::cpu ? replica_count(cfg) : 1;
}

int run_compute_threads(const TrainConfig& cfg, const RunDevice& device) {
  if (cfg.compute_threads > 0) return cfg.compute_threads;
  return share_compute_threads(default_compute_threads(),
                               std::max(1, int(std::thread::hardware_concurrency())),
                               device.mpi ? device.mpi->local_size() : 1,
                               cpu_replicas_side_by_side(cfg, device));
}

int inference_compute_threads(const TrainConfig& cfg) {
  const int here = std::min(default_compute_threads(), kMaxThreads);
  return cfg.compute_threads > 0 ? std::min(cfg.compute_threads, here) : here;
}

int run_decode_threads(int threads, const RunDevice& device, int loaders) {
  if (threads <= 0) {
    const int hw = std::max(1, int(std::thread::hardware_concurrency()));
    threads = device.device == Device::cpu ? hw : std::max(1, hw - 1);
  }
  return std::max(1, threads / std::max(1, loaders));
}

}  // namespace cutrain
