// defines: since() and median(), how the CPU benchmarks time: a steady clock, and the median
// of the repetitions after a warm-up (the GPU benchmarks use CUDA events: gpu_timing.h).
#pragma once
#include <algorithm>
#include <chrono>
#include <vector>

namespace bench {

using Clock = std::chrono::steady_clock;

// Seconds since t0.
inline double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The median of v (the upper one of an even count).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace bench
