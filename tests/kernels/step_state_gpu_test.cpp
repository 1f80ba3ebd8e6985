// The step-state kernels (kernels/step_state.h) on the GPU: step_decide_gpu and
// step_finish_gpu walk the CPU functions' states bit for bit over a long random run of flags
// (bounds, growth and backoff included); loss_seed_gpu and scalar_accumulate_gpu give the CPU's
// bits. All are the same CUTRAIN_HD functions over hd.h's once-rounded operations, run by one
// thread, so equality is exact.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/rng.h"
#include "kernels/step_state.h"
#include "tests/kernels/gpu_compare.h"
#include "tests/kernels/step_state_compare.h"
#include "tests/test_util.h"

using namespace cutrain;
using cutrain_test::require_same_state;

namespace {

// The device state, after waiting for the stream (a synchronous copy after the wait).
StepState read_state(const DeviceBuffer& d, Stream& stream) {
  stream.synchronize();
  StepState s;
  copy_sync(&s, d.data(), sizeof s);
  return s;
}
}  // namespace

TEST_CASE("step state [gpu]: step_set_lr_gpu, step_decide_gpu and step_finish_gpu equal the CPU "
          "over random flags") {
  REQUIRE_GPU();
  LossScalerConfig small;  // x2 after 3 clean steps, within [1, 32]: every rule is hit often
  small.init = 8, small.min_scale = 1, small.max_scale = 32, small.growth_interval = 3;
  LossScalerConfig odd = small;  // factors and bounds that are no powers of two
  odd.init = 24, odd.growth = 3, odd.backoff = 0.25, odd.min_scale = 0.75, odd.max_scale = 500;
  LossScalerConfig fixed = small;
  fixed.dynamic = false;
  for (const LossScalerConfig& c : {small, odd, fixed, LossScalerConfig{}}) {
    INFO("init " << c.init << ", dynamic " << c.dynamic);
    const int P = 37;
    Stream stream;
    LossScalerState sc;
    sc.scale = c.init;
    StepState cpu = step_state_make(sc, 5);
    DeviceBuffer dstate(sizeof(StepState)), dflags(size_t(P) * sizeof(int32_t));
    copy_async(dstate.data(), &cpu, sizeof cpu, stream.get());
    stream.synchronize();  // before cpu, the copy's source, changes
    std::vector<int32_t> flags(static_cast<size_t>(P), 0);
    for (uint64_t step = 0; step < 400; step++) {
      INFO("step " << step);
      // about a third of the steps overflow, in one or a few parameters (the last included)
      flags.assign(size_t(P), 0);
      if (rng_uniform(21, step) < 0.35f) {
        const int count = 1 + int(rng_uniform(22, step) * 3);
        for (int k = 0; k < count; k++)
          flags[size_t(rng_uniform(23, step, uint64_t(k)) * P) % size_t(P)] = 1;
      }
      copy_async(dflags.data(), flags.data(), flags.size() * sizeof(int32_t), stream.get());
      const double lr = 0.1 * rng_uniform(24, step);  // the step's learning rate
      step_set_lr_gpu(static_cast<StepState*>(dstate.data()), lr, stream.get());
      step_set_lr_cpu(&cpu, lr);
      step_decide_gpu(P, static_cast<const int32_t*>(dflags.data()),
                      static_cast<StepState*>(dstate.data()), stream.get());
      step_decide_cpu(P, flags.data(), &cpu);
      require_same_state(read_state(dstate, stream), cpu);  // also: flags outlived the copy
      step_finish_gpu(c, static_cast<StepState*>(dstate.data()), stream.get());
      step_finish_cpu(c, &cpu);
      require_same_state(read_state(dstate, stream), cpu);
    }
    REQUIRE(cpu.scaler.skipped_total > 50);  // the run did overflow, often
    REQUIRE(cpu.steps_taken > 150);
  }
}

TEST_CASE("step state [gpu]: loss_seed_gpu and scalar_accumulate_gpu equal the CPU") {
  REQUIRE_GPU();
  Stream stream;
  DeviceBuffer dstate(sizeof(StepState)), dout(sizeof(float)), dx(sizeof(float)),
      dacc(sizeof(double));
  for (uint64_t i = 0; i < 200; i++) {
    INFO("draw " << i);
    LossScalerState sc;
    // powers of two and arbitrary scales; shares like 1/k (micro-batches) and arbitrary ones
    sc.scale = i % 2 ? std::ldexp(1.0, int(i % 25)) : 1 + 70000 * double(rng_uniform(31, i));
    const double share = i % 3 ? 1.0 / double(1 + i % 7) : double(rng_uniform(32, i));
    const StepState s = step_state_make(sc, 0);
    copy_async(dstate.data(), &s, sizeof s, stream.get());
    loss_seed_gpu(static_cast<const StepState*>(dstate.data()), share,
                  static_cast<float*>(dout.data()), stream.get());
    float want = 0;
    loss_seed_cpu(&s, share, &want);
    stream.synchronize();
    REQUIRE(cutrain_test::bits_of(cutrain_test::download<float>(dout, 1)[0]) ==
            cutrain_test::bits_of(want));

    // acc += x * w over a few micro-batches, starting from an arbitrary value
    double acc = 10 * (rng_uniform(33, i) - 0.5f);
    copy_async(dacc.data(), &acc, sizeof acc, stream.get());
    stream.synchronize();  // before acc, the copy's source, changes
    for (uint64_t k = 0; k < 4; k++) {
      const float x = 100 * rng_normal(34, i, k);
      const double w = 1.0 / 3 + double(k);
      copy_async(dx.data(), &x, sizeof x, stream.get());
      scalar_accumulate_gpu(static_cast<const float*>(dx.data()), w,
                            static_cast<double*>(dacc.data()), stream.get());
      scalar_accumulate_cpu(&x, w, &acc);
      stream.synchronize();  // before x (the copy's source) goes out of scope
    }
    REQUIRE(cutrain_test::download<double>(dacc, 1)[0] == acc);  // the same double
  }
}
