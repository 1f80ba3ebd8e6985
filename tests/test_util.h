// defines: what the tests share: skip() and REQUIRE_GPU() for tests that cannot run here,
// random tensors, gradcheck(), the finite-difference gradient checker, and the vector helpers
// to<T>(), doubles(), require_near() and require_equal().
#pragma once
#include <doctest/doctest.h>
// CHECK is cutrain's argument check (kernels/check.h), not doctest's: tests assert with REQUIRE.
#include "kernels/check.h"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "kernels/gpu.h"
#include "kernels/vendor.h"  // cudnn_built, for REQUIRE_CUDNN
#include "nn/autograd.h"

namespace cutrain_test {

// Marks the running test case as skipped (counted apart, the reason printed once at the end).
void skip(const std::string& reason);
// REQUIRE_GPU's answer when no device is usable: skip() with the reason, or, when the
// environment says CUTRAIN_EXPECT_GPU=1 (bench/bundle/run.sh sets it on a host whose
// nvidia-smi lists a GPU), a failure: there a skipped GPU test means the GPU side went unchecked.
void skip_gpu();

// The folder this test binary runs from (bin/, beside bin/cutrain), and the repository above
// it: where tests find the programs they run and the repository's files they read, whatever
// the working directory.
std::filesystem::path bin_dir();
std::filesystem::path repo_root();

// The context GPU tests run in unless they make a stream of their own (nn/context.h): the
// legacy default stream, the default kernels (tc), the current device.
inline cutrain::Context test_gpu() { return cutrain::Context::cuda(nullptr); }

// A tensor of `shape` with values uniform in [lo, hi), a pure function of seed.
cutrain::Tensor uniform(const cutrain::Shape& shape, cutrain::DType dtype, uint64_t seed,
                        double lo = -1, double hi = 1);

// Finite-difference gradient check, in double.
//
// f builds an op graph on the tape from the leaves and returns its output. The check takes
// L = sum(out * R) for a fixed random R, computes dL/dleaf by backward, and compares every
// element with the central difference (L(x+h) - L(x-h)) / 2h. Where a coordinate sits on a
// kink (ReLU at 0, a max-pool tie) the two one-sided differences disagree; such coordinates
// are stepped around (not compared, counted), and a check that had to skip more than a tenth
// of them fails, so it cannot pass vacuously.
struct GradCheckOptions {
  double h = 1e-6;
  double atol = 1e-7;
  double rtol = 1e-6;
};
struct GradCheckStats {
  size_t checked = 0;  // coordinates compared
  size_t kinks = 0;    // coordinates stepped around
};
GradCheckStats gradcheck(
    const std::function<cutrain::VarPtr(cutrain::Tape&, const std::vector<cutrain::VarPtr>&)>& f,
    const std::vector<cutrain::VarPtr>& leaves, GradCheckOptions opt = {});

// Test data is written as doubles; to<T>() stores it in a kernel's type, doubles() reads the
// result back, so every comparison below is in double.

// Each value converted to T (rounded to nearest even for half_t).
template <typename T> std::vector<T> to(const std::vector<double>& v) {
  std::vector<T> out;
  for (double d : v) out.push_back(T(d));
  return out;
}

// Class labels with counts[k] samples of class k, interleaved (as in a shuffled list):
// 0, 1, 2, 0, 1, 2, ... until the smaller classes run out.
inline std::vector<int32_t> interleaved_labels(const std::vector<int>& counts) {
  std::vector<int32_t> labels;
  std::vector<int> left = counts;
  for (bool any = true; any;) {
    any = false;
    for (size_t k = 0; k < left.size(); k++)
      if (left[k] > 0) labels.push_back(int32_t(k)), left[k]--, any = true;
  }
  return labels;
}

// Each value widened to double: exact for half_t, float and double.
template <typename T> std::vector<double> doubles(const std::vector<T>& v) {
  std::vector<double> out;
  for (const T& t : v) out.push_back(static_cast<double>(t));
  return out;
}

// Element by element, |got-want| <= atol + rtol*|want|; a failure names the element.
void require_near(const std::vector<double>& got, const std::vector<double>& want, double atol,
                  double rtol = 0);

// Element by element, exactly; a failure names the element.
void require_equal(const std::vector<double>& got, const std::vector<double>& want);

// require_near() on the values of a tensor.
void require_close(const cutrain::Tensor& got, const std::vector<double>& want,
                   double atol, double rtol = 0);

// Whether the GPU is the simulator's (`make SIM=1`, sim/README.md): its "GPU" is the host, about
// a thousand times slower, so a GPU test too slow there runs a smaller case (sim_or()), never a
// weaker assertion; and whatever shows the device says "simulated".
#if defined(CUTRAIN_SIM)
inline constexpr bool kSimulated = true;
#else
inline constexpr bool kSimulated = false;
#endif
// `on_gpu`, or `simulated` under the simulator: a test's size.
template <class T> constexpr T sim_or(T on_gpu, T simulated) {
  return kSimulated ? simulated : on_gpu;
}

}  // namespace cutrain_test

