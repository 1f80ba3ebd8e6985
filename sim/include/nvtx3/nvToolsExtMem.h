// The simulator's stand-in for NVTX's <nvtx3/nvToolsExtMem.h> (sim/README.md): the memory
// annotations of a sub-allocator, with NVTX's names, fields and constants, so that the code
// that annotates (kernels/nvtx_memory.cpp) is the same in the CUDA and the SIM build. The
// simulator implements them (sim/pools.cpp): a registered heap is a block of the caching
// allocator, no byte of which a kernel or a copy may touch but its live regions (the tensors
// handed out in it); an access to a region unregistered since is a use after free. Regions
// get handles (regionHandleElementsOut), by which they may be unregistered.
#pragma once
#include <cstddef>
#include <cstdint>

#include "nvToolsExt.h"

#define NVTX_EXT_COMPATID_MEM 0x0102
#define NVTX_MEM_HEAP_USAGE_TYPE_SUB_ALLOCATOR 0x1
#define NVTX_MEM_TYPE_VIRTUAL_ADDRESS 0x1
#define NVTX_MEM_REGION_REF_TYPE_POINTER 0x1
#define NVTX_MEM_REGION_REF_TYPE_HANDLE 0x2

struct nvtxMemHeap_v1;
typedef nvtxMemHeap_v1* nvtxMemHeapHandle_t;
struct nvtxMemRegion_v1;
typedef nvtxMemRegion_v1* nvtxMemRegionHandle_t;

typedef struct nvtxMemVirtualRangeDesc_v1 {
  size_t size;
  void const* ptr;
} nvtxMemVirtualRangeDesc_t;

typedef struct nvtxMemHeapDesc_v1 {
  uint16_t extCompatID;
  uint16_t structSize;
  uint32_t reserved0;
  uint32_t usage;
  uint32_t type;
  size_t typeSpecificDescSize;
  void const* typeSpecificDesc;
  uint32_t category;
  uint32_t messageType;
  void const* message;
} nvtxMemHeapDesc_t;

typedef struct nvtxMemRegionsRegisterBatch_v1 {
  uint16_t extCompatID;
  uint16_t structSize;
  uint32_t regionType;
  nvtxMemHeapHandle_t heap;
  size_t regionCount;
  size_t regionDescElementSize;
  void const* regionDescElements;
  nvtxMemRegionHandle_t* regionHandleElementsOut;
} nvtxMemRegionsRegisterBatch_t;

typedef union nvtxMemRegionRef_t {
  void const* pointer;
  nvtxMemRegionHandle_t handle;
} nvtxMemRegionRef_t;

typedef struct nvtxMemRegionsUnregisterBatch_v1 {
  uint16_t extCompatID;
  uint16_t structSize;
  uint32_t refType;
  size_t refCount;
  size_t refElementSize;
  nvtxMemRegionRef_t const* refElements;
} nvtxMemRegionsUnregisterBatch_t;

extern "C" {
nvtxMemHeapHandle_t nvtxMemHeapRegister(nvtxDomainHandle_t domain, nvtxMemHeapDesc_t const* desc);
void nvtxMemHeapUnregister(nvtxDomainHandle_t domain, nvtxMemHeapHandle_t heap);
void nvtxMemRegionsRegister(nvtxDomainHandle_t domain, nvtxMemRegionsRegisterBatch_t const* desc);
void nvtxMemRegionsUnregister(nvtxDomainHandle_t domain,
                              nvtxMemRegionsUnregisterBatch_t const* desc);
}
