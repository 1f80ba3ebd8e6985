// What the simulator's teeth tests share (sim/tests/*_teeth_test.cu): a body run under 16
// seeds, each from a clean slate, and a launch's report.
#pragma once
#include <cuda_runtime.h>
#include <cutrain_sim.h>
#include <doctest/doctest.h>

#include <string>

namespace cutrain_sim_teeth {

// body() under CUTRAIN_SIM_SEED 1 to 16 (named in a failure's message), the errors of each
// forgotten before the next; the seed back at 1 after.
template <class F> void under_16_seeds(F body) {
  for (unsigned long long seed = 1; seed <= 16; seed++) {
    INFO("CUTRAIN_SIM_SEED " << seed);
    cutrain_sim::set_seed(seed);
    cutrain_sim::reset_errors();
    body();
    cutrain_sim::reset_errors();
  }
  cutrain_sim::set_seed(1);
}

// The report of what was queued, once it has run ("": none).
inline std::string finish() {
  cudaDeviceSynchronize();
  return cutrain_sim::last_report();
}

template <class T> T* device_array(int n) {
  T* p = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&p), size_t(n) * sizeof(T)) == cudaSuccess);
  return p;
}

}  // namespace cutrain_sim_teeth
