// GpuTimeline: marks (events) recorded on a stream, collected in stream order into spans.
//
// A mark with a name starts a span and ends the one before it; a mark without one only ends.
// On the collected side, span_name_ is the span begun by the last collected mark: the next
// collected mark closes it. Every mark's time is the anchor's plus the elapsed time between
// the two events, the anchor being the last collected mark (see the header: float ms).
#include "data/gpu_timeline.h"

#include <chrono>
#include <utility>

#include "kernels/check.h"

namespace cutrain {

namespace {

// The device a stream belongs to. Only called with a usable GPU.
int stream_device(cudaStream_t stream) {
#if defined(CUTRAIN_CUDA)
  int device = 0;
  CUDA_CHECK(cudaStreamGetDevice(stream, &device));
  return device;
#else
  (void)stream;
  return 0;
#endif
}

}  // namespace

GpuTimeline::GpuTimeline(Tracer* tracer, const std::string& row, cudaStream_t stream,
                         size_t max_pending)
    : tracer_(tracer), stream_(stream), max_pending_(max_pending < 1 ? 1 : max_pending) {
  // Checked in this order so that a null tracer never touches CUDA, and a CPU-only build or a
  // machine without a GPU makes no call beyond the probe gpu_usable() has made once anyway.
  active_ = tracer_ && cuda_compiled() && gpu_usable();
  if (!active_) return;
  device_ = stream_device(stream_);
  track_ = tracer_->track(row);
  // Calibration. The first record + wait drains the stream: whatever was queued before us
  // finishes, so the second event is stamped as soon as its record reaches the GPU, between
  // the two host clock reads around it. Their midpoint is the host time of the GPU's stamp.
  anchor_ = take_event();
  anchor_->record(stream_);
  anchor_->synchronize();
  const Tracer::Clock::time_point before = Tracer::Clock::now();
  anchor_->record(stream_);
  anchor_->synchronize();
  const Tracer::Clock::time_point after = Tracer::Clock::now();
  origin_host_ = before + (after - before) / 2;
  anchor_ms_ = 0;
}

GpuTimeline::~GpuTimeline() { flush(); }

std::unique_ptr<Event> GpuTimeline::take_event() {
  if (!pool_.empty()) {
    std::unique_ptr<Event> e = std::move(pool_.back());
    pool_.pop_back();
    return e;
  }
  // An event belongs to the device current when it is made; it must be the stream's.
  const DeviceGuard on(device_);
  return std::make_unique<Event>(true);
}

void GpuTimeline::begin(const char* name, TraceArg a0) {
  if (!active_) return;
  mark(name, a0);
  open_ = true;  // after mark(): it asks whether the mark ends a span
}

void GpuTimeline::end() {
  if (!active_ || !open_) return;
  mark(nullptr, {});
  open_ = false;
}

void GpuTimeline::mark(const char* name, TraceArg a0) {
  if (pending_.size() >= max_pending_) collect();
  if (pending_.size() >= max_pending_) {
    // The stream is far behind: this mark is not recorded (no CUDA call at all). The span it
    // would end is lost, and so is the one it begins (counted when the next mark ends it).
    if (open_) dropped_++;
    gap_ = true;
    return;
  }
  Mark m;
  m.name = name;
  m.arg = a0;
  m.after_gap = gap_;
  if (gap_ && open_) dropped_++;  // the span the last unrecorded mark began
  gap_ = false;
  m.event = take_event();
  m.event->record(stream_);
  pending_.push_back(std::move(m));
}

Tracer::Clock::time_point GpuTimeline::host_time(double ms) const {
  return origin_host_ + std::chrono::duration_cast<Tracer::Clock::duration>(
                            std::chrono::duration<double, std::milli>(ms));
}

void GpuTimeline::collect() {
  if (!active_) return;
  // Events on one stream complete in order: stop at the first the stream has not reached.
  while (!pending_.empty() && pending_.front().event->done()) {
    Mark& m = pending_.front();
    const double ms = anchor_ms_ + double(m.event->ms_since(*anchor_));
    if (span_name_ && !m.after_gap)  // after a gap the span's end was never recorded
      tracer_->complete(track_, span_name_, "gpu", host_time(span_begin_ms_), host_time(ms),
                        span_arg_);
    span_name_ = m.name;
    span_arg_ = m.arg;
    span_begin_ms_ = ms;
    pool_.push_back(std::move(anchor_));
    anchor_ = std::move(m.event);
    anchor_ms_ = ms;
    pending_.pop_front();
  }
}

void GpuTimeline::flush() {
  if (!active_) return;
  end();
  if (!pending_.empty()) pending_.back().event->synchronize();  // and so every earlier one
  collect();
}

}  // namespace cutrain
