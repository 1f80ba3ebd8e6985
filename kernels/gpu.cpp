// The CUDA runtime wrappers of gpu.h. In a CPU-only build (no CUTRAIN_CUDA) the same
// functions exist: gpu_usable() is false with a reason, and anything that would need a device
// throws cutrain::Error saying so.
#include "kernels/gpu.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "kernels/check.h"
#include "kernels/nvtx_memory.h"

namespace cutrain {

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != 0 && std::string(v) != "0";
}

bool gpu_simulated() {
#if defined(CUTRAIN_SIM)
  return true;
#else
  return false;
#endif
}

#if defined(CUTRAIN_CUDA)

bool sync_after_launch() {
  static const bool on = env_flag("CUTRAIN_SYNC_LAUNCHES");
  return on;
}

bool cuda_compiled() { return true; }

namespace {
struct Probe {
  int count = 0;
  std::string reason;
};
const Probe& probe() {
  static const Probe p = [] {
    Probe r;
    cudaError_t e = cudaGetDeviceCount(&r.count);
    if (e != cudaSuccess) {
      r.reason = std::string("no usable CUDA device (cudaGetDeviceCount: ") +
                 cudaGetErrorString(e) + ")";
      r.count = 0;
      cudaGetLastError();  // clear it: "no device" is an answer, not a failure
    } else if (r.count == 0) {
      r.reason = "no CUDA device found";
    }
    return r;
  }();
  return p;
}

}  // namespace

DeviceGuard::DeviceGuard(int device) {
  CUDA_CHECK(cudaGetDevice(&prev_));
  if (prev_ != device) CUDA_CHECK(cudaSetDevice(device));
}
DeviceGuard::~DeviceGuard() { cudaSetDevice(prev_); }

bool gpu_usable() { return probe().count > 0; }
const std::string& gpu_unavailable_reason() { return probe().reason; }
int gpu_count() { return probe().count; }

std::string gpu_name(int device) {
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return prop.name;
}

std::string gpu_bus_id(int device) {
  char id[32] = {};
  CUDA_CHECK(cudaDeviceGetPCIBusId(id, int(sizeof id), device));
  return id;
}

size_t gpu_memory_available(int device) {
  const DeviceGuard on(device);
  size_t free = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return free + device_allocator(device).stats().bytes_cached;
}

int current_device() {
  int d = 0;
  CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void set_device(int device) {
  CHECK(device >= 0 && device < gpu_count(),
        "device " << device << " does not exist (" << gpu_count() << " usable)");
  CUDA_CHECK(cudaSetDevice(device));
}

// The caching allocator's annotations for memory checkers (kernels/nvtx_memory.h). A tensor's
// region is taken back in the order of the stream its block serves: the allocator hands a
// block out again before the kernels queued with its last tensor have run, so taking it back
// at the host's time would call their accesses a use after free. That is a host function
// queued on the stream (for a held pool, a graph's, at once: only its replays use it). The new
// tensor's region is lent at once (its work is queued after). On a GPU a host function per
// tensor costs the stream a trip to the host: only with CUTRAIN_NVTX_MEMORY=1
// (compute-sanitizer's memcheck, --nvtx yes); the simulator always checks them.
bool nvtx_memory_on() {
  static const bool on = gpu_simulated() || env_flag("CUTRAIN_NVTX_MEMORY");
  return on;
}
void in_stream_order(int device, const void* key, bool now, std::function<void()> f) {
  if (!now) {
    DeviceGuard g(device);  // (the legacy stream, key nullptr, is the current device's)
    auto* job = new std::function<void()>(std::move(f));
    const auto run = [](void* j) {
      auto* fn = static_cast<std::function<void()>*>(j);
      (*fn)();
      delete fn;
    };
    if (cudaLaunchHostFunc(static_cast<cudaStream_t>(const_cast<void*>(key)), run, job) ==
        cudaSuccess)
      return;
    cudaGetLastError();  // a device that failed already: its error is reported elsewhere
    f = std::move(*job);
    delete job;
  }
  f();
}

CachingAllocator& device_allocator(int device) {
  CHECK(device >= 0 && device < gpu_count(),
        "device " << device << " does not exist (" << gpu_count() << " usable)");
  static std::mutex mu;
  static std::vector<std::unique_ptr<CachingAllocator>> pools;
  std::lock_guard<std::mutex> lock(mu);
  if (pools.empty()) pools.resize(size_t(gpu_count()));
  auto& pool = pools[size_t(device)];
  if (!pool) {
    CachingAllocator::Backend b;
    b.alloc = [device](size_t n) -> void* {
      DeviceGuard g(device);
      void* p = nullptr;
      if (cudaMalloc(&p, n) != cudaSuccess) {
        cudaGetLastError();  // out of memory is reported by the allocator, with sizes
        return nullptr;
      }
      nvtx_pool_block(p, n);  // for memory checkers: no access until lent (nvtx_memory.h)
      return p;
    };
    b.free = [device](void* p) {
      DeviceGuard g(device);
      nvtx_pool_block_freed(p);
      CUDA_CHECK(cudaFree(p));
    };
    if (nvtx_memory_on()) {
      b.lend = nvtx_lend;
      b.take_back = [device](void* token, const void* key, bool held) {
        in_stream_order(device, key, held, [token] { nvtx_take_back(token); });
      };
    }
    static const bool exact = env_flag("CUTRAIN_EXACT_ALLOC");
    pool = std::make_unique<CachingAllocator>(std::move(b), exact);
  }
  return *pool;
}

Stream::Stream(int device) : device_(device) {
  CHECK(gpu_usable(), "cannot create a CUDA stream: " << gpu_unavailable_reason());
  DeviceGuard g(device);
  CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking));
}
Stream::~Stream() {
  if (!s_) return;
  // Its cached blocks go back to cudaFree (which waits for the device), before the handle can
  // be reused by a new stream (kernels/caching_allocator.h). Any device's pool may hold some:
  // a buffer on one GPU may be ordered by a stream of another (a peer copy's source).
  try {
    for (int d = 0; d < gpu_count(); d++) device_allocator(d).retire_stream(s_);
  } catch (...) {  // a destructor: a CUDA error here is reported by the next call that checks
  }
  cudaStreamDestroy(s_);
}
void Stream::synchronize() const { CUDA_CHECK(cudaStreamSynchronize(s_)); }

