// The optimizer step on the GPU: grads_nonfinite_gpu raises the skip flag exactly when
// grads_finite_cpu says no; sgd_step_gpu and adamw_step_gpu equal sgd_step_cpu and
// adamw_step_cpu bit for bit (fp32 masters; f32 working copy, none, or fp16); and with the
// flag set, nothing changes at all.
//
// Why bit equality can be asked for: the per-element math is one CUTRAIN_HD function
// (sgd_update, adamw_update) that the CPU reference and the kernel both call, every operation
// an IEEE one rounded once in the same order (kernels/hd.h: no fma on the device, none on the
// host), the bias corrections the same double operations, and the fp16 rounding of the
// working copy round-to-nearest-even on both sides.
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/adamw.h"
#include "kernels/rng.h"
#include "kernels/sgd.h"
#include "tests/kernels/gpu_compare.h"
#include "tests/test_util.h"

using namespace cutrain;
using cutrain_test::require_same_bits;
using cutrain_test::upload;
using cutrain_test::download;

namespace {
const int64_t kN = 100003;  // odd: not a multiple of a block or of the grid
const double kInvScale = 1.0 / 1024;  // the gradients are stored scaled by 1024

// Loss-scaled gradients: ~1024 * uniform(-1, 1), stored in T.
template <typename T> std::vector<T> gradients(uint64_t seed) {
  std::vector<T> g(static_cast<size_t>(kN));
  for (int64_t i = 0; i < kN; i++)
    g[size_t(i)] = T(1024.0f * (2 * rng_uniform(seed, uint64_t(i)) - 1));
  return g;
}

std::vector<float> weights(uint64_t seed) {
  std::vector<float> w(static_cast<size_t>(kN));
  for (int64_t i = 0; i < kN; i++)
    w[size_t(i)] = std::sin(float(i)) + 0.01f * rng_normal(seed, uint64_t(i));
  return w;
}

// The working copy the CPU reference writes: T(master), or nothing (empty) for f32 without one.
template <typename T> std::vector<T> working_of(const std::vector<float>& w, bool with) {
  std::vector<T> out;
  if (with)
    for (float v : w) out.push_back(T(v));
  return out;
}

template <typename T> T* ptr(DeviceBuffer& b, bool present) {
  return present ? static_cast<T*>(b.data()) : nullptr;
}

// One device scalar.
template <typename V> DeviceBuffer scalar(V v) { return upload(std::vector<V>{v}); }
// The hyper-parameters as the GPU kernels get them: the learning rate is the device scalar, so
// the struct's is poisoned (a kernel that read it would give NaN weights).
template <typename P> P no_lr(P p) {
  p.lr = std::nan("");
  return p;
}
}  // namespace

TEST_CASE_TEMPLATE("optimizer [gpu]: grads_nonfinite_gpu raises the flag as grads_finite_cpu says",
                   T, float, half_t) {
  REQUIRE_GPU();
  Stream stream;
  std::vector<T> g = gradients<T>(1);
  const auto flag_after = [&](double inv_scale, int32_t start) {
    DeviceBuffer dg = upload(g), ds = scalar(float(inv_scale)), flag = scalar(start);
    grads_nonfinite_gpu<T>(kN, static_cast<const T*>(dg.data()),
                           static_cast<const float*>(ds.data()), static_cast<int32_t*>(flag.data()),
                           stream.get());
    stream.synchronize();
    return download<int32_t>(flag, 1)[0];
  };
  REQUIRE(grads_finite_cpu<T>(kN, g.data(), kInvScale));
  REQUIRE(flag_after(kInvScale, 0) == 0);
  REQUIRE(flag_after(kInvScale, 1) == 1);  // never cleared
  for (float bad : {NAN, INFINITY, -INFINITY}) {
    g = gradients<T>(1);
    g[77777] = T(bad);  // one element, deep inside
    REQUIRE_FALSE(grads_finite_cpu<T>(kN, g.data(), kInvScale));
    REQUIRE(flag_after(kInvScale, 0) == 1);
  }
  // the last element (the tail of the grid) counts too
  g = gradients<T>(1);
  g[size_t(kN - 1)] = T(NAN);
  REQUIRE(flag_after(kInvScale, 0) == 1);
  // finite gradients that overflow only once unscaled: 1000 * 1e36 > fp32's 3.4e38
  g.assign(size_t(kN), T(1e-3f));  // 1e-3 * 1e36 = 1e33: finite
  g[5] = T(1000.0f);
  REQUIRE_FALSE(grads_finite_cpu<T>(kN, g.data(), 1e36));
  REQUIRE(flag_after(1e36, 0) == 1);
}

