// The simulated CUDA runtime (sim/README.md): devices, memory, streams, events, graphs.
//
// Memory is host memory: device allocations are registered (sim/device.cpp checks kernels'
// accesses against them) and poisoned (0xff) when allocated, as a GPU's are garbage. Each
// stream is an in-order queue of tasks run by a host thread of its own, so two streams really
// run at once; the legacy default stream (nullptr) is one more such stream per device. A
// kernel that fails leaves its device's error sticky: every later call on that device returns it.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>

#include <cutrain_sim.h>

#include "sim/sim.h"

namespace cutrain_sim {
namespace {

using Clock = std::chrono::steady_clock;

// ---- errors ----------------------------------------------------------------------------------
std::mutex g_report_mu;
std::string g_last_report;
thread_local cudaError_t t_last_error = cudaSuccess;

cudaError_t set_error(cudaError_t e) {
  if (e != cudaSuccess) t_last_error = e;
  return e;
}
void report(const std::string& text) {
  std::fprintf(stderr, "%s", text.c_str());
  std::lock_guard<std::mutex> lock(g_report_mu);
  g_last_report = text;
}

uint64_t env_u64(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}
std::atomic<uint64_t> g_seed{env_u64("CUTRAIN_SIM_SEED", 1)};

// ---- devices ---------------------------------------------------------------------------------
struct Stream;
struct Device {
  std::atomic<cudaError_t> sticky{cudaSuccess};
  std::atomic<size_t> allocated{0};
  std::vector<bool> peer;  // peer access enabled to device j
  Stream* legacy = nullptr;
};
constexpr size_t kTotalMemory = size_t(80) << 30;

std::vector<Device>& devices() {
  static std::vector<Device> d(std::max<uint64_t>(1, env_u64("CUTRAIN_SIM_DEVICES", 1)));
  return d;
}
int device_count() { return int(devices().size()); }
thread_local int t_device = 0;

// ---- streams ---------------------------------------------------------------------------------
struct Task {
  std::function<void()> run;
  bool kernel_or_copy = true;  // counts as a graph node (kernels, copies, memsets)
};

std::mutex g_streams_mu;
std::vector<Stream*> g_streams;
std::atomic<Stream*> g_held{nullptr};
std::atomic<uint64_t> g_stream_ids{1};

struct Stream {
  int device = 0;
  uint64_t id = 0;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Task> queue;
  uint64_t queued = 0, done = 0;
  bool stop = false, busy = false;
  bool demanded = false;  // a held stream: someone waits for it, so it runs (hold_stream)
  uint64_t launches = 0;
  // graph capture
  bool capturing = false, capture_broken = false;
  std::vector<Task> captured;
  std::thread worker;

  explicit Stream(int dev) : device(dev), id(g_stream_ids++) {
    worker = std::thread([this] { work(); });
    std::lock_guard<std::mutex> lock(g_streams_mu);
    g_streams.push_back(this);
  }
  ~Stream() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    cv.notify_all();
    worker.join();
    std::lock_guard<std::mutex> lock(g_streams_mu);
    g_streams.erase(std::find(g_streams.begin(), g_streams.end(), this));
    if (g_held == this) g_held = nullptr;
  }
  void submit(Task t) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (capturing) {
        captured.push_back(std::move(t));
        return;
      }
      queue.push_back(std::move(t));
      queued++;
    }
    cv.notify_all();
  }
  void synchronize() {
    demand();
    std::unique_lock<std::mutex> lock(mu);
    const uint64_t target = queued;
    cv.wait(lock, [&] { return done >= target; });
  }
  bool finished() {
    demand();
    std::lock_guard<std::mutex> lock(mu);
    return done >= queued;
  }
  // A held stream runs nothing until someone waits for it: the host (a synchronize or query of
  // the stream, the device or an event recorded on it) or another stream (an event wait). Then
  // it runs until its queue is empty. Work of other streams that forgot to wait for it runs
  // first, every time. (After 10 s it runs anyway, so that a host polling a flag that only
  // this stream sets cannot hang.)
  void wait_while_held() {
    if (g_held.load() != this) return;
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::seconds(10), [&] { return demanded || g_held.load() != this; });
  }
  void demand() {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (queue.empty() && !busy) return;  // nothing to run: no demand left behind
      demanded = true;
    }
    cv.notify_all();
  }
  void work() {
    for (;;) {
      Task t;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stop || !queue.empty(); });
        if (queue.empty()) return;
        t = std::move(queue.front());
        queue.pop_front();
        busy = true;
      }
      wait_while_held();
      t.run();
      {
        std::lock_guard<std::mutex> lock(mu);
        busy = false;
        done++;
        if (queue.empty()) demanded = false;
      }
      cv.notify_all();
    }
  }
};