Event::Event(bool timing) {
  CHECK(gpu_usable(), "cannot create a CUDA event: " << gpu_unavailable_reason());
  // Blocking sync: a thread waiting on an event sleeps instead of spinning a core (the loader's
  // workers wait for their slots' consumption, the checkpoint writer for its clones, while the
  // decode threads need every core).
  CUDA_CHECK(cudaEventCreateWithFlags(
      &e_, (timing ? cudaEventDefault : cudaEventDisableTiming) | cudaEventBlockingSync));
}
Event::~Event() {
  if (e_) cudaEventDestroy(e_);
}
void Event::record(cudaStream_t stream) { CUDA_CHECK(cudaEventRecord(e_, stream)); }
void Event::wait(cudaStream_t stream) const { CUDA_CHECK(cudaStreamWaitEvent(stream, e_, 0)); }
bool Event::done() const {
  cudaError_t e = cudaEventQuery(e_);
  if (e == cudaErrorNotReady) return false;
  CUDA_CHECK(e);
  return true;
}
void Event::synchronize() const { CUDA_CHECK(cudaEventSynchronize(e_)); }
float Event::ms_since(const Event& start) const {
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start.e_, e_));
  return ms;
}

namespace {
// The CudaGraph this thread is capturing, and its device: DeviceBuffers made or freed there
// meanwhile use its private pool.
struct Capturing {
  const CudaGraph* graph = nullptr;
  int device = -1;
};
thread_local Capturing t_capturing;
}  // namespace

bool capturing_graph() { return t_capturing.graph != nullptr; }

namespace {
std::atomic<bool> g_cuda_errors_throw{false};
}
bool cuda_errors_throw() { return capturing_graph() || g_cuda_errors_throw.load(); }
void set_cuda_errors_throw(bool on) { g_cuda_errors_throw = on; }

DeviceBuffer::DeviceBuffer(size_t bytes, int device, cudaStream_t stream)
    : bytes_(bytes), device_(device) {
  // While capturing: from the graph's pool, and no out-of-memory flush, whose cudaFree may
  // not run under capture (out of memory then refuses the capture).
  const bool pool = t_capturing.graph && t_capturing.device == device;
  const void* key = pool ? static_cast<const void*>(t_capturing.graph) : stream;
  p_ = device_allocator(device).allocate(bytes, key, !capturing_graph());
}
void DeviceBuffer::release() {
  if (p_) {
    if (t_capturing.graph && t_capturing.device == device_)
      // The graph may have used it (a tensor made before the capture, freed during it): it
      // must not go back to its stream, whose next kernels would share it with the replays.
      device_allocator(device_).deallocate(p_, t_capturing.graph);
    else
      device_allocator(device_).deallocate(p_);
  }
  p_ = nullptr;
  bytes_ = 0;
}

