#include "train/batch_input.h"

#include "kernels/check.h"
#include "nn/dispatch.h"

namespace cutrain {

Tensor input_tensor(const uint8_t* images, int n, int S, int C, const Normalization& norm,
                    DType dtype) {
  CHECK(int(norm.mean.size()) == C && int(norm.std.size()) == C,
        "input: " << C << " channels but " << norm.mean.size() << " means and "
                  << norm.std.size() << " standard deviations");
  // y = pixel * scale[c] + shift[c], with scale = 1 / (255 std), shift = -mean / std.
  std::vector<float> scale(static_cast<size_t>(C)), shift(static_cast<size_t>(C));
  for (int c = 0; c < C; c++) {
    scale[size_t(c)] = float(1.0 / (255.0 * norm.std[size_t(c)]));
    shift[size_t(c)] = float(-norm.mean[size_t(c)] / norm.std[size_t(c)]);
  }
  Tensor x = Tensor::empty({n, S, S, C}, dtype);  // (n,S,S,C)
  const int64_t pixels = int64_t(n) * S * S;
  dispatch_float(dtype, [&](auto tag) {
    using T = decltype(tag);
    T* out = x.data<T>();
    for (int64_t p = 0; p < pixels; p++)
      for (int c = 0; c < C; c++) {
        const size_t i = size_t(p) * size_t(C) + size_t(c);
        out[i] = T(float(images[i]) * scale[size_t(c)] + shift[size_t(c)]);
      }
  });
  return x;
}

}  // namespace cutrain