Stream* legacy_stream(int device) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  Device& d = devices()[size_t(device)];
  if (!d.legacy) d.legacy = new Stream(device);  // lives until exit
  return d.legacy;
}
Stream* as_stream(cudaStream_t s) {
  return s ? reinterpret_cast<Stream*>(s) : legacy_stream(t_device);
}
cudaError_t sticky(int device) { return devices()[size_t(device)].sticky.load(); }

// ---- events ----------------------------------------------------------------------------------
// An event lives while its handle does or work queued on a stream names it: a wait queued on a
// stream may run after the host destroyed the event, which CUDA allows (cudaEventDestroy: its
// resources are released once the device is done with it). The tasks hold a shared_ptr; the
// handle's own is in g_events until cudaEventDestroy.
struct Event : std::enable_shared_from_this<Event> {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t recorded = 0, completed = 0;
  Clock::time_point when{};
  bool timing = true;
  Stream* captured_on = nullptr;  // recorded during a capture
  Stream* recorded_on = nullptr;  // the stream of the last record
};

// ---- graphs ----------------------------------------------------------------------------------
struct Graph {
  std::vector<Task> tasks;
};

// ---- memory ----------------------------------------------------------------------------------
std::shared_mutex g_alloc_mu;
std::map<uintptr_t, Allocation> g_allocs;
std::atomic<uint64_t> g_freed{0};

void* allocate(size_t bytes, int device) {
  const size_t n = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  void* p = std::aligned_alloc(256, n);
  if (!p) return nullptr;
  std::memset(p, 0xff, n);  // device memory starts as garbage: a recognisable one
  std::unique_lock<std::shared_mutex> lock(g_alloc_mu);
  g_allocs[reinterpret_cast<uintptr_t>(p)] = Allocation{reinterpret_cast<uintptr_t>(p), bytes,
                                                        device};
  return p;
}
bool release(void* p, bool pinned) {
  std::unique_lock<std::shared_mutex> lock(g_alloc_mu);
  auto it = g_allocs.find(reinterpret_cast<uintptr_t>(p));
  if (it == g_allocs.end() || (it->second.device < 0) != pinned) return false;
  if (!pinned) devices()[size_t(it->second.device)].allocated -= it->second.bytes;
  g_allocs.erase(it);
  g_freed++;
  std::free(p);
  return true;
}

void launch_task(Stream* s, Grid g) {
  const uint64_t seed = g_seed.load() * 0x9e3779b97f4a7c15ull + s->launches++;
  const int device = s->device;
  s->submit(Task{[g = std::move(g), seed, device] {
                   if (sticky(device) != cudaSuccess) return;
                   std::string why;
                   const cudaError_t e = run_grid(g, seed, &why);
                   if (e != cudaSuccess) {
                     report(why);
                     devices()[size_t(device)].sticky = e;
                   }
                 },
                 true});
}

bool capturing(Stream* s) {
  std::lock_guard<std::mutex> lock(s->mu);
  return s->capturing;
}

// True when [p, p + bytes) is in no allocation of the simulator's: pageable host memory.
bool pageable(const void* p, size_t bytes) {
  Allocation found, nearest;
  return bytes > 0 && !find_allocation(reinterpret_cast<uintptr_t>(p), bytes, &found, &nearest);
}

// A copy queued on s. Pinned and device memory are read and written when the copy runs, as on
// a GPU. Pageable host memory is not queued, as CUDA does not queue it: a pageable source is
// copied at the call (into CUDA's staging buffer; the caller may reuse it at once), and a copy
// into pageable memory returns only once it is done. (Queued, such a write could land in a
// buffer its owner had freed meanwhile, which a GPU's synchronous copy allows.) In a capture
// every copy is a node of the graph, run at each replay.
cudaError_t copy_on(Stream* s, void* dst, const void* src, size_t bytes) {
  if (sticky(s->device) != cudaSuccess) return sticky(s->device);
  const int device = s->device;
  const bool now = !capturing(s);
  std::shared_ptr<std::vector<unsigned char>> staged;  // kept alive by the task
  if (now && pageable(src, bytes))
    staged = std::make_shared<std::vector<unsigned char>>(
        static_cast<const unsigned char*>(src), static_cast<const unsigned char*>(src) + bytes);
  const void* from = staged ? staged->data() : src;
  s->submit(Task{[dst, from, bytes, device, staged] {
                   if (sticky(device) == cudaSuccess) std::memmove(dst, from, bytes);
                 },
                 true});
  if (now && pageable(dst, bytes)) s->synchronize();
  return cudaSuccess;
}

