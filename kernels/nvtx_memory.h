// defines: the NVTX memory annotations of the caching allocator's blocks (CUDA builds), so that
// a memory checker sees each tensor's own bounds: compute-sanitizer's memcheck with `--nvtx
// yes` on a GPU, and the GPU simulator (sim/README.md), which reads the same calls.
//
//   a block from cudaMalloc     nvtx_pool_block: a heap of NVTX's, "sub-allocator" usage: no
//                               byte of it may be touched until a region of it is registered
//   a tensor handed out in it   nvtx_lend: a region of the block, the bytes asked for; returns
//                               the region's token
//   the tensor freed            nvtx_take_back(token): that region unregistered (an access now
//                               is a use after free, though the block is the process's)
// Regions are named by token, not by address: a block handed out again may hold the new
// tensor's region while work queued with the old one has still to run (kernels/gpu.cpp takes
// a region back in its stream's order).
//   the block given back        nvtx_pool_block_freed: the heap unregistered, before cudaFree
//
// Without a tool attached, each call is a test of a function pointer (NVTX's own rule).
#pragma once
#include <cstddef>

namespace cutrain {

void nvtx_pool_block(void* p, size_t bytes);
void nvtx_pool_block_freed(void* p);
void* nvtx_lend(void* p, size_t bytes);
void nvtx_take_back(void* token);

}  // namespace cutrain
