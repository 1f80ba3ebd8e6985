// Simulated events: a record is a task on its stream that marks the event complete (with the
// host's clock: event times here are not a GPU's); a wait is a task on the waiting stream that
// blocks until the record it names has run. An event lives while its handle does or work
// queued on a stream names it: a wait queued on a stream may run after the host destroyed the
// event, which CUDA allows (cudaEventDestroy: its resources are released once the device is
// done with it). The tasks hold a shared_ptr; the handle's own is in the registry until
// cudaEventDestroy.
#include <algorithm>

#include "sim/runtime.h"

namespace cutrain_sim {
namespace {

Registry<Event>& events() {
  static auto* r = new Registry<Event>;  // never destroyed (streams.cpp says why)
  return *r;
}

// Waiting for (or asking about) an event recorded in a capture that is still going on: refused,
// and the capture broken (CUDA's rule: nothing of a capture runs before it is launched). (The
// stream of a capture that ended may be gone since: only a stream still there is asked.)
bool refuse_captured(Event& ev) {
  std::shared_ptr<Stream> st;
  {
    std::lock_guard<std::mutex> lock(ev.mu);
    if (!ev.in_capture) return false;
    st = ev.captured_on.lock();
  }
  return st && st->refuse_if_capturing();
}

// The stream of the event's last record, told that someone waits for it (hold_stream).
void demand_recorder(Event& ev) {
  if (const std::shared_ptr<Stream> s = ev.recorded_on.lock()) s->demand();
}

}  // namespace
}  // namespace cutrain_sim

