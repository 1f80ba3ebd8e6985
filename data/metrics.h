// defines: StepMetrics (what a training run reports every few steps), RateMeter (turns running
// totals into images/s, % of time waiting for data and the ETA), and MetricsWriter (metrics as
// JSON lines, one object a line, each line on disk as soon as it is written).
//
// Why in data/ and not train/: the tests link the library folders (kernels, nn, data) and not
// train/, and these are library pieces with tests of their own. They sit beside the trace
// recorder (data/trace.h), which must be in data/ because the loader records into it: the
// three observability pieces stay together. Like everything in data/, they know nothing of
// tensors or models; nn/ is the model's math, which they have no use for.
//
// A metrics file reads like this (one object a line; "kind" says which record it is):
//   {"kind":"step","step":100,"epoch":1,"loss":0.6128,"accuracy":0.7832,"lr":0.05,
//    "loss_scale":65536,"images_per_s":11520.4,"data_wait_pct":1.3,"data_wait_held_pct":1.2,
//    "busy_pct":96.1,"device_wait_pct":0.4,"idle_pct":3.5,"bound":"compute",
//    "pipeline_ratio":1.04,"loader_pct":12.5,"time":2.61}
//   {"kind":"eval","epoch":1,"loss":0.41,"top1":0.851}      <- any other record: write(kind, json)
// Non-finite numbers (an overflowed loss) are written as null: JSON has no NaN or Infinity.
#pragma once
#include <nlohmann/json_fwd.hpp>  // the full header is needed only to build a json to write

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace cutrain {

// The bound of a run over some steps, read off the device's own clock (GPU: events on the
// compute stream; the CPU: the host's clock around the same points of each step):
//   wait    the device waited for a batch (its decode and its copy): the loader is late;
//   idle    the device had nothing queued (the host had not launched the step yet);
//   compute the step's kernels, from its batch ready to its last kernel.
// On a GPU the host's own clock adds one more: launch, the host's time queuing the steps. A
// device whose compute takes hardly longer than its launches kept pace with the host: it waited
// for each launch inside the step, gaps its clock counts as compute (only per-kernel times
// would show them).
// One rule names the bound: loader-bound when the device waited for batches more than
// kBoundPct of the wall time (wait + idle + compute); else host-bound when it idled more than
// kBoundPct, or when the launches took kLaunchBoundPct of the compute time or more (a GPU that
// waited on the host inside its steps); else compute-bound (the GPU's kernels, or on the CPU
// the CPU's). Busy = compute / wall (on a launch-bound GPU, an upper bound).
constexpr double kBoundPct = 5;
constexpr double kLaunchBoundPct = 95;
struct DeviceTime {
  double idle_s = 0, wait_s = 0, compute_s = 0;
  double launch_s = 0;  // the host queuing the work (GPU); 0 on the CPU, whose work is done as
                        //   it is queued
  double wall_s() const { return idle_s + wait_s + compute_s; }
  DeviceTime& operator+=(const DeviceTime& o) {
    idle_s += o.idle_s, wait_s += o.wait_s, compute_s += o.compute_s, launch_s += o.launch_s;
    return *this;
  }
};
enum class Bound { unknown, loader, host, compute };  // unknown: no device time measured
Bound run_bound(const DeviceTime& t);
const char* bound_name(Bound b);  // "loader", "host", "compute"; "" for unknown

// The pipeline ratio: the wall time over the longer of the two things that had to happen, the
// loader's work alone and the device's compute alone. 1.00: decoding hid entirely behind
// compute (or compute behind decoding); above it, time neither of them explains. NaN when
// neither was measured.
double pipeline_ratio(double wall_s, double loader_alone_s, double compute_s);

struct StepMetrics {
  int64_t step = 0;            // optimizer steps done, counting those before a resume
  int epoch = 1;               // the epoch being trained, counting from 1
  double loss = 0;             // mean training loss over the steps since the last record
  double accuracy = 0;         // top-1 on those training batches, 0..1
  double lr = 0;
  double loss_scale = 0;       // the dynamic loss scale; 0 when there is none (fp32)
  double images_per_s = 0;     // since the last record (RateMeter)
  double data_wait_pct = 0;    // % of that wall time the loop spent waiting for data
  double data_wait_held_pct = 0;  // of it, % while the device still held the batch's slot (the
                                  //   host ahead of the device: back-pressure, not the loader)
  // The device's clock over the same steps (DeviceTime); < 0 (null in the file): not measured.
  double busy_pct = -1;        // compute / wall
  double device_wait_pct = -1; // waiting for a batch
  double idle_pct = -1;        // nothing queued
  double launch_pct = -1;      // the host queuing the steps (GPU only; < 0 on the CPU)
  Bound bound = Bound::unknown;
  double pipeline_ratio = -1;  // wall / max(the loader alone, compute)
  double loader_pct = -1;      // the loader's work alone, % of the wall time (< 100: it keeps
                               //   ahead; images_per_s / loader_pct x 100: its rate alone)
  double sync_bn_pct = -1;     // --sync-bn: % of it the replicas spent in BatchNorm's
                               //   synchronisation, as the host sees it; < 0: no --sync-bn
  double time_s = 0;           // seconds since the run (this process) started -> "time"
};

// From running totals to rates. Give it, every time the loop reports, the step count and two
// totals counted from when the meter started: images trained, and seconds spent waiting in
// Loader::next() (LoaderStats::consumer_wait_s of a loader made when the meter was).
//   images/s and data wait %: over the window since the previous update (recent, not smoothed);
//   ETA: steps left x the mean time per step since the meter started (evaluations included,
//   so it also counts the evaluations still to come).
class RateMeter {
 public:
  using Clock = std::chrono::steady_clock;
  struct Rates {
    double images_per_s = 0;
    double data_wait_pct = 0;
    double sync_pct = 0;   // of the third total, as data_wait_pct of the second
    double elapsed_s = 0;  // since the meter started: StepMetrics::time_s
    double eta_s = 0;      // NaN until a step has been done
  };

  // first_step: steps already done when the meter starts (0, or the resumed step);
  // total_steps: the step the run ends at.
  RateMeter(int64_t first_step, int64_t total_steps, Clock::time_point start = Clock::now());
  // sync_s: a third total of seconds, the replicas' (mean) time in --sync-bn's
  // synchronisation (0 without it).
  Rates update(int64_t step, int64_t images, double data_wait_s, double sync_s,
               Clock::time_point now = Clock::now());

 private:
  int64_t first_step_, total_steps_;
  Clock::time_point start_, last_;
  int64_t last_images_ = 0;
  double last_wait_s_ = 0;
  double last_sync_s_ = 0;
};

// Appends one JSON object a line to `path`. Each line goes to the file in one write() call the
// moment it is written (no buffering in this process), so a crash loses at most the line
// being written, and a reader (tail -f, a plotting script) always sees whole lines. Not
// fsynced: a power cut may lose the last lines the OS had not yet written; for metrics every
// few steps that is the right trade. Thread-safe. Appends, so a resumed run continues its file.
class MetricsWriter {
 public:
  enum class Mode { append, truncate };
  explicit MetricsWriter(const std::string& path, Mode mode = Mode::append);  // throws Error
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  void write(const StepMetrics& m);  // a "step" record
  // Any other record: {"kind": kind, ...fields}. `fields` must be a JSON object, e.g.
  //   writer.write("eval", {{"epoch", 3}, {"top1", 0.912}, {"per_class", per_class}});
  void write(const std::string& kind, const nlohmann::json& fields);
  const std::string& path() const { return path_; }
  int64_t lines() const;  // written by this writer

 private:
  void write_line(const std::string& line);
  std::string path_;
  int fd_ = -1;
  mutable std::mutex mu_;
  int64_t lines_ = 0;
};

}  // namespace cutrain
