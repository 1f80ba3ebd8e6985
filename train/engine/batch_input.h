// defines: model_input, the one conversion of a loader batch into the model's input, which
// training, evaluation and prediction all call; InputNorm, the normalisation it applies, where
// each device reads it; Normalization, its values as a run's configuration holds them.
//
// math: x[n][i][j][c] = (image[n][top+i][jj][c] / 255 - mean[c]) / std[c],
//       jj = flip ? left + S-1-j : left + j, (top, left, flip) = batch.crops[n]
// The loader delivers each image uncut (data/image.h: the crop window with its margin, P x P)
// and the window's place in it; the crop, the flip and the normalisation are one pass of one
// kernel (kernels/input.h): input_normalize_crop_cpu on the host, input_normalize_gpu on the
// device, the same bits (input_value is one formula for both).
#pragma once
#include <cstdint>
#include <vector>

#include "data/loader.h"
#include "nn/tensor.h"

namespace cutrain {

struct Normalization {
  std::vector<double> mean, std;  // per channel, of pixel / 255
};

// The normalisation as the input kernels read it: mean and std as f32 on the host, checked
// (input_check_norm: C finite values, every std > 0), and, made in a GPU context, their copies
// on its device: uploaded once, on its stream, waited for (throws without a GPU).
class InputNorm {
 public:
  InputNorm() = default;
  explicit InputNorm(const Normalization& norm, const Context& in = Context::cpu());

  int channels() const { return int(mean_.size()); }
  const Normalization& values() const { return values_; }
  const std::vector<float>& mean() const { return mean_; }
  const std::vector<float>& stddev() const { return std_; }
  bool on_gpu() const { return d_mean_.defined(); }
  const float* device_mean() const { return d_mean_.data<float>(); }    // (C) f32 cuda
  const float* device_stddev() const { return d_std_.data<float>(); }   // (C) f32 cuda

 private:
  Normalization values_;
  std::vector<float> mean_, std_;  // (C)
  Tensor d_mean_, d_std_;          // (C) f32 cuda, when made for cuda
};

// The model's input and labels for images [begin, begin + n) of a batch.
struct ModelInput {
  Tensor x;       // (n,S,S,C) in the model's dtype, made in context `in`
  Tensor labels;  // (n) i32, made in `in`: a copy (the loader may refill its slot afterwards)
};

// The one conversion. Where it computes follows where the batch is:
//  - on the GPU when `in` is a GPU context and the loader copied the batch there
//    (Batch::d_images): input_normalize_gpu on in's stream, which next() made wait for the
//    copy; nothing waits. The crop windows are checked on the host first (input_check_crops
//    on Batch::crops, the table the device holds a copy of). norm must be made for cuda.
//    dtype f32 or f16.
//  - else on the CPU (input_normalize_crop_cpu; dtype f32, f16 or f64), then, for a model on
//    a GPU, copied there (predict: a batch the loader kept on the host).
// Batch::crops (and d_crops) may be null: every window at (0, 0), unflipped (P = S). n = 0
// gives empty tensors. mirror: every image mirrored left to right after its own flip (the
// second half of a test-time flip: train/engine/evaluate.h). Throws (CHECK) for a range outside the batch, a window outside its
// image or channels that do not match the normalisation's.
ModelInput model_input(const Batch& batch, int begin, int n, const InputNorm& norm, DType dtype,
                       const Context& in, bool mirror = false);

}  // namespace cutrain
