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
//    "loss_scale":65536,"images_per_s":11520.4,"data_wait_pct":1.3,"time":2.61}
//   {"kind":"eval","epoch":1,"loss":0.41,"top1":0.851}      <- any other record: write(kind, json)
// Non-finite numbers (an overflowed loss) are written as null: JSON has no NaN or Infinity.
#pragma once
#include <nlohmann/json_fwd.hpp>  // the full header is needed only to build a json to write

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace cutrain {

struct StepMetrics {
  int64_t step = 0;            // optimizer steps done, counting those before a resume
  int epoch = 1;               // the epoch being trained, counting from 1
  double loss = 0;             // mean training loss over the steps since the last record
  double accuracy = 0;         // top-1 on those training batches, 0..1
  double lr = 0;
  double loss_scale = 0;       // the dynamic loss scale; 0 when there is none (fp32)
  double images_per_s = 0;     // since the last record (RateMeter)
  double data_wait_pct = 0;    // % of that wall time the loop spent waiting for data
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
