// What the simulated runtime's files share (internal to sim/): errors and reports, devices,
// the handles' registry, streams and their tasks, events and graphs. Each API call lives in
// the file of its concern: errors.cpp, devices.cpp, memory.cpp, streams.cpp, events.cpp,
// graphs.cpp (sim/README.md).
//
// Memory is host memory: device allocations are registered (the kernels' accesses are checked
// against them, sim/access.cpp) and poisoned (0xff) when allocated, as a GPU's are garbage.
// Each stream is an in-order queue of tasks run by a host thread of its own, so two streams
// really run at once; the legacy default stream (nullptr) is one more such stream per device.
// A kernel that fails leaves its device's error sticky: every later call on that device
// returns it.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sim/sim.h"

namespace cutrain_sim {

using Clock = std::chrono::steady_clock;

// ---- errors (errors.cpp) ---------------------------------------------------------------------
// Sets the calling thread's last error (cudaGetLastError) when e is one; returns e.
cudaError_t set_error(cudaError_t e);
// Prints a failure's report on stderr and keeps it for last_report().
void report(const std::string& text);
// An unsigned number from the environment, or `fallback`.
uint64_t env_u64(const char* name, uint64_t fallback);
// The seed of the block and thread orders (CUTRAIN_SIM_SEED).
uint64_t seed();

// ---- devices (devices.cpp) -------------------------------------------------------------------
struct Stream;
struct Device {
  std::atomic<cudaError_t> sticky{cudaSuccess};
  std::atomic<size_t> allocated{0};
  std::vector<bool> peer;  // peer access enabled to device j
  std::shared_ptr<Stream> legacy;
};
constexpr size_t kTotalMemory = size_t(80) << 30;
std::vector<Device>& devices();
int device_count();
bool valid_device(int device);
int& current_device();  // the calling host thread's (cudaSetDevice)
// The device's sticky error (cudaSuccess while none).
cudaError_t sticky(int device);

// ---- the registry of handles -----------------------------------------------------------------
// The live objects of one kind behind the handles the API gave out. A handle passed in is
// looked up here before it is used: one that was never given out, or was destroyed, finds
// nothing (cudaErrorInvalidResourceHandle), where a cast would touch freed memory. The
// registry holds the handle's own reference; work queued on a stream holds its own, so an
// object destroyed by the host lives on while the device still needs it (as CUDA's do).
template <class T>
class Registry {
 public:
  void add(std::shared_ptr<T> p) {
    std::lock_guard<std::mutex> lock(mu_);
    const void* key = p.get();
    live_[key] = std::move(p);
  }
  std::shared_ptr<T> find(const void* handle) const {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = live_.find(handle);
    return it == live_.end() ? nullptr : it->second;
  }
  std::shared_ptr<T> remove(const void* handle) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = live_.find(handle);
    if (it == live_.end()) return nullptr;
    std::shared_ptr<T> p = std::move(it->second);
    live_.erase(it);
    return p;
  }
  std::vector<std::shared_ptr<T>> all() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::shared_ptr<T>> out;
    for (const auto& kv : live_) out.push_back(kv.second);
    return out;
  }

 private:
  mutable std::mutex mu_;
  std::map<const void*, std::shared_ptr<T>> live_;
};

// ---- streams (streams.cpp) -------------------------------------------------------------------
struct Task {
  std::function<void()> run;
  bool kernel_or_copy = true;  // counts as a graph node (kernels, copies, memsets)
};

// A capture in progress (graphs.cpp): the nodes its streams submitted, in the order they were
// submitted, each with the nodes it depends on. The stream that began it is its origin; another
// stream joins it by waiting for an event recorded in it (a fork), and must be joined back
// (the origin waits for an event recorded on it) before the origin ends the capture.
struct Capture {
  std::mutex mu;
  std::vector<Task> nodes;
  std::vector<std::vector<size_t>> deps;  // per node: the nodes it waits for
  bool broken = false;                    // a call refused during it: the capture is invalid
  const Stream* origin = nullptr;
  std::vector<std::weak_ptr<Stream>> members;  // the streams forked into it
};

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
  // graph capture: the capture this stream is in (null: none), and its nodes that the
  // stream's next node depends on
  std::shared_ptr<Capture> capture;
  std::vector<size_t> frontier;
  std::thread worker;

  explicit Stream(int dev);
  ~Stream();
  // Queues t (or, while capturing, adds it to the capture).
  void submit(Task t);
  // Waits until everything queued so far has run.
  void synchronize();
  // Whether everything queued so far has run.
  bool finished();
  // A held stream (hold_stream) runs once someone waits for it: this says someone does.
  void demand();
  bool is_capturing();
  // A call that waits for a capturing stream: true (refused) and the capture broken (CUDA's rule).
  bool refuse_if_capturing();
  // The capture this stream is in (null: none), and its frontier.
  std::shared_ptr<Capture> capture_state(std::vector<size_t>* frontier);
  // A wait for nodes of capture c: a stream in no capture joins it (a fork), one in c depends
  // on them from now on; false for a stream in another capture (CUDA's isolation error).
  bool join(const std::shared_ptr<Capture>& c, const std::vector<size_t>& nodes);

 private:
  void wait_while_held();
  void work();
};

Registry<Stream>& streams();
// The stream of a handle: the current device's legacy stream for nullptr, the live stream it
// names, or nullptr for a handle that names none.
std::shared_ptr<Stream> find_stream(cudaStream_t handle);
// Every stream of `device` (-1: of every device), the legacy ones included.
std::vector<std::shared_ptr<Stream>> streams_of(int device);

// ---- events (events.cpp) ---------------------------------------------------------------------
struct Event {
  int device = 0;  // the current device when it was made
  std::mutex mu;
  std::condition_variable cv;
  uint64_t recorded = 0, completed = 0;
  Clock::time_point when{};
  bool timing = true;
  std::weak_ptr<Stream> captured_on;  // recorded during a capture (expired: none, or gone)
  bool in_capture = false;            // the last record was a capture's...
  std::weak_ptr<Capture> capture;     // ... this one's, after these nodes
  std::vector<size_t> capture_nodes;
  std::weak_ptr<Stream> recorded_on;  // the stream of the last record
};

// ---- allocations (allocations.cpp) -----------------------------------------------------------
// A new allocation of `bytes` (device >= 0, or -1: pinned host memory), poisoned, with its red
// zone; nullptr when the host has no memory.
void* allocate(size_t bytes, int device);
// Frees the allocation based at p if it is one of the kind asked for (false: it is not).
bool release(void* p, bool pinned);
// The NVTX memory annotations of a sub-allocator (sim/pools.cpp): the allocation holding
// [base, base+bytes) is a pool block, none of it accessible but its live regions.
void pool_register(uintptr_t base, size_t bytes);
void pool_unregister(uintptr_t base);
// A region: live until unregistered by its id (or, by address, the last one registered there);
// several may be live at one address (a tensor's block handed out again while work queued
// with the last tensor in it has still to run).
uint64_t region_register(uintptr_t p, size_t bytes);
void region_unregister_id(uint64_t id);
void region_unregister(uintptr_t p);

// ---- memory (memory.cpp) ---------------------------------------------------------------------
// A copy of `bytes` from src to dst queued on s (pageable host memory as CUDA treats it), its
// ranges checked first (`call` names the API call in a report).
cudaError_t copy_on(Stream& s, void* dst, const void* src, size_t bytes, const char* call);

}  // namespace cutrain_sim
