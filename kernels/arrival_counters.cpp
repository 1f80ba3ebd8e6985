// arrival_counters (kernels/arrival_counters.h). In a CPU-only build it throws: there is no
// device to count on.
#include "kernels/arrival_counters.h"

#include <map>
#include <mutex>
#include <utility>

#include "kernels/check.h"

namespace cutrain {

#if defined(CUTRAIN_CUDA)
unsigned* arrival_counters(cudaStream_t stream, int n) {
  CHECK(n >= 0, "arrival_counters: n = " << n);
  struct Counters {
    unsigned* p = nullptr;
    int n = 0;
  };
  static std::mutex mutex;
  static std::map<std::pair<int, unsigned long long>, Counters> arrays;
  const int device = current_device();
  // Keyed by the stream's id, unique for the process's life: a stream made later at a freed
  // handle gets an array of its own, even while the old stream's work still runs.
  unsigned long long id = 0;
  CUDA_CHECK(cudaStreamGetId(stream, &id));
  std::lock_guard<std::mutex> lock(mutex);
  Counters& c = arrays[{device, id}];
  if (c.n < n) {
    // A bigger array; the old one is left alone (never freed: kernels queued before may still
    // count on it). Zeroed before it is returned, by a memset on a stream of its own that is
    // waited for: never on `stream`, which may be capturing a graph (a memset there would
    // only become a node of the graph, leaving the memory as cudaMalloc gave it).
    int size = c.n > 0 ? c.n : 1024;
    while (size < n) size *= 2;
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, sizeof(unsigned) * size_t(size)));
    cudaStream_t zeroing = nullptr;
    CUDA_CHECK(cudaStreamCreateWithFlags(&zeroing, cudaStreamNonBlocking));
    CUDA_CHECK(cudaMemsetAsync(p, 0, sizeof(unsigned) * size_t(size), zeroing));
    CUDA_CHECK(cudaStreamSynchronize(zeroing));
    CUDA_CHECK(cudaStreamDestroy(zeroing));
    c = {static_cast<unsigned*>(p), size};
  }
  return c.p;
}
#else
unsigned* arrival_counters(cudaStream_t, int) {
  CHECK(false, "cannot count arrivals on a device: this build has no CUDA");
  return nullptr;
}
#endif

}  // namespace cutrain
