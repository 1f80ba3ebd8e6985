// Simulated streams: each an in-order queue of tasks run by a host thread of its own (so two
// streams really run at once), the legacy default stream one more per device; kernel launches
// (the launch's limits checked here, its grid run by sim/scheduler.cpp), host functions, and
// a held stream for the simulator's tests (hold_stream).
#include <algorithm>
#include <mutex>

#include <cutrain_sim.h>

#include "sim/runtime.h"

namespace cutrain_sim {
namespace {
std::atomic<Stream*> g_held{nullptr};
thread_local int t_stream_device = -1;  // on a stream's worker thread: the stream's device
std::atomic<uint64_t> g_stream_ids{1};
}  // namespace

// (The registries and the devices are never destroyed: static objects of the program may
// still call the runtime while the statics are destroyed, as they may CUDA's.)
Registry<Stream>& streams() {
  static auto* r = new Registry<Stream>;
  return *r;
}

Stream::Stream(int dev) : device(dev), id(g_stream_ids++) {
  worker = std::thread([this] { work(); });
}

Stream::~Stream() {
  {
    std::lock_guard<std::mutex> lock(mu);
    stop = true;
  }
  cv.notify_all();
  worker.join();
  Stream* self = this;
  g_held.compare_exchange_strong(self, nullptr);
}

void Stream::submit(Task t) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (capture) {
      std::lock_guard<std::mutex> c(capture->mu);
      capture->nodes.push_back(std::move(t));
      capture->deps.push_back(frontier);
      frontier = {capture->nodes.size() - 1};
      return;
    }
    queue.push_back(std::move(t));
    queued++;
  }
  cv.notify_all();
}

void Stream::synchronize() {
  demand();
  std::unique_lock<std::mutex> lock(mu);
  const uint64_t target = queued;
  cv.wait(lock, [&] { return done >= target; });
}

bool Stream::finished() {
  demand();
  std::lock_guard<std::mutex> lock(mu);
  return done >= queued;
}

bool Stream::is_capturing() {
  std::lock_guard<std::mutex> lock(mu);
  return capture != nullptr;
}

bool Stream::refuse_if_capturing() {
  std::lock_guard<std::mutex> lock(mu);
  if (!capture) return false;
  std::lock_guard<std::mutex> c(capture->mu);
  capture->broken = true;
  return true;
}

std::shared_ptr<Capture> Stream::capture_state(std::vector<size_t>* f) {
  std::lock_guard<std::mutex> lock(mu);
  if (f) *f = frontier;
  return capture;
}

bool Stream::join(const std::shared_ptr<Capture>& c, const std::vector<size_t>& nodes) {
  std::lock_guard<std::mutex> lock(mu);
  if (capture && capture != c) return false;
  if (!capture) {  // a fork: it leaves the capture when the capture ends
    capture = c;
    frontier.clear();
    std::lock_guard<std::mutex> l(c->mu);
    c->members.push_back(streams().find(this));
  }
  for (size_t n : nodes)
    if (std::find(frontier.begin(), frontier.end(), n) == frontier.end()) frontier.push_back(n);
  return true;
}

// A held stream runs nothing until someone waits for it: the host (a synchronize or query of
// the stream, the device or an event recorded on it) or another stream (an event wait). Then
// it runs until its queue is empty. Work of other streams that forgot to wait for it runs
// first, every time. (After 10 s it runs anyway, so that a host polling a flag that only this
// stream sets cannot hang.)
void Stream::wait_while_held() {
  if (g_held.load() != this) return;
  std::unique_lock<std::mutex> lock(mu);
  cv.wait_for(lock, std::chrono::seconds(10), [&] { return demanded || g_held.load() != this; });
}

void Stream::demand() {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (queue.empty() && !busy) return;  // nothing to run: no demand left behind
    demanded = true;
  }
  cv.notify_all();
}

