// defines: RunReporter, what a training run tells while it runs: the progress line
// (data/progress_line.h: redrawn in place on a terminal, a plain line every --log-every steps
// in a log), the metrics file (data/metrics.h: JSON lines), one line per epoch, a line for
// each skipped step naming the parameter whose gradient overflowed, the run's report page
// (train/report/report.h: OUT/report.html, rewritten after each epoch's checkpoint and at the
// end), and TensorBoard's event files (data/tensorboard.h; --no-tensorboard leaves them out).
//
// TensorBoard: OUT/events.out.tfevents.*, a new file each time a process of the run starts,
// written with the metrics records, each record on disk as it is written. Scalars, by step:
// with each "step" record train/loss, train/top1, train/lr, train/loss_scale (fp16),
// train/skipped_steps (since the previous record), speed/images_per_s, and where the time
// went, time/busy_pct, time/device_wait_pct, time/idle_pct (the device's clock, when measured),
// time/launch_pct (GPU) and time/data_wait_pct (the host's wait); with each "eval" record
// val/loss, val/top1, val/top5, val_ema/* (--ema) and val_class_top1/<class>. The resolved
// configuration as text ("config") at the first step. A run resumed from step S first cuts the
// folder's older event files back to steps <= S (trim_event_files), as the report drops the
// metrics records a resume made obsolete: each step shows once.
//
// Metrics records, besides the "step" records of StepMetrics (one every --log-every steps and
// at the last step; loss and accuracy averaged over the steps since the previous record):
//   {"kind":"start","step":S,"total_steps":T,"steps_per_epoch":P,"epochs":E,
//    "device":"cpu fp32"}                              each process of the run, before its steps
//   {"kind":"skip","step":S,"parameter":"conv3.w","loss_scale":32768}    a skipped step
//   {"kind":"eval","epoch":E,"step":S,"loss":..,"top1":..,"top5":..,"images":N,
//    "bad_files":B,"seconds":..,"time":T,"per_class":[{"class":"Shirt","images":..,"top1":..},..],
//    "confusion":[[..],..]}                                               after each epoch
// "time" is seconds since the reporter started, the clock of the step records' "time" (the
// evaluation included): time-to-accuracy reads straight off the eval records. "bad_files":
// the validation data's bad files (skipped; the training data's are listed in OUT/bad_files.txt).
// "confusion": K rows of K counts, row = the true class, column = the top-1 class (so row y
// sums to per_class[y].images); left out above kMaxConfusionClasses classes, where a line of
// K^2 numbers per epoch would outweigh the rest of the file. A "start" record at step S says
// that the records after it continue from step S: a resume from an earlier checkpoint makes
// the records of steps after S before it obsolete (the report drops them).
//   {"kind":"checkpoint","step":S,"path":"..","best":true}               each checkpoint
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "data/metrics.h"
#include "data/progress_line.h"
#include "data/tensorboard.h"
#include "train/engine/evaluate.h"
#include "train/engine/trainer.h"
#include "train/setup/config.h"

namespace cutrain {

constexpr size_t kMaxConfusionClasses = 100;

class RunReporter {
 public:
  // Metrics go to cfg.metrics, or OUT/metrics.jsonl (appended: a resumed run continues it).
  // Lines about epochs go to `out`; the progress line and notes to stderr.
  RunReporter(const TrainConfig& cfg, int64_t first_step, int64_t total_steps, FILE* out);

  // The "start" record: where this process starts (first_step), the epoch's length, the
  // device as RunDevice::describe() says it ("cpu fp32"; with replicas, how many), and the
  // set-up before the run's clock starts: setup_s from the run's start (configuration, data,
  // devices, --conv auto, the loaders), conv_auto_s the part --conv auto's timing took
  // (bench/compare.sh counts set-up the same way for PyTorch).
  void start(int64_t steps_per_epoch, const std::string& device, double setup_s,
             double conv_auto_s);
  // After each step. loss_scale: the scaler's scale now (0 when there is no scaling, fp32).
  void step(const StepResult& r, int64_t steps_done, double loss_scale);
  // After the evaluation at the end of an epoch (e null: no validation data); average: the
  // weights' moving average's (--ema), or null.
  void epoch(int epoch, int epochs, int64_t step, const EvalResult* e,
             const std::vector<std::string>& class_names, const EvalResult* average = nullptr);
  void checkpoint(int64_t step, const std::string& path, bool best);
  // OUT/report.html rewritten from the metrics file and the folder (train/report/report.h). A
  // failure never stops the run: it is a note on stderr, at once when `say_now` (the main
  // thread), else kept for the next step, epoch or say_now to say (the checkpoint writer's
  // thread calls this, and only the main thread may print between progress lines); each
  // failure is said once. Thread-safe.
  // Returns whether the page was written.
  bool refresh_report(bool say_now);
  // One line on stderr, after ending a drawn progress line.
  void note(const std::string& line);
  // Ends a drawn progress line (on a terminal), before printing anything else.
  void end_line() { progress_.end_line(); }

  const std::string& metrics_path() const { return metrics_.path(); }

 private:
  // Sums over the steps since the last report, and a meter for the rates since then: one for
  // the progress line, one for the metrics records (on a terminal they report at different
  // times).
  struct Window {
    explicit Window(int64_t first, int64_t total) : meter(first, total) {}
    RateMeter meter;
    double loss = 0, correct = 0;
    int64_t images = 0, steps = 0;
    DeviceTime device;                 // the steps' device clocks (StepResult::device)
    double loader_s = 0;               // the loader alone
    double wait_s = 0, held_s = 0;     // the host's wait for batches, and its held part
    double eta_s = 0;  // from the last take()
    StepMetrics take(int64_t step, int epoch, double lr, double scale, int64_t images_total,
                     double wait_total, double sync_total);
  };

  // Says the failures of refresh_report on another thread, once the main thread may.
  void say_report_failures();

  const TrainConfig& cfg_;
  FILE* out_;
  int64_t first_step_, total_steps_;
  MetricsWriter metrics_;
  std::unique_ptr<EventWriter> events_;  // null with --no-tensorboard
  int64_t skipped_ = 0;                  // skipped steps since the last "step" record
  TrainProgress progress_;
  Window line_, record_;
  std::chrono::steady_clock::time_point last_line_;
  int64_t images_total_ = 0;      // since this process started training
  double wait_total_ = 0;         // seconds in Loader::next()
  double sync_total_ = 0;         // --sync-bn: seconds in BatchNorm's synchronisation
  bool synced_ = false;           // --sync-bn with replicas: the steps report sync_s
  bool sync_noted_ = false;       // the note that it takes a large share was printed
  // The current epoch's training loss and accuracy, and its start.
  double epoch_loss_ = 0, epoch_correct_ = 0;
  int64_t epoch_images_ = 0;
  std::chrono::steady_clock::time_point epoch_start_;
  std::chrono::steady_clock::time_point start_;  // the eval records' "time" counts from here
  std::mutex report_mu_;        // one report written at a time
  std::mutex failures_mu_;      // guards report_failures_
  std::vector<std::string> report_failures_;  // not yet said
};

}  // namespace cutrain