// A call that waits for a capturing stream: refused, and the capture broken (CUDA's rule).
bool refuse_if_capturing(Stream* s) {
  std::lock_guard<std::mutex> lock(s->mu);
  if (!s->capturing) return false;
  s->capture_broken = true;
  return true;
}

}  // namespace

uint64_t allocation_generation() { return g_freed.load(std::memory_order_acquire); }

bool find_allocation(uintptr_t a, size_t n, Allocation* found, Allocation* nearest) {
  std::shared_lock<std::shared_mutex> lock(g_alloc_mu);
  auto it = g_allocs.upper_bound(a);
  *nearest = Allocation{};
  if (it == g_allocs.begin()) return false;
  --it;
  const Allocation& al = it->second;
  if (a + n <= al.base + al.bytes) {
    *found = al;
    return true;
  }
  *nearest = al;
  return false;
}

void launch_grid(const char* name, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                 RunThread run, std::shared_ptr<const void> record, size_t record_bytes) {
  Stream* s = as_stream(stream);
  std::string bad;
  const unsigned gd[3] = {grid.x, grid.y, grid.z}, bd[3] = {block.x, block.y, block.z};
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  if (threads > kMaxThreadsPerBlock)
    bad = "a block of " + std::to_string(threads) + " threads (limit " +
          std::to_string(kMaxThreadsPerBlock) + ")";
  for (int i = 0; i < 3 && bad.empty(); i++) {
    if (gd[i] == 0 || gd[i] > kMaxGridDim[i])
      bad = "grid dimension " + std::to_string(i) + " is " + std::to_string(gd[i]) +
            " (limit " + std::to_string(kMaxGridDim[i]) + ")";
    if (bd[i] == 0 || bd[i] > kMaxBlockDim[i])
      bad = "block dimension " + std::to_string(i) + " is " + std::to_string(bd[i]) +
            " (limit " + std::to_string(kMaxBlockDim[i]) + ")";
  }
  cudaError_t e = cudaErrorInvalidConfiguration;
  if (bad.empty() && smem > kSharedPerBlock) {
    bad = std::to_string(smem) + " bytes of dynamic shared memory (limit " +
          std::to_string(kSharedPerBlock) + " without cudaFuncSetAttribute)";
    e = cudaErrorInvalidValue;
  }
  if (!bad.empty()) {
    report("cutrain-sim: launch above the device's limits\n    kernel " + std::string(name) +
           ": " + bad + "\n");
    set_error(e);
    return;
  }
  if (sticky(s->device) != cudaSuccess) {
    set_error(sticky(s->device));
    return;
  }
  Grid g;
  g.kernel = name;
  g.grid = grid;
  g.block = block;
  g.dynamic_smem = smem;
  g.run = run;
  g.record = std::move(record);
  g.record_bytes = record_bytes;
  launch_task(s, std::move(g));
}

cudaError_t submit(cudaStream_t stream, std::function<void()> work) {
  Stream* s = as_stream(stream);
  if (sticky(s->device) != cudaSuccess) return set_error(sticky(s->device));
  const int device = s->device;
  s->submit(Task{[work = std::move(work), device] {
                   if (sticky(device) == cudaSuccess) work();
                 },
                 true});
  return cudaSuccess;
}

std::string last_report() {
  std::lock_guard<std::mutex> lock(g_report_mu);
  return g_last_report;
}
void reset_errors() {
  for (Device& d : devices()) d.sticky = cudaSuccess;
  t_last_error = cudaSuccess;
  std::lock_guard<std::mutex> lock(g_report_mu);
  g_last_report.clear();
}
void hold_stream(cudaStream_t s) {
  Stream* was = g_held.exchange(s ? reinterpret_cast<Stream*>(s) : nullptr);
  if (was) was->demand();
}
void set_seed(unsigned long long seed) { g_seed = seed; }

}  // namespace cutrain_sim

