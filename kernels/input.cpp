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

void input_check_crops(int N, int Hin, int Win, int S, const InputCrop* crop) {
  CHECK(S <= Hin && S <= Win, "input crop: the " << S << "x" << S << " window is larger than the "
                                                 << Hin << "x" << Win << " images");
  if (!crop) return;
  for (int n = 0; n < N; n++) {
    const InputCrop& k = crop[n];
    // in int64: top + S cannot overflow even for a garbage top
    CHECK(k.top >= 0 && k.left >= 0 && int64_t(k.top) + S <= Hin && int64_t(k.left) + S <= Win,
          "input crop: sample " << n << ": the " << S << "x" << S << " window at (top " << k.top
                                << ", left " << k.left << ") does not lie inside the " << Hin
                                << "x" << Win << " image");
  }
}

template <typename T>
void input_normalize_crop_cpu(int N, int Hin, int Win, int C, int S, const uint8_t* x,
                              const InputCrop* crop, const std::vector<float>& mean,
                              const std::vector<float>& stddev, T* y, bool mirror) {
  CHECK(N > 0 && Hin > 0 && Win > 0 && C > 0 && S > 0,
        "input normalisation: sizes must be positive, got (N,Hin,Win,C) = ("
            << N << "," << Hin << "," << Win << "," << C << ") and S = " << S);
  input_check_norm(C, mean, stddev);
  input_check_crops(N, Hin, Win, S, crop);
  using A = acc_t<T>;
  // Each thread owns whole images y[n][:][:][:].
#pragma omp parallel for schedule(static) if (worth_threads(int64_t(N) * S * S * C))
  for (int n = 0; n < N; n++) {
    const InputCrop k = crop ? crop[n] : InputCrop{};
    for (int i = 0; i < S; i++) {
      const uint8_t* xrow = x + ((int64_t(n) * Hin + k.top + i) * Win + k.left) * C;
      T* yrow = y + (int64_t(n) * S + i) * S * C;
      for (int j = 0; j < S; j++) {
        const int jj = (k.flip != 0) != mirror ? S - 1 - j : j;  // column inside the window
        for (int c = 0; c < C; c++)
          yrow[int64_t(j) * C + c] = T(input_value<A>(xrow[int64_t(jj) * C + c],
                                                      A(mean[size_t(c)]), A(stddev[size_t(c)])));
      }
    }
  }
}

template <typename T>
void input_normalize_cpu(int N, int S, int C, const uint8_t* x, const std::vector<float>& mean,
                         const std::vector<float>& stddev, T* y) {
  CHECK(N > 0 && S > 0 && C > 0, "input normalisation: sizes must be positive, got (N,S,S,C) = ("
                                     << N << "," << S << "," << S << "," << C << ")");
  input_normalize_crop_cpu<T>(N, S, S, C, S, x, nullptr, mean, stddev, y);
}

#define CUTRAIN_INSTANTIATE(T)                                                                 \
  template void input_normalize_crop_cpu<T>(int, int, int, int, int, const uint8_t*,           \
                                            const InputCrop*, const std::vector<float>&,       \
                                            const std::vector<float>&, T*, bool);              \
  template void input_normalize_cpu<T>(int, int, int, const uint8_t*,                          \
                                       const std::vector<float>&, const std::vector<float>&,   \
                                       T*);
CUTRAIN_INSTANTIATE(float)
CUTRAIN_INSTANTIATE(double)
CUTRAIN_INSTANTIATE(half_t)
#undef CUTRAIN_INSTANTIATE

}  // namespace cutrain
