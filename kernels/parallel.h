// defines: worth_threads(work), the one knob of the OpenMP loops in the CPU kernels, and the
// rule those loops follow.
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

}  // namespace cutrain
