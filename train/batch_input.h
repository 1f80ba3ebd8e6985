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

}  // namespace cutrain
