// defines: the CUDA runtime in RAII form: gpu_usable() and why not, Stream, Event,
// DeviceBuffer (from the per-device caching allocator), PinnedBuffer, CudaGraph, copy helpers.
//
// This header needs no CUDA headers: a CPU-only build compiles everything that includes it,
// and gpu_usable() then answers false with the reason "built without CUDA". Every object here
// is move-only: copying a buffer or a stream by accident is a performance bug or a double free,
// so the copy constructors are deleted.
#pragma once
#include <cstddef>
#include <functional>
#include <string>

#include "kernels/caching_allocator.h"

// The CUDA runtime's own handle types (identical typedefs are legal to repeat in C++).
struct CUstream_st;
struct CUevent_st;
struct CUgraphExec_st;
typedef CUstream_st* cudaStream_t;
typedef CUevent_st* cudaEvent_t;
typedef CUgraphExec_st* cudaGraphExec_t;

namespace cutrain {

// Whether the environment switch `name` is on: set, non-empty and not "0" (CUTRAIN_SYNC_LAUNCHES,
// CUTRAIN_EXACT_ALLOC, the tests' CUTRAIN_EXPECT_GPU).
bool env_flag(const char* name);
bool cuda_compiled();                 // was this binary built with CUDA?
// Is its GPU the simulator (`make SIM=1`, sim/README.md)? Its devices are named "... (simulated)"
// and its times are the host's: whatever shows a device or a GPU time says so.
bool gpu_simulated();
bool gpu_usable();                    // built with CUDA and at least one device answers
const std::string& gpu_unavailable_reason();  // "" when usable; otherwise one line saying why
int gpu_count();                      // 0 when not usable
std::string gpu_name(int device);
// Its PCI address ("0000:3B:00.0"): the same GPU seen by two processes has the same one.
std::string gpu_bus_id(int device);
// Free memory of `device` in bytes as the driver sees it (cudaMemGetInfo), plus what its
// caching allocator holds unused (that memory is this process's to reuse).
size_t gpu_memory_available(int device);
void set_device(int device);          // the calling thread's current device (it is per thread)
int current_device();                 // the calling thread's current device

// Makes `device` the calling thread's current device for a scope, restoring the previous one
// at its end (memory, streams, events and kernels belong to the device current when they are
// made or launched).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int prev_ = 0;
};

// The caching allocator of one device (created on first use, lives until exit).
CachingAllocator& device_allocator(int device);

class Stream {
 public:
  explicit Stream(int device = 0);    // a non-blocking stream on `device`
  ~Stream();
  Stream(Stream&& o) noexcept;
  Stream& operator=(Stream&& o) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return s_; }
  int device() const { return device_; }
  void synchronize() const;           // for tests and shutdown, never inside a training step

 private:
  cudaStream_t s_ = nullptr;
  int device_ = 0;
};

class Event {
 public:
  explicit Event(bool timing = false);
  ~Event();
  Event(Event&& o) noexcept;
  Event& operator=(Event&& o) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(cudaStream_t stream);
  void wait(cudaStream_t stream) const;  // make `stream` wait for this event (no host block)
  bool done() const;                     // has everything before record() finished?
  void synchronize() const;
  float ms_since(const Event& start) const;  // both recorded with timing = true
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

// Device memory from the device's caching allocator, owned. bytes() is what was asked for.
// Cached for `stream`; while this thread captures a CudaGraph on that device, the graph's.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(size_t bytes, int device = 0, cudaStream_t stream = nullptr);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return p_; }
  size_t bytes() const { return bytes_; }
  int device() const { return device_; }

 private:
  void release();
  void* p_ = nullptr;
  size_t bytes_ = 0;
  int device_ = 0;
};

// Page-locked host memory: the only kind a cudaMemcpyAsync really overlaps with compute.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& o) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data() const { return p_; }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

// A CUDA graph: the work one stream is given, recorded once and replayed with one launch.
// A step of a small model is a hundred-odd short kernels; launched one by one, the GPU idles
// between them while the host prepares the next. Replayed from a graph, the kernels follow each
// other on the device.
//
//   CudaGraph g;
//   std::string why = g.capture(stream, [&] { queue the step's kernels on `stream` });
//   if (why.empty()) g.launch(stream);   // now, and again each step: the same work
//
// capture() records and does not run: the kernels, their arguments and every address they
// touch are frozen, so each replay reads and writes the same memory. What changes from run to
// run must be in device memory at a fixed address (a batch copied into the graph's input
// buffer, a loss scale read from a device scalar), never a kernel argument.
// Device memory the calling thread allocates during the capture comes from the graph's private
// pool (kernels/caching_allocator.h), and the buffers it frees go there: nobody else ever gets
// those addresses while the graph lives, though the tensors that asked for them are gone.
// Capture is in relaxed mode: other threads (the loader's) go on copying on their own streams.
class CudaGraph {
 public:
  CudaGraph() = default;
  ~CudaGraph();  // the executable graph, and its private pool back to the allocator
  CudaGraph(const CudaGraph&) = delete;  // its address is its pool's key: no moves either
  CudaGraph& operator=(const CudaGraph&) = delete;

  // Records what `work` queues on `stream` (on the current device) without running any of
  // it, and makes the graph ready to launch. Returns "" on success, else why it failed (an
  // exception out of `work`, such as a call that waits for the stream, or CUDA refusing the
  // capture); then nothing has run, the stream works as before and this graph stays empty.
  std::string capture(cudaStream_t stream, const std::function<void()>& work);
  void launch(cudaStream_t stream) const;  // queue one replay on `stream`
  bool captured() const { return exec_ != nullptr; }
  size_t nodes() const { return nodes_; }  // kernels, copies and memsets in the graph

 private:
  cudaGraphExec_t exec_ = nullptr;
  size_t nodes_ = 0;
  int device_ = -1;  // >= 0 once its pool is held on that device's allocator
};

// Holds a stream at a host function until release() (or the destructor, which waits until
// the stream has passed it, or has failed): what is queued behind it then runs back to back, not at the pace
// of the host that queues it (timing a step's kernels: kernels/launch_plan.h). A hold not
// released within limit_s seconds opens by itself, and timed_out() says so (a host that waited
// for the held stream would otherwise wait forever).
class StreamHold {
 public:
  explicit StreamHold(cudaStream_t stream, double limit_s = 10);
  ~StreamHold();
  StreamHold(const StreamHold&) = delete;
  StreamHold& operator=(const StreamHold&) = delete;
  void release();
  bool timed_out() const;

 private:
  struct State;
  State* state_ = nullptr;  // freed by the destructor, after the stream passed the hold
};

// Copies between any two of host, pinned and device memory (unified addressing decides the
// direction). copy_async is ordered on `stream`; copy_sync returns when the data has arrived.
// Launch costs (one each): copy_cost and memset_cost, kernels/launch_plan.h.
void copy_async(void* dst, const void* src, size_t bytes, cudaStream_t stream);
void copy_sync(void* dst, const void* src, size_t bytes);
void memset_async(void* dst, int value, size_t bytes, cudaStream_t stream);

}  // namespace cutrain
