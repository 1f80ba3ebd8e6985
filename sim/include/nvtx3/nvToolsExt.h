// The simulator's stand-in for NVTX's <nvtx3/nvToolsExt.h> (sim/README.md): the domains that
// the memory annotations (nvToolsExtMem.h) name, and the ranges and thread names that
// data/trace.cpp gives a profiler. No profiler reads a simulated run, so those are no-ops,
// as NVTX's own are when no tool is attached. Only the SIM build puts sim/include on the
// include path.
#pragma once

#include <stdint.h>

struct nvtxDomainRegistration_st;
typedef nvtxDomainRegistration_st* nvtxDomainHandle_t;

extern "C" nvtxDomainHandle_t nvtxDomainCreateA(const char* name);

inline int nvtxRangePushA(const char*) { return 0; }
inline int nvtxRangePop() { return 0; }
inline void nvtxNameOsThreadA(uint32_t, const char*) {}
