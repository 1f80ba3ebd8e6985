// defines: Normalization and input_tensor: a loader batch (uint8 NHWC) as the model's input,
// normalised per channel, in the model's dtype.
//
// math: x[n][h][w][c] = (pixel / 255 - mean[c]) / std[c]: kernels/input.h (input_normalize_cpu)
// on the tensor of a new batch.
#pragma once
#include <cstdint>
#include <vector>

#include "nn/tensor.h"

namespace cutrain {

struct Normalization {
  std::vector<double> mean, std;  // per channel, of pixel / 255
};

// images (n,S,S,C) uint8 -> (n,S,S,C) tensor of `dtype` (f32 or f16) on the CPU.
Tensor input_tensor(const uint8_t* images, int n, int S, int C, const Normalization& norm,
                    DType dtype);

// --- GPU (a loader's batch already on the device: Batch::d_images, d_labels) ---------------
// Everything is queued on this thread's GpuContext stream (nn/gpu_context.h), on the current
// device; nothing waits. In a CPU-only build these throw (no device).

// The per-channel mean and std as device f32 arrays, uploaded once (input_normalize_gpu reads
// them).
class DeviceNormalization {
 public:
  explicit DeviceNormalization(const Normalization& norm);
  int channels() const { return int(mean_.numel()); }
  const float* mean() const { return mean_.data<float>(); }
  const float* stddev() const { return std_.data<float>(); }

 private:
  Tensor mean_, std_;  // (C) f32 cuda
};

// images (n,S,S,C) uint8 on the device -> a new (n,S,S,C) cuda tensor of `dtype` (f32 or f16):
// input_normalize_gpu, the same bits as input_tensor on the host bytes.
Tensor input_tensor_gpu(const uint8_t* d_images, int n, int S, int C,
                        const DeviceNormalization& norm, DType dtype);
// labels (n) int32 on the device -> a new (n) i32 cuda tensor (a device-to-device copy): the
// tensor owns its memory, so the loader may refill its slot once the stream has passed it.
// The labels must have been checked on the host (the loader's labels come from a checked list).
Tensor labels_tensor_gpu(const int32_t* d_labels, int n);

}  // namespace cutrain
