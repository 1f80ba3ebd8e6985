// defines: what the parts of bench_kernels_gpu share (CUDA and simulator builds):
//   time_gpu()      median ms of one call, CUDA events after warm-up
//   DeviceArray<T>  typed device memory, filled from host vectors, read back
//   random_vec()    host data from the counter-based RNG (the same on any thread count)
//   compare()       a GPU result against its CPU reference, within a tolerance
//   Report          markdown to stdout (and --out), rows kept for --json
//   ms_heading()    "ms", or under the simulator "ms (simulated, meaningless)"
#pragma once
#include <cuda_runtime.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "kernels/check.h"
#include "kernels/gpu.h"
#include "kernels/half.h"
#include "kernels/rng.h"

namespace cutrain {

struct TimingOptions {
  int warmup = 3;    // untimed calls first: clocks up, caches and the allocator warm
  int repeats = 15;  // timed repeats; the median is reported
};

// Median milliseconds of one call of f, which queues work on `stream`. A first timed call
// picks how many calls one repeat holds (at least ~1 ms of work, at most 1000 calls): a kernel
// of a few microseconds timed alone would mostly measure the event resolution (~0.5 us).
// Calls run back to back, so launch overhead is hidden as in a training step.
inline double time_gpu(cudaStream_t stream, const TimingOptions& o,
                       const std::function<void()>& f) {
  for (int i = 0; i < o.warmup; i++) f();
  Event a(true), b(true);
  a.record(stream);
  f();
  b.record(stream);
  b.synchronize();
  const double once = std::max(1e-3, double(b.ms_since(a)));
  const int inner = int(std::min(1000.0, std::ceil(1.0 / once)));
  std::vector<Event> start, stop;
  start.reserve(size_t(o.repeats)), stop.reserve(size_t(o.repeats));
  for (int r = 0; r < o.repeats; r++) start.emplace_back(true), stop.emplace_back(true);
  for (int r = 0; r < o.repeats; r++) {
    start[size_t(r)].record(stream);
    for (int i = 0; i < inner; i++) f();
    stop[size_t(r)].record(stream);
  }
  stop.back().synchronize();
  std::vector<double> ms;
  for (int r = 0; r < o.repeats; r++)
    ms.push_back(double(stop[size_t(r)].ms_since(start[size_t(r)])) / inner);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Values uniform in [lo, hi), element i a pure function of (seed, i).
template <typename T>
std::vector<T> random_vec(size_t n, uint64_t seed, double lo = -1, double hi = 1) {
  std::vector<T> v(n);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < int64_t(n); i++)
    v[size_t(i)] = T(float(lo + (hi - lo) * double(rng_uniform(seed, uint64_t(i)))));
  return v;
}

template <typename T> std::vector<double> to_doubles(const std::vector<T>& v) {
  std::vector<double> d(v.size());
  for (size_t i = 0; i < v.size(); i++) d[i] = double(v[i]);
  return d;
}

// n elements of T on the device. Transfers are ordered on `stream` and waited for, so they
// are safe around kernels queued on that (non-blocking) stream.
template <typename T> class DeviceArray {
 public:
  DeviceArray(size_t n, cudaStream_t stream)
      : n_(n), stream_(stream), buf_(std::max<size_t>(n, 1) * sizeof(T), 0, stream) {}
  explicit DeviceArray(const std::vector<T>& v, cudaStream_t stream)
      : DeviceArray(v.size(), stream) {
    upload(v);
  }
  T* get() const { return static_cast<T*>(buf_.data()); }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }
  void upload(const std::vector<T>& v) {
    CHECK(v.size() == n_, "upload of " << v.size() << " values into " << n_);
    copy_async(get(), v.data(), bytes(), stream_);
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  std::vector<T> download() const {
    std::vector<T> v(n_);
    CUDA_CHECK(cudaStreamSynchronize(stream_));  // the kernels that wrote it first
    copy_async(v.data(), get(), bytes(), stream_);
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return v;
  }
  void poison() { memset_async(get(), 0xff, bytes(), stream_); }  // NaN in f16 and f32

 private:
  size_t n_;
  cudaStream_t stream_;
  DeviceBuffer buf_;
};

// The outcome of one validation: ok, and a short text for the table's check column.
struct Check {
  bool ok = true;
  std::string text;
};

// got against want, element by element: |got - want| <= rtol * |want| + atol * max|want|,
// and got finite wherever want is. The atol term scales with the whole output: a sum with
// cancellation has a small want and an absolute error set by the size of its terms.
inline Check compare(const char* what, const std::vector<double>& got,
                     const std::vector<double>& want, double rtol, double atol) {
  CHECK(got.size() == want.size(), what << ": " << got.size() << " values, want " << want.size());
  double scale = 0;
  for (double w : want)
    if (std::isfinite(w)) scale = std::max(scale, std::fabs(w));
  size_t bad = 0, worst = 0;
  double worst_excess = -1, max_err = 0;
  for (size_t i = 0; i < got.size(); i++) {
    const double err = std::fabs(got[i] - want[i]);
    const bool fine = std::isfinite(want[i]) ? std::isfinite(got[i]) &&
                                                   err <= rtol * std::fabs(want[i]) + atol * scale
                                             : true;
    if (std::isfinite(err)) max_err = std::max(max_err, err / std::max(scale, 1e-30));
    const double excess = std::isfinite(err) ? err - rtol * std::fabs(want[i]) : 1e300;
    if (!fine) bad++;
    if (excess > worst_excess) worst_excess = excess, worst = i;
  }
  char buf[256];
  if (bad == 0) {
    std::snprintf(buf, sizeof buf, "ok (err %.1e)", max_err);
    return {true, buf};
  }
  std::snprintf(buf, sizeof buf, "WRONG %s: %zu of %zu off, e.g. [%zu] = %g, want %g", what, bad,
                got.size(), worst, got[worst], want[worst]);
  return {false, buf};
}

// Both checks; the first failure wins.
inline Check operator&&(const Check& a, const Check& b) {
  if (!a.ok) return a;
  if (!b.ok) return b;
  return {true, a.text};
}

// Output: markdown on stdout (kept for --out) and the timed rows (kept for --json).
class Report {
 public:
  void print(const char* fmt, ...) __attribute__((format(printf, 2, 3))) {
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    std::fputs(buf, stdout);
    std::fflush(stdout);
    md_ += buf;
  }
  void add(nlohmann::json row) { rows_.push_back(std::move(row)); }
  const std::string& markdown() const { return md_; }
  const nlohmann::json& rows() const { return rows_; }
  int failures = 0;  // validations that failed (the program then exits 1)

