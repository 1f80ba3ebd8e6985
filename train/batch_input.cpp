#include "train/batch_input.h"

#include "kernels/check.h"
#include "kernels/input.h"
#include "nn/dispatch.h"

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

}  // namespace cutrain
