// input conversion CPU reference (math in input.h).
#include "kernels/input.h"

#include <cmath>

#include "kernels/check.h"
#include "kernels/parallel.h"

namespace cutrain {

void input_check_norm(int C, const std::vector<float>& mean, const std::vector<float>& stddev) {
  CHECK(mean.size() == size_t(C), "input normalisation: mean has " << mean.size()
                                      << " values but the images have " << C << " channel"
                                      << (C == 1 ? "" : "s"));
  CHECK(stddev.size() == size_t(C), "input normalisation: std has " << stddev.size()
                                     << " values but the images have " << C << " channel"
                                     << (C == 1 ? "" : "s"));
  for (int c = 0; c < C; c++) {
    CHECK(std::isfinite(mean[size_t(c)]),
          "input normalisation: mean[" << c << "] = " << mean[size_t(c)] << " is not finite");
    CHECK(std::isfinite(stddev[size_t(c)]) && stddev[size_t(c)] > 0,
          "input normalisation: std[" << c << "] = " << stddev[size_t(c)]
                                      << " must be a finite number > 0");
  }
}

template <typename T>
void input_normalize_cpu(int N, int S, int C, const uint8_t* x, const std::vector<float>& mean,
                         const std::vector<float>& stddev, T* y) {
  CHECK(N > 0 && S > 0 && C > 0, "input normalisation: sizes must be positive, got (N,S,S,C) = ("
                                     << N << "," << S << "," << S << "," << C << ")");
  input_check_norm(C, mean, stddev);
  using A = acc_t<T>;
  const int64_t pixels = int64_t(S) * S;  // of one image
  // Each thread owns whole images y[n][:][:][:].
#pragma omp parallel for schedule(static) if (worth_threads(N * pixels * C))
  for (int n = 0; n < N; n++)
    for (int64_t i = 0; i < pixels; i++) {
      const int64_t at = (n * pixels + i) * C;  // x[n][h][w][:] with i = h*S + w
      for (int c = 0; c < C; c++)
        y[at + c] = T((A(x[at + c]) / A(255) - A(mean[size_t(c)])) / A(stddev[size_t(c)]));
    }
}

#define CUTRAIN_INSTANTIATE(T)                                                             \
  template void input_normalize_cpu<T>(int, int, int, const uint8_t*,                      \
                                       const std::vector<float>&, const std::vector<float>&, \
                                       T*);
CUTRAIN_INSTANTIATE(float)
CUTRAIN_INSTANTIATE(double)
CUTRAIN_INSTANTIATE(half_t)
#undef CUTRAIN_INSTANTIATE

}  // namespace cutrain
