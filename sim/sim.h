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
// Queues, instead, a fault found in a library's call (an access outside its buffers): when it
// runs, `report` is printed and e becomes the device's sticky error, as a kernel's would.
cudaError_t submit_fault(cudaStream_t stream, cudaError_t e, std::string report);

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
};
constexpr size_t kRedZone = 256;
// The allocation holding [a, a+n), or the nearest one before a (found = false) when none does.
bool find_allocation(uintptr_t a, size_t n, Allocation* found, Allocation* nearest);
// Counts the allocations freed and the peer accesses disabled so far (a cache of which
// accesses find_allocation allowed is valid while it stays the same).
uint64_t allocation_generation();
void bump_allocation_generation();

}  // namespace cutrain_sim
