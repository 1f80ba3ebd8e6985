// defines: Tracer, a recorder of timed spans for Chrome's trace viewer and Perfetto
// (ui.perfetto.dev, chrome://tracing), and TraceSpan, the RAII span that records into it.
//
// What a trace is for: seeing the overlap. One row per thread ("main", "loader worker 0..",
// "checkpoint writer") and per extra track (e.g. a CUDA stream timed with events), one bar
// per span; a reader can see at a glance whether the workers decode while the main thread
// computes, and where the main thread waits for data.
//
// The file is the "Trace Event Format" (JSON object form):
//   {"traceEvents": [
//     {"name":"decode","cat":"loader","ph":"X","ts":1234.5,"dur":80.25,"pid":1,"tid":3,
//      "args":{"batch":12}},                                      <- a complete span, in us
//     {"name":"thread_name","ph":"M","pid":1,"tid":3,"args":{"name":"loader worker 1"}}, ...],
//    "displayTimeUnit":"ms", "otherData":{"dropped_events":0}}
// ts is microseconds since the Tracer was made (steady clock), with nanosecond digits.
//
// Cost: with a null Tracer* a TraceSpan reads one pointer and does nothing else; with a
// disabled Tracer it reads one atomic flag (both a few ns). An enabled span costs two clock
// reads and one short mutex section at its end: about 200 ns measured on a 2-core VM. Spans
// are for things that take microseconds or more (a decode task, a step), not inner loops.
// Memory is bounded: after `max_events` spans (default 1,000,000, about 100 MB) further spans
// are counted as dropped, not stored; the count is written into the file.
//
// NVTX: in a CUDA build each TraceSpan also pushes an NVTX range of the same name (and
// name_thread() names the OS thread for NVTX), whatever the Tracer, so Nsight Systems shows
// the same spans without --trace. With no profiler attached an NVTX call is a few ns.
//
// Thread-safe: any thread may record, name itself, or call write() at any time.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace cutrain {

// A span's integer argument, shown in the viewer's details pane. `key` is a string literal.
struct TraceArg {
  const char* key = nullptr;
  int64_t value = 0;
};

class Tracer {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Tracer(size_t max_events = 1000000);  // enabled; time 0 is now
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  void set_enabled(bool on) { enabled_.store(on, std::memory_order_relaxed); }

  // Names the calling thread's row ("main", "loader worker 3"). Unnamed threads that record
  // show as "thread <tid>". A thread that takes another name starts a new row, its earlier
  // spans keep the old one: the OS reuses the ids of finished threads, so a new thread may
  // look like an old one (an evaluation loader's worker like a training loader's).
  void name_thread(const std::string& name);

  // A row that is not an OS thread, e.g. "compute stream (GPU, from events)". Returns its id
  // for complete(); asking twice for the same name gives the same id.
  int track(const std::string& name);
  // The calling thread's row id (assigned on first use).
  int this_thread_track();

  // Records a span [begin, end) on row `track`. Spans on one row must nest or not overlap
  // (that is what the viewers draw); RAII spans on one thread always do.
  // `cat` must outlive the Tracer (a string literal). Up to two integer args, keys literals.
  using Arg = TraceArg;
  void complete(int track, std::string name, const char* cat, Clock::time_point begin,
                Clock::time_point end, Arg a0 = {}, Arg a1 = {});
  // The same on the calling thread's row (what TraceSpan uses: one lock, not two).
  void complete(std::string name, const char* cat, Clock::time_point begin,
                Clock::time_point end, Arg a0 = {}, Arg a1 = {});

  size_t events() const;   // spans stored so far
  size_t dropped() const;  // spans not stored because max_events was reached

  // Writes the trace to `path` (temp file + rename, so a reader never sees half a file).
  // Never throws: safe from a destructor, an exit path or a catch block; returns false and
  // says why in *why. Recording may go on during and after a write; later writes include it.
  // Not from a signal handler (it allocates): let the handler set a flag, write after it.
  bool write(const std::string& path, std::string* why = nullptr) const noexcept;

  Clock::time_point origin() const { return origin_; }

 private:
  struct Event {
    std::string name;
    const char* cat = "";
    int64_t ts_ns = 0, dur_ns = 0;
    int tid = 0;
    Arg a0, a1;
  };
  // Events live in fixed chunks that never move, so write() can copy the list of chunks
  // under the lock and format them without it: recording threads are not held up.
  static constexpr size_t kChunk = 8192;

  int thread_track_locked();
  void add_locked(int tid, std::string&& name, const char* cat, Clock::time_point begin,
                  Clock::time_point end, Arg a0, Arg a1);

  const Clock::time_point origin_;
  const size_t max_events_;
  std::atomic<bool> enabled_{true};
  mutable std::mutex mu_;  // guards everything below (not the contents of full chunks)
  std::vector<std::unique_ptr<Event[]>> chunks_;  // kChunk events each
  size_t count_ = 0, dropped_ = 0;
  std::unordered_map<std::thread::id, int> thread_tid_;
  std::vector<std::string> row_names_;  // by tid - 1 ("" until named)
  std::unordered_map<std::string, int> named_track_;
};

namespace detail {
void nvtx_push(const char* name);  // no-ops in a CPU-only build
void nvtx_pop();
}  // namespace detail

// Records [construction, destruction) on the calling thread's row. `name` and `cat` must
// outlive the span (string literals). Usage:  TraceSpan s(tracer, "decode", "loader");
class TraceSpan {
 public:
  TraceSpan(Tracer* t, const char* name, const char* cat) : name_(name), cat_(cat) {
    detail::nvtx_push(name);
    if (t && t->enabled()) {
      t_ = t;
      begin_ = Tracer::Clock::now();
    }
  }
  ~TraceSpan() {
    detail::nvtx_pop();
    if (t_) t_->complete(name_, cat_, begin_, Tracer::Clock::now(), a0_, a1_);
  }
  // Shown in the viewer's details pane, e.g. s.arg("batch", seq). At most two; more are ignored.
  void arg(const char* key, int64_t value) {
    if (!a0_.key) a0_ = {key, value};
    else if (!a1_.key) a1_ = {key, value};
  }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  Tracer* t_ = nullptr;
  const char* name_;
  const char* cat_;
  Tracer::Clock::time_point begin_;
  Tracer::Arg a0_, a1_;
};

}  // namespace cutrain