TEST_CASE_TEMPLATE("sgd [gpu]: equals sgd_step_cpu bit for bit over 3 steps, and a set skip "
                   "flag changes nothing", T, float, half_t) {
  REQUIRE_GPU();
  // f32: without and with a working copy; f16: always with one
  for (bool with_working : {false, true}) {
    if (std::is_same<T, half_t>::value && !with_working) continue;
    for (const SgdParams& p :
         {SgdParams{0.1, 0.9, 5e-4, false}, SgdParams{0.05, 0.9, 1e-3, true}}) {
      INFO("working copy " << with_working << ", nesterov " << p.nesterov);
      std::vector<float> w = weights(2), v(size_t(kN), 0.0f);
      std::vector<T> work = working_of<T>(w, with_working);
      Stream stream;
      DeviceBuffer dw = upload(w), dv = upload(v), dwork = upload(work);
      DeviceBuffer ds = scalar(float(kInvScale)), skip = scalar(int32_t(0)), dlr = scalar(p.lr);
      const auto gpu_step = [&](const DeviceBuffer& dg) {
        sgd_step_gpu<T>(kN, static_cast<const T*>(dg.data()),
                        static_cast<const float*>(ds.data()),
                        static_cast<const int32_t*>(skip.data()),
                        static_cast<const double*>(dlr.data()), static_cast<float*>(dw.data()),
                        static_cast<float*>(dv.data()), ptr<T>(dwork, with_working), no_lr(p),
                        stream.get());
        stream.synchronize();
      };
      for (uint64_t step = 1; step <= 3; step++) {
        const std::vector<T> g = gradients<T>(10 + step);
        DeviceBuffer dg = upload(g);
        sgd_step_cpu<T>(kN, g.data(), kInvScale, w.data(), v.data(),
                        with_working ? work.data() : nullptr, p);
        gpu_step(dg);
        require_same_bits(download<float>(dw, size_t(kN)), w, "master");
        require_same_bits(download<float>(dv, size_t(kN)), v, "velocity");
        if (with_working) require_same_bits(download<T>(dwork, size_t(kN)), work, "working");
      }
      // skip set: a step with any gradient (here one holding a NaN) changes nothing at all
      std::vector<T> g = gradients<T>(20);
      g[3] = T(NAN);
      DeviceBuffer dg = upload(g);
      copy_sync(skip.data(), std::vector<int32_t>{1}.data(), sizeof(int32_t));
      gpu_step(dg);
      require_same_bits(download<float>(dw, size_t(kN)), w, "master after a skipped step");
      require_same_bits(download<float>(dv, size_t(kN)), v, "velocity after a skipped step");
      if (with_working)
        require_same_bits(download<T>(dwork, size_t(kN)), work, "working after a skipped step");
    }
  }
}

TEST_CASE_TEMPLATE("adamw [gpu]: equals adamw_step_cpu bit for bit, with t on the device",
                   T, float, half_t) {
  REQUIRE_GPU();
  const AdamWParams p{3e-3, 0.9, 0.999, 1e-8, 0.05};
  for (bool with_working : {false, true}) {
    if (std::is_same<T, half_t>::value && !with_working) continue;
    INFO("working copy " << with_working);
    std::vector<float> w = weights(3), m(size_t(kN), 0.0f), v(size_t(kN), 0.0f);
    std::vector<T> work = working_of<T>(w, with_working);
    Stream stream;
    DeviceBuffer dw = upload(w), dm = upload(m), dv = upload(v), dwork = upload(work);
    DeviceBuffer ds = scalar(float(kInvScale)), skip = scalar(int32_t(0)), dt = scalar(int64_t(1)),
                 dlr = scalar(p.lr);
    const auto gpu_step = [&](const DeviceBuffer& dg) {
      adamw_step_gpu<T>(kN, static_cast<const T*>(dg.data()), static_cast<const float*>(ds.data()),
                        static_cast<const int32_t*>(skip.data()),
                        static_cast<const double*>(dlr.data()), static_cast<float*>(dw.data()),
                        static_cast<float*>(dm.data()), static_cast<float*>(dv.data()),
                        ptr<T>(dwork, with_working), no_lr(p),
                        static_cast<const int64_t*>(dt.data()),
                        stream.get());
      stream.synchronize();
    };
    // the first steps (bias corrections far from 1), then two far-off step numbers
    for (int64_t t : {int64_t(1), int64_t(2), int64_t(3), int64_t(1000), int64_t(123457)}) {
      INFO("t = " << t);
      const std::vector<T> g = gradients<T>(30 + uint64_t(t));
      DeviceBuffer dg = upload(g);
      copy_sync(dt.data(), &t, sizeof(t));
      adamw_step_cpu<T>(kN, g.data(), kInvScale, w.data(), m.data(), v.data(),
                        with_working ? work.data() : nullptr, p, t);
      gpu_step(dg);
      require_same_bits(download<float>(dw, size_t(kN)), w, "master");
      require_same_bits(download<float>(dm, size_t(kN)), m, "m");
      require_same_bits(download<float>(dv, size_t(kN)), v, "v");
      if (with_working) require_same_bits(download<T>(dwork, size_t(kN)), work, "working");
    }
    // the whole device-side pipeline: a NaN in one gradient raises the flag, the step is skipped
    std::vector<T> g = gradients<T>(99);
    g[size_t(kN / 2)] = T(NAN);
    DeviceBuffer dg = upload(g);
    grads_nonfinite_gpu<T>(kN, static_cast<const T*>(dg.data()),
                           static_cast<const float*>(ds.data()),
                           static_cast<int32_t*>(skip.data()), stream.get());
    gpu_step(dg);
    REQUIRE(download<int32_t>(skip, 1)[0] == 1);
    require_same_bits(download<float>(dw, size_t(kN)), w, "master after a skipped step");
    require_same_bits(download<float>(dm, size_t(kN)), m, "m after a skipped step");
    require_same_bits(download<float>(dv, size_t(kN)), v, "v after a skipped step");
    if (with_working)
      require_same_bits(download<T>(dwork, size_t(kN)), work, "working after a skipped step");
  }
}