using namespace cutrain_sim;

// ---- the API ---------------------------------------------------------------------------------
const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorPeerAccessAlreadyEnabled: return "cudaErrorPeerAccessAlreadyEnabled";
    case cudaErrorMisalignedAddress: return "cudaErrorMisalignedAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureWrongThread: return "cudaErrorStreamCaptureWrongThread";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    default: return "cudaErrorUnknown";
  }
}
const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorPeerAccessAlreadyEnabled: return "peer access is already enabled";
    case cudaErrorMisalignedAddress: return "misaligned address";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorStreamCaptureUnsupported:
      return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
      return "operation failed due to a previous error during capture";
    default: return "unknown error";
  }
}
cudaError_t cudaGetLastError() {
  const cudaError_t s = sticky(t_device);
  if (s != cudaSuccess) return s;
  const cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() {
  const cudaError_t s = sticky(t_device);
  return s != cudaSuccess ? s : t_last_error;
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = device_count();
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = t_device;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= device_count()) return set_error(cudaErrorInvalidDevice);
  t_device = device;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (device < 0 || device >= device_count()) return set_error(cudaErrorInvalidDevice);
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
  if (device < 0 || device >= device_count()) return set_error(cudaErrorInvalidDevice);
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
  *free = kTotalMemory - devices()[size_t(t_device)].allocated;
  return sticky(t_device);
}
cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  if (device < 0 || device >= device_count() || peer < 0 || peer >= device_count())
    return set_error(cudaErrorInvalidDevice);
  *can = device != peer;
  return cudaSuccess;
}
cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned) {
  if (peer < 0 || peer >= device_count() || peer == t_device)
    return set_error(cudaErrorInvalidDevice);
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::vector<bool>& on = devices()[size_t(t_device)].peer;
  on.resize(size_t(device_count()));
  if (on[size_t(peer)]) return set_error(cudaErrorPeerAccessAlreadyEnabled);
  on[size_t(peer)] = true;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() {
  std::vector<Stream*> mine;
  {
    std::lock_guard<std::mutex> lock(g_streams_mu);
    for (Stream* s : g_streams)
      if (s->device == t_device) mine.push_back(s);
  }
  for (Stream* s : mine)
    if (refuse_if_capturing(s)) return set_error(cudaErrorStreamCaptureUnsupported);
  for (Stream* s : mine) s->synchronize();
  return set_error(sticky(t_device));
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  if (sticky(t_device) != cudaSuccess) return sticky(t_device);
  Device& d = devices()[size_t(t_device)];
  if (d.allocated + bytes > kTotalMemory || !(*p = allocate(bytes, t_device))) {
    *p = nullptr;
    return set_error(cudaErrorMemoryAllocation);
  }
  d.allocated += bytes;
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  cudaDeviceSynchronize();  // as CUDA's: the device is done with it
  return release(p, false) ? cudaSuccess : set_error(cudaErrorInvalidValue);
}
cudaError_t cudaMallocHost(void** p, size_t bytes) {
  *p = allocate(bytes, -1);
  return *p ? cudaSuccess : set_error(cudaErrorMemoryAllocation);
}
cudaError_t cudaFreeHost(void* p) {
  if (!p) return cudaSuccess;
  // As CUDA's (its implicit synchronisation): the work queued on every device is done first,
  // so that a copy still queued to or from the buffer does not touch freed memory.
  std::vector<Stream*> all;
  {
    std::lock_guard<std::mutex> lock(g_streams_mu);
    all = g_streams;
  }
  for (Stream* s : all)
    if (!capturing(s)) s->synchronize();
  return release(p, true) ? cudaSuccess : set_error(cudaErrorInvalidValue);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind,
                            cudaStream_t stream) {
  return set_error(copy_on(as_stream(stream), dst, src, bytes));
}
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  Stream* s = legacy_stream(t_device);
  const cudaError_t e = cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
  if (e != cudaSuccess) return e;
  s->synchronize();
  return set_error(sticky(t_device));
}
cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                                size_t bytes, cudaStream_t stream) {
  if (dst_device < 0 || dst_device >= device_count() || src_device < 0 ||
      src_device >= device_count())
    return set_error(cudaErrorInvalidDevice);
  return set_error(copy_on(as_stream(stream), dst, src, bytes));
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream) {
  Stream* s = as_stream(stream);
  if (sticky(s->device) != cudaSuccess) return set_error(sticky(s->device));
  const int device = s->device;
  s->submit(Task{[=] {
                   if (sticky(device) == cudaSuccess) std::memset(p, value, bytes);
                 },
                 true});
  return cudaSuccess;
}
cudaError_t cudaMemset(void* p, int value, size_t bytes) {
  const cudaError_t e = cudaMemsetAsync(p, value, bytes, nullptr);
  if (e != cudaSuccess) return e;
  legacy_stream(t_device)->synchronize();
  return set_error(sticky(t_device));
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  auto* st = new Stream(t_device);
  *s = reinterpret_cast<cudaStream_t>(st);
  static std::atomic<uint64_t> created{0};
  static const uint64_t hold = env_u64("CUTRAIN_SIM_HOLD_STREAM", 0);
  if (++created == hold) g_held = st;
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (!s) return set_error(cudaErrorInvalidResourceHandle);
  Stream* st = reinterpret_cast<Stream*>(s);
  st->synchronize();  // CUDA lets queued work finish
  delete st;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  Stream* st = as_stream(s);
  if (refuse_if_capturing(st)) return set_error(cudaErrorStreamCaptureUnsupported);
  st->synchronize();
  return set_error(sticky(st->device));
}
cudaError_t cudaStreamQuery(cudaStream_t s) {
  Stream* st = as_stream(s);
  if (refuse_if_capturing(st)) return set_error(cudaErrorStreamCaptureUnsupported);
  if (sticky(st->device) != cudaSuccess) return sticky(st->device);
  return st->finished() ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaStreamGetId(cudaStream_t s, unsigned long long* id) {
  *id = as_stream(s)->id;
  return cudaSuccess;
}
cudaError_t cudaStreamGetDevice(cudaStream_t s, int* device) {
  *device = as_stream(s)->device;
  return cudaSuccess;
}
cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void* data) {
  Stream* st = as_stream(s);
  if (sticky(st->device) != cudaSuccess) return set_error(sticky(st->device));
  const int device = st->device;
  st->submit(Task{[=] {
                    if (sticky(device) == cudaSuccess) fn(data);
                  },
                  false});
  return cudaSuccess;
}

