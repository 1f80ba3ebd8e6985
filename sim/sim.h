// What the simulated device (block.h: scheduler.cpp, collectives.cpp, access.cpp) and the
// simulated runtime (runtime.h: the API, streams, memory) share. Internal to sim/.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace cutrain_sim {

// One launch, queued on a stream.
struct Grid {
  int device = 0;
  std::string kernel;
  dim3 grid, block;
  size_t dynamic_smem = 0;
  RunThread run = nullptr;            // one thread's share: run(record.get())
  std::shared_ptr<const void> record;  // the kernel and the launch's copy of its arguments
  size_t record_bytes = 0;
};

// Runs every block of `g` on the calling thread; on a failure returns its error and sets
// *report (which check, kernel, block, thread). `seed` orders the blocks and threads.
cudaError_t run_grid(const Grid& g, uint64_t seed, std::string* report);

// Queues `work` on `stream` as a graph node (a library's kernel: cuBLAS's GEMM).
cudaError_t submit(cudaStream_t stream, std::function<void()> work);
// A fault found by work running on a stream (a library's kernel reading outside its buffers):
// `report` is printed and e becomes the sticky error of the stream's device, as a kernel's would.
void fault(cudaError_t e, const std::string& report);

// Whether kernels of device `from` may access device `to`'s memory (cudaDeviceEnablePeerAccess).
bool peer_enabled(int from, int to);

// The device limits the launch and the blocks are checked against (an H100's).
constexpr unsigned kMaxThreadsPerBlock = 1024;
constexpr unsigned kMaxBlockDim[3] = {1024, 1024, 64};
constexpr unsigned kMaxGridDim[3] = {2147483647u, 65535, 65535};
constexpr size_t kSharedPerBlock = 48 * 1024;  // without cudaFuncSetAttribute's opt-in
constexpr size_t kSharedOptin = 227 * 1024;

// Device memory and pinned host memory, as the runtime allocated them: what kernels may touch.
struct Allocation {
  uintptr_t base = 0;
  size_t bytes = 0;
  int device = -1;       // -1: pinned host memory
  size_t footprint = 0;  // bytes from base that are its own: the bytes asked for, rounded up
                         //   to 256, and a red zone of kRedZone after them that no other
                         //   allocation overlaps, so an overrun never lands in a neighbour
  // Device memory's "written" shadow (initcheck's rule), a byte per byte from base: set by
  // kernels' stores, memsets and copies (a copy carries its source's), checked by kernels'
  // loads. Null for pinned host memory, exempt: the host writes it with its own stores, which
  // the simulator does not see.
  uint8_t* written = nullptr;
};
// Marks [a, a+n) of device memory written (a memset, a copy from the host, a library's
// output), or carries the source's marks to it (a device-to-device copy): the shadows of what
// look_up finds there; a range in no device memory is left alone.
void mark_written(uintptr_t a, size_t n);
void copy_written(uintptr_t dst, uintptr_t src, size_t n);
constexpr size_t kRedZone = 256;
// Where [a, a+n) is (sim/allocations.cpp):
//   inside    in one allocation, or in one live region of a pool block (the tensor the caching
//             allocator handed out there: kernels/nvtx_memory.h): `in` is that allocation or
//             region;
//   outside   in no allocation: `near` is the nearest allocation before a (bytes 0: none);
//   pool_gap  in a pool block (`near`) but not inside one of its live regions: `region` is the
//             nearest live region before a (bytes 0: none);
//   returned  in a pool block (`near`), touching a region given back to the pool since it was
//             handed out (`region`): a use after free;
//   freed     in an allocation freed earlier (`near`): a use after free (freed memory is kept
//             from the host's allocator for a while, its last 64 MiB, so that it is known).
struct Lookup {
  enum Kind { inside, outside, pool_gap, returned, freed } kind = outside;
  Allocation in, near, region;
};
// tensors = false: allocations only, pool blocks as a whole (a call's own check: the caching
// allocator's annotations are made in its stream's order, so only the work queued with them
// may look at them, when it runs).
Lookup look_up(uintptr_t a, size_t n, bool tensors = true);
// What is wrong with a lookup that is not `inside`, in words: "is in no allocation; the
// nearest before it: ...", "is in a pool block ... past the end of its tensor ...", ...
std::string describe_miss(const Lookup& l, uintptr_t a, size_t n);
// look_up's `inside` case: the allocation or live region holding [a, a+n), else the nearest
// allocation before a (found = false).
bool find_allocation(uintptr_t a, size_t n, Allocation* found, Allocation* nearest);
// Counts the allocations freed and the peer accesses disabled so far (a cache of which
// accesses find_allocation allowed is valid while it stays the same).
uint64_t allocation_generation();
void bump_allocation_generation();

}  // namespace cutrain_sim
