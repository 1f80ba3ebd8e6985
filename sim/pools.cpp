// NVTX's memory annotations under the simulator (sim/include/nvtx3/nvToolsExtMem.h): the
// caching allocator says which of its blocks' bytes are live tensors (kernels/nvtx_memory.h),
// and allocations.cpp keeps them, so that every check of an address sees a tensor's own
// bounds, and a tensor given back to the pool as freed.
#include <nvtx3/nvToolsExtMem.h>

#include "sim/runtime.h"

using namespace cutrain_sim;

extern "C" {

nvtxDomainHandle_t nvtxDomainCreateA(const char*) {
  static int domain;  // one is enough: the simulator has one reader of the annotations
  return reinterpret_cast<nvtxDomainHandle_t>(&domain);
}

nvtxMemHeapHandle_t nvtxMemHeapRegister(nvtxDomainHandle_t, nvtxMemHeapDesc_t const* desc) {
  if (desc->usage != NVTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR ||
      desc->type != NVTX_MEM_TYPE_VIRTUAL_ADDRESS) {
    report("cutrain-sim: nvtxMemHeapRegister: only a sub-allocator's heap of virtual addresses "
           "is simulated\n");
    return nullptr;
  }
  const auto* range = static_cast<const nvtxMemVirtualRangeDesc_t*>(desc->typeSpecificDesc);
  pool_register(reinterpret_cast<uintptr_t>(range->ptr), range->size);
  return reinterpret_cast<nvtxMemHeapHandle_t>(const_cast<void*>(range->ptr));
}

void nvtxMemHeapUnregister(nvtxDomainHandle_t, nvtxMemHeapHandle_t heap) {
  if (heap) pool_unregister(reinterpret_cast<uintptr_t>(heap));
}

void nvtxMemRegionsRegister(nvtxDomainHandle_t, nvtxMemRegionsRegisterBatch_t const* desc) {
  const auto* region = static_cast<const unsigned char*>(desc->regionDescElements);
  for (size_t i = 0; i < desc->regionCount; i++, region += desc->regionDescElementSize) {
    const auto* r = reinterpret_cast<const nvtxMemVirtualRangeDesc_t*>(region);
    const uint64_t id = region_register(reinterpret_cast<uintptr_t>(r->ptr), r->size);
    if (desc->regionHandleElementsOut)
      desc->regionHandleElementsOut[i] = reinterpret_cast<nvtxMemRegionHandle_t>(uintptr_t(id));
  }
}

void nvtxMemRegionsUnregister(nvtxDomainHandle_t, nvtxMemRegionsUnregisterBatch_t const* desc) {
  const auto* ref = reinterpret_cast<const unsigned char*>(desc->refElements);
  for (size_t i = 0; i < desc->refCount; i++, ref += desc->refElementSize) {
    const auto* r = reinterpret_cast<const nvtxMemRegionRef_t*>(ref);
    if (desc->refType == NVTX_MEM_REGION_REF_TYPE_HANDLE)
      region_unregister_id(uint64_t(reinterpret_cast<uintptr_t>(r->handle)));
    else
      region_unregister(reinterpret_cast<uintptr_t>(r->pointer));
  }
}

}  // extern "C"
