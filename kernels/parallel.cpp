// The compute threads (kernels/parallel.h).
#include "kernels/parallel.h"

#include <algorithm>
#include <thread>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace cutrain {

#if defined(_OPENMP)
int compute_threads() { return omp_get_max_threads(); }
void set_compute_threads(int n) { omp_set_num_threads(std::max(1, n)); }
// libgomp reads OMP_NUM_THREADS and the affinity in its constructor, which runs before this
// library's static objects are made: this is the default before anyone set a count.
static const int kDefaultThreads = omp_get_max_threads();
int default_compute_threads() { return kDefaultThreads; }
int available_cores() { return omp_get_num_procs(); }
#else
int compute_threads() { return 1; }
void set_compute_threads(int) {}
int default_compute_threads() { return 1; }
int available_cores() { return std::max(1, int(std::thread::hardware_concurrency())); }
#endif

}  // namespace cutrain
