// The simulator's stand-in for NVTX's <nvtx3/nvToolsExt.h> (sim/README.md): the domains that
// the memory annotations (nvToolsExtMem.h) name. Only the SIM build puts sim/include on the
// include path.
#pragma once

struct nvtxDomainRegistration_st;
typedef nvtxDomainRegistration_st* nvtxDomainHandle_t;

extern "C" nvtxDomainHandle_t nvtxDomainCreateA(const char* name);