void Stream::work() {
  t_stream_device = device;
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

namespace {
// The device's legacy stream, made on first use; it lives as long as the process.
std::mutex g_legacy_mu;
std::shared_ptr<Stream> legacy_stream(int device) {
  std::lock_guard<std::mutex> lock(g_legacy_mu);
  Device& d = devices()[size_t(device)];
  if (!d.legacy) {
    d.legacy = std::make_shared<Stream>(device);
    streams().add(d.legacy);
  }
  return d.legacy;
}
}  // namespace

std::shared_ptr<Stream> find_stream(cudaStream_t handle) {
  return handle ? streams().find(handle) : legacy_stream(current_device());
}

std::vector<std::shared_ptr<Stream>> streams_of(int device) {
  std::vector<std::shared_ptr<Stream>> out;
  for (auto& s : streams().all())
    if (device < 0 || s->device == device) out.push_back(std::move(s));
  return out;
}

void launch_grid(const char* name, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                 RunThread run, std::shared_ptr<const void> record, size_t record_bytes) {
  const std::shared_ptr<Stream> s = find_stream(stream);
  if (!s) {
    set_error(cudaErrorInvalidResourceHandle);
    return;
  }
  if (s->device != current_device()) {  // CUDA's rule: a launch goes to the current device
    report("cutrain-sim: launch into a stream of another device\n    kernel " +
           std::string(name) + ": the stream is device " + std::to_string(s->device) +
           "'s, the current device is " + std::to_string(current_device()) +
           " (cudaErrorInvalidResourceHandle)\n");
    set_error(cudaErrorInvalidResourceHandle);
    return;
  }
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
  const int device = s->device;
  if (sticky(device) != cudaSuccess) {
    set_error(sticky(device));
    return;
  }
  Grid g;
  g.device = device;
  g.kernel = name;
  g.grid = grid;
  g.block = block;
  g.dynamic_smem = smem;
  g.run = run;
  g.record = std::move(record);
  g.record_bytes = record_bytes;
  const uint64_t grid_seed = seed() * 0x9e3779b97f4a7c15ull + s->launches++;
  s->submit(Task{[g = std::move(g), grid_seed, device] {
                   if (sticky(device) != cudaSuccess) return;
                   std::string why;
                   const cudaError_t err = run_grid(g, grid_seed, &why);
                   if (err != cudaSuccess) {
                     report(why);
                     devices()[size_t(device)].sticky = err;
                   }
                 },
                 true});
}

cudaError_t submit(cudaStream_t stream, std::function<void()> work) {
  const std::shared_ptr<Stream> s = find_stream(stream);
  if (!s) return set_error(cudaErrorInvalidResourceHandle);
  const int device = s->device;
  if (sticky(device) != cudaSuccess) return set_error(sticky(device));
  s->submit(Task{[work = std::move(work), device] {
                   if (sticky(device) == cudaSuccess) work();
                 },
                 true});
  return cudaSuccess;
}

void fault(cudaError_t e, const std::string& text) {
  report(text);
  if (t_stream_device >= 0) devices()[size_t(t_stream_device)].sticky = e;
}

void hold_stream(cudaStream_t s) {
  Stream* was = g_held.exchange(s ? reinterpret_cast<Stream*>(s) : nullptr);
  if (was) was->demand();
}

}  // namespace cutrain_sim

using namespace cutrain_sim;

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  auto st = std::make_shared<Stream>(current_device());
  *s = reinterpret_cast<cudaStream_t>(st.get());
  static std::atomic<uint64_t> created{0};
  static const uint64_t hold = env_u64("CUTRAIN_SIM_HOLD_STREAM", 0);
  if (++created == hold) hold_stream(*s);
  streams().add(std::move(st));
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (!s) return set_error(cudaErrorInvalidResourceHandle);
  const std::shared_ptr<Stream> st = streams().remove(s);
  if (!st) return set_error(cudaErrorInvalidResourceHandle);
  st->synchronize();  // CUDA lets queued work finish
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  const std::shared_ptr<Stream> st = find_stream(s);
  if (!st) return set_error(cudaErrorInvalidResourceHandle);
  if (st->refuse_if_capturing()) return set_error(cudaErrorStreamCaptureUnsupported);
  st->synchronize();
  return set_error(sticky(st->device));
}
cudaError_t cudaStreamQuery(cudaStream_t s) {
  const std::shared_ptr<Stream> st = find_stream(s);
  if (!st) return set_error(cudaErrorInvalidResourceHandle);
  if (st->refuse_if_capturing()) return set_error(cudaErrorStreamCaptureUnsupported);
  if (sticky(st->device) != cudaSuccess) return sticky(st->device);
  return st->finished() ? cudaSuccess : cudaErrorNotReady;
}
cudaError_t cudaStreamGetId(cudaStream_t s, unsigned long long* id) {
  const std::shared_ptr<Stream> st = find_stream(s);
  if (!st) return set_error(cudaErrorInvalidResourceHandle);
  *id = st->id;
  return cudaSuccess;
}
cudaError_t cudaStreamGetDevice(cudaStream_t s, int* device) {
  const std::shared_ptr<Stream> st = find_stream(s);
  if (!st) return set_error(cudaErrorInvalidResourceHandle);
  *device = st->device;
  return cudaSuccess;
}
cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void* data) {
  const std::shared_ptr<Stream> st = find_stream(s);
  if (!st) return set_error(cudaErrorInvalidResourceHandle);
  const int device = st->device;
  if (sticky(device) != cudaSuccess) return set_error(sticky(device));
  st->submit(Task{[=] {
                    if (sticky(device) == cudaSuccess) fn(data);
                  },
                  false});
  return cudaSuccess;
}
