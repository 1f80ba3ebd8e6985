// NVTX's memory extension (nvtx3/nvToolsExtMem.h, header-only) behind kernels/nvtx_memory.h.
// In the simulator's build the same header is sim/include's, implemented by the simulator.
#include "kernels/nvtx_memory.h"

#if defined(CUTRAIN_CUDA)
#include <nvtx3/nvToolsExtMem.h>

#include <map>
#include <mutex>

namespace cutrain {
namespace {

nvtxDomainHandle_t domain() {
  static const nvtxDomainHandle_t d = nvtxDomainCreateA("cutrain");
  return d;
}

// The heap of each block, by its address (a region is registered in its block's heap). Never
// destroyed: the allocators that use it are static too, and may be destroyed after it.
std::mutex g_mu;
std::map<void*, nvtxMemHeapHandle_t>& heaps() {
  static auto* h = new std::map<void*, nvtxMemHeapHandle_t>;
  return *h;
}

}  // namespace

void nvtx_pool_block(void* p, size_t bytes) {
  nvtxMemVirtualRangeDesc_t range = {};
  range.size = bytes;
  range.ptr = p;
  nvtxMemHeapDesc_t desc = {};
  desc.extCompatID = NVTX_EXT_COMPATID_MEM;
  desc.structSize = sizeof desc;
  desc.usage = NVTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR;
  desc.type = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
  desc.typeSpecificDescSize = sizeof range;
  desc.typeSpecificDesc = &range;
  const nvtxMemHeapHandle_t heap = nvtxMemHeapRegister(domain(), &desc);
  std::lock_guard<std::mutex> lock(g_mu);
  heaps()[p] = heap;
}

void nvtx_pool_block_freed(void* p) {
  nvtxMemHeapHandle_t heap;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    const auto it = heaps().find(p);
    if (it == heaps().end()) return;
    heap = it->second;
    heaps().erase(it);
  }
  nvtxMemHeapUnregister(domain(), heap);
}

namespace {
struct Lent {
  void* p;
  nvtxMemRegionHandle_t handle;  // the tool's (null without one: then named by its address)
};
}  // namespace

void* nvtx_lend(void* p, size_t bytes) {
  nvtxMemHeapHandle_t heap;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    const auto it = heaps().find(p);
    if (it == heaps().end()) return nullptr;
    heap = it->second;
  }
  nvtxMemVirtualRangeDesc_t region = {};
  region.size = bytes;
  region.ptr = p;
  auto* lent = new Lent{p, nullptr};
  nvtxMemRegionsRegisterBatch_t batch = {};
  batch.extCompatID = NVTX_EXT_COMPATID_MEM;
  batch.structSize = sizeof batch;
  batch.regionType = NVTX_MEM_TYPE_VIRTUAL_ADDRESS;
  batch.heap = heap;
  batch.regionCount = 1;
  batch.regionDescElementSize = sizeof region;
  batch.regionDescElements = &region;
  batch.regionHandleElementsOut = &lent->handle;
  nvtxMemRegionsRegister(domain(), &batch);
  return lent;
}

void nvtx_take_back(void* token) {
  if (!token) return;
  Lent* lent = static_cast<Lent*>(token);
  nvtxMemRegionRef_t ref;
  if (lent->handle)
    ref.handle = lent->handle;
  else
    ref.pointer = lent->p;
  nvtxMemRegionsUnregisterBatch_t batch = {};
  batch.extCompatID = NVTX_EXT_COMPATID_MEM;
  batch.structSize = sizeof batch;
  batch.refType = lent->handle ? NVTX_MEM_REGION_REF_TYPE_HANDLE : NVTX_MEM_REGION_REF_TYPE_POINTER;
  batch.refCount = 1;
  batch.refElementSize = sizeof ref;
  batch.refElements = &ref;
  nvtxMemRegionsUnregister(domain(), &batch);
  delete lent;
}

}  // namespace cutrain

#else  // CPU-only: nothing to annotate

namespace cutrain {
void nvtx_pool_block(void*, size_t) {}
void nvtx_pool_block_freed(void*) {}
void* nvtx_lend(void*, size_t) { return nullptr; }
void nvtx_take_back(void*) {}
}  // namespace cutrain

#endif