std::string CudaGraph::capture(cudaStream_t stream, const std::function<void()>& work) {
  CHECK(gpu_usable(), "cannot capture a CUDA graph: " << gpu_unavailable_reason());
  CHECK(!exec_ && device_ < 0, "CudaGraph: capture() is called once per graph");
  CHECK(!t_capturing.graph, "CudaGraph: this thread is capturing another graph");
  device_ = current_device();
  // The capture's buffers are new blocks (its pool starts empty): make room for them now, while
  // cudaFree is allowed, by giving back what the streams have cached.
  device_allocator(device_).empty_cache();
  device_allocator(device_).hold(this);
  t_capturing = Capturing{this, device_};  // from here CUDA errors throw (kernels/check.h)
  std::string why;
  bool began = false;
  try {
    CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
    began = true;
    work();
  } catch (const std::exception& e) {
    why = e.what();
  }
  t_capturing = Capturing{};
  if (!began) return why;  // the stream is not capturing: nothing to end
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);  // ends it in every case
  if (why.empty() && ended != cudaSuccess)
    why = std::string("cudaStreamEndCapture: ") + cudaGetErrorString(ended);
  if (why.empty()) {
    const cudaError_t made = cudaGraphInstantiate(&exec_, graph, 0);
    if (made != cudaSuccess) {
      why = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(made);
      exec_ = nullptr;
    } else {
      CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &nodes_));
    }
  }
  if (graph) cudaGraphDestroy(graph);  // the executable graph is a copy
  if (!why.empty()) cudaGetLastError();  // a refused capture is an answer, not a failure
  return why;
}

void CudaGraph::launch(cudaStream_t stream) const {
  CHECK(exec_, "CudaGraph: launch before a successful capture");
  CUDA_CHECK(cudaGraphLaunch(exec_, stream));
}

CudaGraph::~CudaGraph() {
  if (exec_) cudaGraphExecDestroy(exec_);  // a replay in flight finishes first (CUDA's rule)
  // The pool's blocks go back to cudaFree, which waits for the device: no replay still
  // writes into them.
  if (device_ >= 0) try {
      device_allocator(device_).retire_stream(this);
    } catch (...) {  // a destructor: a CUDA error here is reported by the next call that checks
    }
}

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
  CHECK(gpu_usable(), "cannot allocate pinned memory: " << gpu_unavailable_reason());
  CUDA_CHECK(cudaMallocHost(&p_, bytes));
}
PinnedBuffer::~PinnedBuffer() {
  if (p_) cudaFreeHost(p_);
}

void copy_async(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
}
void copy_sync(void* dst, const void* src, size_t bytes) {
  CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
  // From pageable memory cudaMemcpy may return once the bytes are staged, before the DMA has
  // written them (the CUDA docs' "API synchronization behavior"); a kernel on a non-blocking
  // stream would not wait for it. The copy ran on the legacy stream: wait for that stream.
  CUDA_CHECK(cudaStreamSynchronize(nullptr));
}
void memset_async(void* dst, int value, size_t bytes, cudaStream_t stream) {
  CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, stream));
}

struct StreamHold::State {
  std::atomic<bool> open{false}, passed{false}, timed_out{false};
  double limit_s;
  cudaStream_t stream;
};

