// The simulated devices (CUTRAIN_SIM_DEVICES, default 1; make sim-test uses 2): the current
// device of each host thread, properties (an H100's, labelled simulated), peer access and the
// device-wide synchronisation.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "sim/runtime.h"

namespace cutrain_sim {
namespace {
thread_local int t_device = 0;
std::mutex g_peer_mu;  // guards every Device::peer
}  // namespace

std::vector<Device>& devices() {
  static auto* d =  // never destroyed (streams.cpp says why)
      new std::vector<Device>(std::max<uint64_t>(1, env_u64("CUTRAIN_SIM_DEVICES", 1)));
  return *d;
}
int device_count() { return int(devices().size()); }
bool valid_device(int device) { return device >= 0 && device < device_count(); }
int& current_device() { return t_device; }
cudaError_t sticky(int device) { return devices()[size_t(device)].sticky.load(); }

bool peer_enabled(int from, int to) {
  if (from == to) return true;
  std::lock_guard<std::mutex> lock(g_peer_mu);
  const std::vector<bool>& on = devices()[size_t(from)].peer;
  return size_t(to) < on.size() && on[size_t(to)];
}

}  // namespace cutrain_sim

using namespace cutrain_sim;

cudaError_t cudaGetDeviceCount(int* count) {
  *count = device_count();
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = current_device();
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (!valid_device(device)) return set_error(cudaErrorInvalidDevice);
  current_device() = device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (!valid_device(device)) return set_error(cudaErrorInvalidDevice);
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->name, sizeof p->name, "NVIDIA H100 80GB HBM3 (simulated)");
  p->totalGlobalMem = kTotalMemory;
  p->sharedMemPerBlock = kSharedPerBlock;
  p->sharedMemPerBlockOptin = kSharedOptin;
  p->sharedMemPerMultiprocessor = 228 * 1024;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->maxThreadsPerBlock = int(kMaxThreadsPerBlock);
  for (int i = 0; i < 3; i++) {
    p->maxThreadsDim[i] = int(kMaxBlockDim[i]);
    p->maxGridSize[i] = int(kMaxGridDim[i]);
  }
  p->clockRate = 1980000;
  p->memoryClockRate = 2619000;
  p->memoryBusWidth = 5120;
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = 132;
  p->maxThreadsPerMultiProcessor = 2048;
  p->l2CacheSize = 50 * 1024 * 1024;
  p->pciBusID = device + 1;
  p->unifiedAddressing = 1;
  p->concurrentKernels = 1;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetPCIBusId(char* id, int len, int device) {
  if (!valid_device(device)) return set_error(cudaErrorInvalidDevice);
  std::snprintf(id, size_t(len), "0000:%02X:00.0", device + 1);
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  *total = kTotalMemory;
  *free = kTotalMemory - devices()[size_t(current_device())].allocated;
  return sticky(current_device());
}

cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  if (!valid_device(device) || !valid_device(peer)) return set_error(cudaErrorInvalidDevice);
  *can = device != peer;
  return cudaSuccess;
}
cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned) {
  if (!valid_device(peer) || peer == current_device()) return set_error(cudaErrorInvalidDevice);
  std::lock_guard<std::mutex> lock(g_peer_mu);
  std::vector<bool>& on = devices()[size_t(current_device())].peer;
  on.resize(size_t(device_count()));
  if (on[size_t(peer)]) return set_error(cudaErrorPeerAccessAlreadyEnabled);
  on[size_t(peer)] = true;
  return cudaSuccess;
}

cudaError_t cudaDeviceDisablePeerAccess(int peer) {
  if (!valid_device(peer)) return set_error(cudaErrorInvalidDevice);
  std::lock_guard<std::mutex> lock(g_peer_mu);
  std::vector<bool>& on = devices()[size_t(current_device())].peer;
  if (size_t(peer) >= on.size() || !on[size_t(peer)])
    return set_error(cudaErrorPeerAccessNotEnabled);
  on[size_t(peer)] = false;
  bump_allocation_generation();  // the access checks' caches may hold what it allowed
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  const std::vector<std::shared_ptr<Stream>> mine = streams_of(current_device());
  for (const auto& s : mine)
    if (s->refuse_if_capturing()) return set_error(cudaErrorStreamCaptureUnsupported);
  for (const auto& s : mine) s->synchronize();
  return set_error(sticky(current_device()));
}
