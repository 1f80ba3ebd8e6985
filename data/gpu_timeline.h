// defines: GpuTimeline, spans of the work queued on a CUDA stream, timed with CUDA events and
// put into a Tracer (data/trace.h) as a row of their own, e.g. "compute stream (cuda:0)", so a
// trace shows what the GPU did beside what the host threads did when they queued it.
//
// Why events: a host span around a kernel launch measures the launch (microseconds), not the
// kernel, which runs later. An event recorded on the stream before and after the work is
// stamped by the GPU when the stream reaches it; cudaEventElapsedTime gives the time between
// two of them. One event recorded and waited for at the start, paired with the host clock at
// that moment, puts the GPU's times on the trace's clock (error: the wait's wake-up latency,
// tens of microseconds).
//
//   GpuTimeline gpu(tracer, "compute stream (cuda:0)", stream);
//   gpu.begin("forward");  ...queue kernels...  gpu.begin("backward"); ...  gpu.end();
//   gpu.collect();   // now and then: moves finished spans into the tracer, never waits
//   gpu.flush();     // at the end: waits for the stream to reach the last event
//
// begin() ends the open span, if any, where the next begins (one event serves both). Spans
// nest or follow each other like RAII spans on one thread. Cost: one cudaEventRecord per
// mark; events are reused from a pool. With a null tracer, or in a CPU-only build, or without
// a usable GPU, every call does nothing.
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
  GpuTimeline(Tracer* tracer, const std::string& row, cudaStream_t stream);
  ~GpuTimeline();  // flushes
  GpuTimeline(const GpuTimeline&) = delete;
  GpuTimeline& operator=(const GpuTimeline&) = delete;

  bool active() const { return active_; }
  // Starts a span named `name` (a string literal or a string that outlives collect()) at the
  // point the stream has reached in its queue; ends the open span there.
  void begin(const char* name, TraceArg a0 = {});
  void end();      // ends the open span where the stream is now
  void collect();  // moves the finished spans into the tracer; never blocks
  void flush();    // end(), then waits for every span and collects them

 private:
  struct Mark {
    const char* name = nullptr;  // null: the end of the previous span only
    TraceArg arg;
    std::unique_ptr<Event> event;
  };
  void mark(const char* name, TraceArg a0);

  Tracer* tracer_ = nullptr;
  cudaStream_t stream_ = nullptr;
  bool active_ = false;
  int track_ = 0;
  std::unique_ptr<Event> origin_;            // recorded and waited for at construction
  Tracer::Clock::time_point origin_host_;    // the host clock at that moment
  std::deque<Mark> pending_;                 // marks not yet collected, in stream order
  std::vector<std::unique_ptr<Event>> pool_; // events to reuse
  bool open_ = false;                        // the last mark started a span
};

}  // namespace cutrain
