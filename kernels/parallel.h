// defines: worth_threads(work), the one knob of the OpenMP loops in the CPU kernels, and the
// rule those loops follow; compute_threads(), how many threads they split over.
//
// The rule: results are the same bits whatever the thread count (the trainer promises
// reproducible runs and exact resume). So a parallel loop hands each thread whole outputs,
// and each output is summed by one thread in the same order as the 1-thread loop; there are
// no reduction clauses and no partial sums merged across threads. Which thread computes an
// output does not matter, so schedule(dynamic) is allowed. tests/kernels/threads_test.cpp
// runs every parallel kernel on 1 and on 4 threads and demands identical bytes.
//
// Built without OpenMP, the pragmas are ignored and everything runs on one thread.
#pragma once
#include <cstdint>

namespace cutrain {

// Whether a loop doing `work` units (flops, or elements touched) is worth splitting: starting
// a parallel region costs microseconds, and on a machine whose cores are busy with other work
// every thread of the team must be scheduled before the region ends, which can take
// milliseconds. So calls under ~0.1 ms of work (gradient checks, the classifier of a small
// model) stay on the calling thread. Used as `#pragma omp parallel if (worth_threads(w))`.
inline bool worth_threads(int64_t work) { return work >= (int64_t(1) << 18); }

// The compute threads: the team a parallel loop started on the calling thread gets, which is
// also the one oneDNN's primitives use (they run on the same OpenMP runtime, libgomp). OpenMP
// keeps the count per thread, so set_compute_threads changes the calling thread's only: a
// thread started later (a --sync-bn replica's) begins with the process's default and sets its
// own. All of them are 1 in a build without OpenMP.
int compute_threads();
void set_compute_threads(int n);
// The process's default: OMP_NUM_THREADS, else the cores it may run on (its CPU affinity), as
// the OpenMP runtime worked it out when the program started.
int default_compute_threads();
// The cores this process may run on (its CPU affinity), whatever OMP_NUM_THREADS says.
int available_cores();

// Sets the calling thread's compute threads for its lifetime, then puts the count back (n >= 1).
// A training run's Engine holds one (train/engine/engine.h), so the count it was given stays its.
class ComputeThreadsScope {
 public:
  explicit ComputeThreadsScope(int n) : saved_(compute_threads()) { set_compute_threads(n); }
  ~ComputeThreadsScope() { set_compute_threads(saved_); }
  ComputeThreadsScope(const ComputeThreadsScope&) = delete;
  ComputeThreadsScope& operator=(const ComputeThreadsScope&) = delete;

 private:
  int saved_;
};

}  // namespace cutrain