// First line of a test that needs a CUDA device: skips it, with the reason, when there is none
// (fails it under CUTRAIN_EXPECT_GPU=1: skip_gpu).
#define REQUIRE_GPU()                                              \
  do {                                                             \
    if (!::cutrain::gpu_usable()) {                                \
      ::cutrain_test::skip_gpu();                                  \
      return;                                                      \
    }                                                              \
  } while (0)

// First line of a test of cuDNN's paths: REQUIRE_GPU(), then a skip, with the reason, in a
// build without cuDNN (the GPU simulator's has none: it is not simulated).
#if defined(CUTRAIN_SIM)
#define CUTRAIN_NO_CUDNN "cuDNN is not simulated (the GPU simulator's build)"
#else
#define CUTRAIN_NO_CUDNN "this build has no cuDNN (cudnn.h was not found at build time)"
#endif
#define REQUIRE_CUDNN()                                            \
  do {                                                             \
    REQUIRE_GPU();                                                 \
    if (!::cutrain::cudnn_built()) {                               \
      ::cutrain_test::skip(CUTRAIN_NO_CUDNN);                      \
      return;                                                      \
    }                                                              \
  } while (0)

// Asserts that `expr` throws cutrain::Error whose message contains `needle`.
#define REQUIRE_ERROR(expr, needle)                                              \
  do {                                                                           \
    std::string cutrain_msg_;                                                    \
    try {                                                                        \
      (void)(expr);                                                              \
    } catch (const ::cutrain::Error& e) {                                        \
      cutrain_msg_ = e.what();                                                   \
    }                                                                            \
    INFO("message: " << cutrain_msg_);                                           \
    REQUIRE_MESSAGE(!cutrain_msg_.empty(), "expected cutrain::Error from " #expr); \
    REQUIRE(cutrain_msg_.find(needle) != std::string::npos);                     \
  } while (0)

// Asserts that `expr` throws cutrain::UserError (the user's mistake: a flag, a file, the data,
// the disk) whose message contains `needle` and names no source file (no "file.cpp:123").
#define REQUIRE_USER_ERROR(expr, needle)                                         \
  do {                                                                           \
    std::string cutrain_msg_;                                                    \
    bool cutrain_user_ = false;                                                  \
    try {                                                                        \
      (void)(expr);                                                              \
    } catch (const ::cutrain::UserError& e) {                                    \
      cutrain_msg_ = e.what(), cutrain_user_ = true;                             \
    } catch (const ::cutrain::Error& e) {                                        \
      cutrain_msg_ = e.what();                                                   \
    }                                                                            \
    INFO("message: " << cutrain_msg_);                                           \
    REQUIRE_MESSAGE(!cutrain_msg_.empty(), "expected cutrain::UserError from " #expr); \
    REQUIRE_MESSAGE(cutrain_user_, "a cutrain::Error, not a UserError, from " #expr); \
    REQUIRE(cutrain_msg_.find(needle) != std::string::npos);                     \
    REQUIRE(!::cutrain_test::names_source_location(cutrain_msg_));               \
  } while (0)

namespace cutrain_test {
// Whether a message holds a source location: "something.cpp:123" or ".h:12" or ".cu:7".
bool names_source_location(const std::string& message);
// How many times `needle` occurs in `text` (overlapping occurrences counted).
size_t count_of(const std::string& text, const std::string& needle);
}  // namespace cutrain_test