StreamHold::StreamHold(cudaStream_t stream, double limit_s) {
  auto state = std::make_unique<State>();  // freed here if the launch below throws
  state->limit_s = limit_s;
  state->stream = stream;
  const cudaHostFn_t wait = [](void* p) {  // on CUDA's host-function thread: no CUDA calls
    auto* s = static_cast<State*>(p);
    const auto give_up = std::chrono::steady_clock::now() +
                         std::chrono::duration<double>(s->limit_s);
    while (!s->open) {
      if (std::chrono::steady_clock::now() > give_up) {
        s->timed_out = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    s->passed = true;
  };
  CUDA_CHECK(cudaLaunchHostFunc(stream, wait, state.get()));
  state_ = state.release();
}

StreamHold::~StreamHold() {
  state_->open = true;
  while (!state_->passed) {
    // A stream that failed (a kernel's fault: sticky) never reaches the hold: waiting would
    // hang. The state is left to the host function that may never run (a few bytes), and the
    // error surfaces at the owner's next CUDA call.
    const cudaError_t e = cudaStreamQuery(state_->stream);
    if (e != cudaSuccess && e != cudaErrorNotReady) return;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  delete state_;
}

void StreamHold::release() { state_->open = true; }
bool StreamHold::timed_out() const { return state_->timed_out; }

#else  // CPU-only build

namespace {
const std::string kNoCuda = "built without CUDA (CPU-only build)";
[[noreturn]] void no_cuda(const char* what) {
  throw Error(std::string("cannot ") + what + ": " + kNoCuda);
}
}  // namespace

bool cuda_compiled() { return false; }
bool gpu_usable() { return false; }
const std::string& gpu_unavailable_reason() { return kNoCuda; }
int gpu_count() { return 0; }
std::string gpu_name(int) { no_cuda("query a device"); }
std::string gpu_bus_id(int) { no_cuda("query a device"); }
size_t gpu_memory_available(int) { no_cuda("query a device"); }
void set_device(int) { no_cuda("select a device"); }
int current_device() { no_cuda("query the current device"); }
DeviceGuard::DeviceGuard(int) { no_cuda("select a device"); }
DeviceGuard::~DeviceGuard() = default;
CachingAllocator& device_allocator(int) { no_cuda("allocate device memory"); }

Stream::Stream(int) { no_cuda("create a CUDA stream"); }
Stream::~Stream() = default;
void Stream::synchronize() const {}
Event::Event(bool) { no_cuda("create a CUDA event"); }
Event::~Event() = default;
void Event::record(cudaStream_t) {}
void Event::wait(cudaStream_t) const {}
bool Event::done() const { return true; }
void Event::synchronize() const {}
float Event::ms_since(const Event&) const { return 0; }
DeviceBuffer::DeviceBuffer(size_t, int, cudaStream_t) { no_cuda("allocate device memory"); }
void DeviceBuffer::release() {}
std::string CudaGraph::capture(cudaStream_t, const std::function<void()>&) {
  no_cuda("capture a CUDA graph");
}
void CudaGraph::launch(cudaStream_t) const { no_cuda("launch a CUDA graph"); }
CudaGraph::~CudaGraph() = default;
PinnedBuffer::PinnedBuffer(size_t) { no_cuda("allocate pinned memory"); }
PinnedBuffer::~PinnedBuffer() = default;
void copy_async(void*, const void*, size_t, cudaStream_t) { no_cuda("copy to or from a device"); }
void copy_sync(void*, const void*, size_t) { no_cuda("copy to or from a device"); }
void memset_async(void*, int, size_t, cudaStream_t) { no_cuda("set device memory"); }

struct StreamHold::State {};
StreamHold::StreamHold(cudaStream_t, double) : state_(nullptr) {
  CHECK(false, "StreamHold: a CPU-only build has no GPU streams");
}
StreamHold::~StreamHold() = default;
void StreamHold::release() {}
bool StreamHold::timed_out() const { return false; }

#endif

// The move operations are the same in both builds.
Stream::Stream(Stream&& o) noexcept : s_(o.s_), device_(o.device_) { o.s_ = nullptr; }
Stream& Stream::operator=(Stream&& o) noexcept {
  std::swap(s_, o.s_);
  std::swap(device_, o.device_);
  return *this;
}
Event::Event(Event&& o) noexcept : e_(o.e_) { o.e_ = nullptr; }
Event& Event::operator=(Event&& o) noexcept {
  std::swap(e_, o.e_);
  return *this;
}
DeviceBuffer::~DeviceBuffer() { release(); }
DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : p_(o.p_), bytes_(o.bytes_), device_(o.device_) {
  o.p_ = nullptr;
  o.bytes_ = 0;
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  std::swap(p_, o.p_);
  std::swap(bytes_, o.bytes_);
  std::swap(device_, o.device_);
  return *this;
}
PinnedBuffer::PinnedBuffer(PinnedBuffer&& o) noexcept : p_(o.p_), bytes_(o.bytes_) {
  o.p_ = nullptr;
  o.bytes_ = 0;
}
PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  std::swap(p_, o.p_);
  std::swap(bytes_, o.bytes_);
  return *this;
}

}  // namespace cutrain