using namespace cutrain_sim;

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags) {
  auto ev = std::make_shared<Event>();
  ev->device = current_device();
  ev->timing = !(flags & cudaEventDisableTiming);
  *e = reinterpret_cast<cudaEvent_t>(ev.get());
  events().add(std::move(ev));
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e) {
  const std::shared_ptr<Event> ev = events().remove(e);
  if (!ev) return set_error(cudaErrorInvalidResourceHandle);
  // A record still queued completes into it: wait for those first.
  std::unique_lock<std::mutex> lock(ev->mu);
  if (!ev->in_capture) ev->cv.wait(lock, [&] { return ev->completed >= ev->recorded; });
  return cudaSuccess;  // freed now, or by the last queued task that names it
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  const std::shared_ptr<Event> ev = events().find(e);
  const std::shared_ptr<Stream> st = find_stream(s);
  if (!ev || !st) return set_error(cudaErrorInvalidResourceHandle);
  if (ev->device != st->device) {  // CUDA's rule: the event and the stream of one device
    report("cutrain-sim: cudaEventRecord: the event is device " + std::to_string(ev->device) +
           "'s, the stream device " + std::to_string(st->device) +
           "'s (cudaErrorInvalidResourceHandle)\n");
    return set_error(cudaErrorInvalidResourceHandle);
  }
  if (sticky(st->device) != cudaSuccess) return set_error(sticky(st->device));
  if (st->is_capturing()) {
    // Inside a capture the record is a node of the graph: it marks the event at each replay,
    // and a stream that waits for the event depends on it (and joins the capture).
    st->submit(Task{[ev] {
                      std::lock_guard<std::mutex> l(ev->mu);
                      ev->when = Clock::now();
                    },
                    false});
    std::vector<size_t> after;
    const std::shared_ptr<Capture> c = st->capture_state(&after);
    std::lock_guard<std::mutex> lock(ev->mu);
    ev->in_capture = true;
    ev->captured_on = st;
    ev->capture = c;
    ev->capture_nodes = after;
    return cudaSuccess;
  }
  uint64_t id;
  {
    std::lock_guard<std::mutex> lock(ev->mu);
    id = ++ev->recorded;
    ev->in_capture = false;
    ev->captured_on.reset();
    ev->capture.reset();
    ev->capture_nodes.clear();
    ev->recorded_on = st;
  }
  st->submit(Task{[ev, id] {
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

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags) {
  const std::shared_ptr<Event> ev = events().find(e);
  const std::shared_ptr<Stream> st = find_stream(s);
  if (!ev || !st) return set_error(cudaErrorInvalidResourceHandle);
  if (sticky(st->device) != cudaSuccess) return set_error(sticky(st->device));
  std::shared_ptr<Capture> recorded_in;
  std::vector<size_t> nodes;
  uint64_t target;
  {
    std::lock_guard<std::mutex> lock(ev->mu);
    if (ev->in_capture) recorded_in = ev->capture.lock(), nodes = ev->capture_nodes;
    target = ev->recorded;
    if (ev->in_capture && !recorded_in) return cudaSuccess;  // its capture ended: no record
  }
  if (recorded_in) {
    // A wait for a capture's record: the stream depends on it, joining the capture if it is
    // in none (a fork); one in another capture would merge two captures.
    if (st->join(recorded_in, nodes)) return cudaSuccess;
    st->refuse_if_capturing();
    return set_error(cudaErrorStreamCaptureIsolation);
  }
  if (st->is_capturing()) {
    // Work recorded outside the capture: a graph cannot depend on it (CUDA's isolation rule),
    // unless the wait says it is external: then each replay waits for the event's last record
    // as of that moment.
    if (!(flags & cudaEventWaitExternal)) {
      st->refuse_if_capturing();
      report("cutrain-sim: cudaStreamWaitEvent: a capturing stream waits for an event recorded "
             "outside the capture (cudaErrorStreamCaptureIsolation; cudaEventWaitExternal "
             "makes it a wait at each replay)\n");
      return set_error(cudaErrorStreamCaptureIsolation);
    }
    st->submit(Task{[ev] {
                      std::unique_lock<std::mutex> l(ev->mu);
                      const uint64_t now = ev->recorded;
                      if (ev->completed < now) demand_recorder(*ev);
                      ev->cv.wait(l, [&] { return ev->completed >= now; });
                    },
                    false});
    return cudaSuccess;
  }
  if (target == 0) return cudaSuccess;  // never recorded: nothing to wait for
  st->submit(Task{[ev, target] {
                    std::unique_lock<std::mutex> l(ev->mu);
                    if (ev->completed < target) demand_recorder(*ev);
                    ev->cv.wait(l, [&] { return ev->completed >= target; });
                  },
                  false});
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t e) {
  const std::shared_ptr<Event> ev = events().find(e);
  if (!ev) return set_error(cudaErrorInvalidResourceHandle);
  if (refuse_captured(*ev)) return set_error(cudaErrorStreamCaptureUnsupported);
  std::lock_guard<std::mutex> lock(ev->mu);
  if (ev->completed < ev->recorded) demand_recorder(*ev);
  return ev->completed >= ev->recorded ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  const std::shared_ptr<Event> ev = events().find(e);
  if (!ev) return set_error(cudaErrorInvalidResourceHandle);
  if (refuse_captured(*ev)) return set_error(cudaErrorStreamCaptureUnsupported);
  std::unique_lock<std::mutex> lock(ev->mu);
  const uint64_t target = ev->recorded;
  if (ev->completed < target) demand_recorder(*ev);
  ev->cv.wait(lock, [&] { return ev->completed >= target; });
  return sticky(current_device());
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  const std::shared_ptr<Event> a = events().find(start), b = events().find(end);
  if (!a || !b) return set_error(cudaErrorInvalidResourceHandle);
  if (!a->timing || !b->timing || a->device != b->device)
    return set_error(cudaErrorInvalidResourceHandle);
  std::unique_lock<std::mutex> la(a->mu, std::defer_lock), lb(b->mu, std::defer_lock);
  if (a == b)
    la.lock();
  else
    std::lock(la, lb);
  if (a->completed < a->recorded || b->completed < b->recorded) return cudaErrorNotReady;
  if (a->recorded == 0 || b->recorded == 0) return set_error(cudaErrorInvalidResourceHandle);
  *ms = std::chrono::duration<float, std::milli>(b->when - a->when).count();
  return cudaSuccess;
}