std::mutex g_events_mu;
std::map<Event*, std::shared_ptr<Event>> g_events;  // the handles not yet destroyed

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags) {
  auto ev = std::make_shared<Event>();
  ev->timing = !(flags & cudaEventDisableTiming);
  *e = reinterpret_cast<cudaEvent_t>(ev.get());
  std::lock_guard<std::mutex> lock(g_events_mu);
  g_events[ev.get()] = std::move(ev);
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  // A record still queued completes into it: wait for those first.
  Event* ev = reinterpret_cast<Event*>(e);
  {
    std::unique_lock<std::mutex> lock(ev->mu);
    if (!ev->captured_on) ev->cv.wait(lock, [&] { return ev->completed >= ev->recorded; });
  }
  std::lock_guard<std::mutex> lock(g_events_mu);
  g_events.erase(ev);  // freed now, or by the last queued wait that names it
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  Event* ev = reinterpret_cast<Event*>(e);
  Stream* st = as_stream(s);
  if (sticky(st->device) != cudaSuccess) return set_error(sticky(st->device));
  if (capturing(st)) {
    // Inside a capture the record is a node of the graph: it marks the event at each replay.
    std::lock_guard<std::mutex> lock(ev->mu);
    ev->captured_on = st;
    st->submit(Task{[ev = ev->shared_from_this()] {
                      std::lock_guard<std::mutex> l(ev->mu);
                      ev->when = Clock::now();
                    },
                    false});
    return cudaSuccess;
  }
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(ev->mu);
    id = ++ev->recorded;
    ev->captured_on = nullptr;
    ev->recorded_on = st;
  }
  st->submit(Task{[ev = ev->shared_from_this(), id] {
                    {
                      std::lock_guard<std::mutex> l(ev->mu);
                      ev->completed = std::max(ev->completed, id);
                      ev->when = Clock::now();
                    }
                    ev->cv.notify_all();
                  },
                  false});
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
  Event* ev = reinterpret_cast<Event*>(e);
  Stream* st = as_stream(s);
  if (sticky(st->device) != cudaSuccess) return set_error(sticky(st->device));
  uint64_t target;
  {
    std::lock_guard<std::mutex> lock(ev->mu);
    if (ev->captured_on) return cudaSuccess;  // in a graph, the order of its one stream
    target = ev->recorded;
  }
  if (target == 0) return cudaSuccess;  // never recorded: nothing to wait for
  st->submit(Task{[ev = ev->shared_from_this(), target] {
                    std::unique_lock<std::mutex> l(ev->mu);
                    if (ev->completed < target && ev->recorded_on) ev->recorded_on->demand();
                    ev->cv.wait(l, [&] { return ev->completed >= target; });
                  },
                  false});
  return cudaSuccess;
}
// Waiting for (or asking about) an event recorded in a capture that is still going on: refused,
// and the capture broken (CUDA's rule: nothing of a capture runs before it is launched).
// (The stream of a capture that ended may be gone since: only a stream still there is asked.)
static bool refuse_captured(Event* ev) {
  Stream* st;
  {
    std::lock_guard<std::mutex> lock(ev->mu);
    st = ev->captured_on;
  }
  if (!st) return false;
  std::lock_guard<std::mutex> lock(g_streams_mu);
  return std::find(g_streams.begin(), g_streams.end(), st) != g_streams.end() &&
         refuse_if_capturing(st);
}
cudaError_t cudaEventQuery(cudaEvent_t e) {
  Event* ev = reinterpret_cast<Event*>(e);
  if (refuse_captured(ev)) return set_error(cudaErrorStreamCaptureUnsupported);
  std::lock_guard<std::mutex> lock(ev->mu);
  if (ev->recorded_on && ev->completed < ev->recorded) ev->recorded_on->demand();
  return ev->completed >= ev->recorded ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  Event* ev = reinterpret_cast<Event*>(e);
  if (refuse_captured(ev)) return set_error(cudaErrorStreamCaptureUnsupported);
  std::unique_lock<std::mutex> lock(ev->mu);
  const uint64_t target = ev->recorded;
  if (ev->recorded_on && ev->completed < target) ev->recorded_on->demand();
  ev->cv.wait(lock, [&] { return ev->completed >= target; });
  return sticky(t_device);
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  Event* a = reinterpret_cast<Event*>(start);
  Event* b = reinterpret_cast<Event*>(end);
  if (!a->timing || !b->timing) return set_error(cudaErrorInvalidResourceHandle);
  std::scoped_lock lock(a->mu, b->mu);
  if (a->completed < a->recorded || b->completed < b->recorded) return cudaErrorNotReady;
  if (a->recorded == 0 || b->recorded == 0) return set_error(cudaErrorInvalidResourceHandle);
  *ms = std::chrono::duration<float, std::milli>(b->when - a->when).count();
  return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
  if (!s) return set_error(cudaErrorStreamCaptureUnsupported);  // not the legacy stream
  Stream* st = as_stream(s);
  std::lock_guard<std::mutex> lock(st->mu);
  if (st->capturing) return set_error(cudaErrorInvalidValue);
  st->capturing = true;
  st->capture_broken = false;
  st->captured.clear();
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
  Stream* st = as_stream(s);
  std::lock_guard<std::mutex> lock(st->mu);
  *graph = nullptr;
  if (!st->capturing) return set_error(cudaErrorInvalidValue);
  st->capturing = false;
  if (st->capture_broken) {
    st->captured.clear();
    return set_error(cudaErrorStreamCaptureInvalidated);
  }
  auto* g = new Graph;
  g->tasks = std::move(st->captured);
  st->captured.clear();
  *graph = reinterpret_cast<cudaGraph_t>(g);
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  auto* copy = new Graph(*reinterpret_cast<Graph*>(graph));
  *exec = reinterpret_cast<cudaGraphExec_t>(copy);
  return cudaSuccess;
}
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
  const Graph* g = reinterpret_cast<Graph*>(graph);
  size_t n = 0;
  for (const Task& t : g->tasks) n += t.kernel_or_copy;
  if (nodes) {
    n = std::min(n, *count);
    for (size_t i = 0; i < n; i++) nodes[i] = reinterpret_cast<cudaGraphNode_t>(i + 1);
  }
  *count = n;
  return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
  Stream* st = as_stream(s);
  if (sticky(st->device) != cudaSuccess) return set_error(sticky(st->device));
  for (const Task& t : reinterpret_cast<Graph*>(exec)->tasks) st->submit(t);
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete reinterpret_cast<Graph*>(graph);
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete reinterpret_cast<Graph*>(exec);
  return cudaSuccess;
}