 private:
  std::string md_;
  nlohmann::json rows_ = nlohmann::json::array();
};

// The ceilings every row is compared with, measured at the start of the same run.
// Under the simulator (make SIM=1, sim/README.md) a time is the host's clock running the
// kernels thread by thread: simulated, meaningless as a speed, and labelled so. The checks
// against the CPU reference are as real there as on a GPU.
#ifdef CUTRAIN_SIM
constexpr bool kSimulated = true;
#else
constexpr bool kSimulated = false;
#endif
inline const char* ms_heading() { return kSimulated ? "ms (simulated, meaningless)" : "ms"; }

struct Ceilings {
  double copy_gbps = 0;    // device-to-device copy, bytes read + written per second / 1e9
  double gemm_tflops = 0;  // cuBLAS fp16 GEMM 8192^3, fp32 accumulate
};

// What every kernel family gets: the stream, the timing options, the --only filter, the
// ceilings, the report, and the numbers the two targets are judged on.
struct BenchContext {
  cudaStream_t stream = nullptr;
  TimingOptions timing;
  std::string only;  // run only the rows whose key contains this
  Ceilings ceilings;
  Report report;
  std::vector<std::pair<std::string, double>> bandwidth_ratio;   // kernel, GB/s / copy GB/s
  std::vector<std::pair<std::string, double>> tc_conv_vs_cudnn;  // layer, cuDNN ms / tc ms

  bool wanted(const std::string& key) const {
    return only.empty() || key.find(only) != std::string::npos;
  }
  // Is any of the kernels, in this dtype, wanted? (Saves preparing inputs for nothing.)
  bool wanted_any(std::initializer_list<const char*> kernels, const char* dtype) const {
    for (const char* k : kernels)
      if (wanted(std::string(k) + " " + dtype)) return true;
    return false;
  }
};

}  // namespace cutrain
