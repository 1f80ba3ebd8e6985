// defines: GpuTimeline, spans of the work queued on a CUDA stream, timed with CUDA events and
// put into a Tracer (data/trace.h) as a row of their own, e.g. "compute stream (cuda:0)", so a
// trace shows what the GPU did beside what the host threads did when they queued it.
//
// Why events: a host span around a kernel launch measures the launch (microseconds), not the
// kernel, which runs later. An event recorded on the stream before and after the work is
// stamped by the GPU when the stream reaches it; cudaEventElapsedTime gives the time between
// two of them. One event recorded and waited for at the start, paired with the host clock at
// that moment, puts the GPU's times on the trace's clock (see Precision below).
//
//   GpuTimeline gpu(tracer, "compute stream (cuda:0)", stream);
//   gpu.begin("forward");  ...queue kernels...  gpu.begin("backward"); ...  gpu.end();
//   gpu.collect();   // now and then: moves finished spans into the tracer, never waits
//   gpu.flush();     // at the end: waits for the stream to reach the last event
//
// begin() ends the open span, if any, where the next begins (one event serves both), so the
// spans of one timeline follow each other on its row and never overlap. Cost: one cudaEventRecord per
// mark; events are reused from a pool. With a null tracer, or in a CPU-only build, or without
// a usable GPU, every call does nothing (and no CUDA call is made).
//
// Precision: cudaEventElapsedTime returns float milliseconds, whose resolution after an hour
// is 0.25 ms. So each mark is timed from the previous collected mark (microseconds to
// seconds away), and those differences are summed in double from the calibration event.
// The calibration is the midpoint of a record + wait on the idle stream; its error is half
// that wait (tens of microseconds). The GPU's clock and the host's drift apart slowly (parts
// per million), which is not corrected.
//
// Memory is bounded: marks wait in a queue until collected; past max_pending of them (default
// kMaxPending) a mark first collects what is done, and if the stream is so far behind that the
// queue is still full, the new mark is dropped: not recorded, its spans (the one it ends and
// the one it begins) counted in dropped(), never stored. Dropping the newest rather than the
// oldest makes no CUDA call while the stream is behind: on an H200 with driver 580 (under the
// device tool's sandbox), the host blocked in the marks' CUDA calls on a stalled stream until
// the stream moved, both when the dropped events were recorded again and when they were
// destroyed and new ones created, which turned "drop and go on" into a wait.
//
// Not thread-safe: one thread at a time (or a mutex around every call). The stream's device
// is looked up once; the events are created on it whatever the calling thread's device.
#pragma once
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "data/trace.h"
#include "kernels/gpu.h"

namespace cutrain {

class GpuTimeline {
 public:
  GpuTimeline(Tracer* tracer, const std::string& row, cudaStream_t stream,
              size_t max_pending = kMaxPending);
  ~GpuTimeline();  // flushes
  GpuTimeline(const GpuTimeline&) = delete;
  GpuTimeline& operator=(const GpuTimeline&) = delete;

  bool active() const { return active_; }
  // Starts a span named `name` (a string literal, or a string that lives until the span is
  // collected) at the point the stream has reached in its queue; ends the open span there.
  void begin(const char* name, TraceArg a0 = {});
  void end();      // ends the open span where the stream is now
  void collect();  // moves the finished spans into the tracer; never blocks
  void flush();    // end(), then waits for every span and collects them

  // Spans lost because more than kMaxPending marks were waiting on a stream that had not
  // reached them (each span counted once, whether its begin or its end was dropped).
  int64_t dropped() const { return dropped_; }

  static constexpr size_t kMaxPending = 4096;

 private:
  struct Mark {
    const char* name = nullptr;  // null: the end of the previous span only
    TraceArg arg;
    std::unique_ptr<Event> event;
    bool after_gap = false;  // marks before it were dropped: it ends no span
  };
  void mark(const char* name, TraceArg a0);
  std::unique_ptr<Event> take_event();  // from the pool, else a new one on device_
  Tracer::Clock::time_point host_time(double ms) const;  // ms after the calibration

  Tracer* tracer_ = nullptr;
  cudaStream_t stream_ = nullptr;
  int device_ = 0;
  bool active_ = false;
  int track_ = 0;
  Tracer::Clock::time_point origin_host_;    // the host clock when the stream reached origin
  std::unique_ptr<Event> anchor_;            // the calibration event, then the last collected
  double anchor_ms_ = 0;                     //   mark, and its time in ms after the origin
  std::deque<Mark> pending_;                 // marks not yet collected, in stream order
  std::vector<std::unique_ptr<Event>> pool_; // events to reuse
  bool open_ = false;                        // the last mark started a span
  bool gap_ = false;                         // the last mark was dropped
  // The collected side: the span begun by the last collected mark, if any.
  const char* span_name_ = nullptr;
  TraceArg span_arg_;
  double span_begin_ms_ = 0;
  int64_t dropped_ = 0;
  size_t max_pending_ = kMaxPending;
};

}  // namespace cutrain
