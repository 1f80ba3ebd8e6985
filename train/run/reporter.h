// defines: RunReporter, what a training run tells while it runs: the progress line
// (data/progress_line.h: redrawn in place on a terminal, a plain line every --log-every steps
// in a log), the metrics file (data/metrics.h: JSON lines), one line per epoch, and a line for
// each skipped step naming the parameter whose gradient overflowed.
//
// Metrics records, besides the "step" records of StepMetrics (one every --log-every steps and
// at the last step; loss and accuracy averaged over the steps since the previous record):
//   {"kind":"skip","step":S,"parameter":"conv3.w","loss_scale":32768}    a skipped step
//   {"kind":"eval","epoch":E,"step":S,"loss":..,"top1":..,"top5":..,"images":N,
//    "seconds":..,"time":T,"per_class":[..]}                             after each epoch
// "time" is seconds since the reporter started, the clock of the step records' "time" (the
// evaluation included): time-to-accuracy reads straight off the eval records.
//   {"kind":"checkpoint","step":S,"path":"..","best":true}               each checkpoint
#pragma once
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "data/metrics.h"
#include "data/progress_line.h"
#include "train/engine/trainer.h"
#include "train/run/config.h"
#include "train/run/evaluate.h"

namespace cutrain {

class RunReporter {
 public:
  // Metrics go to cfg.metrics, or OUT/metrics.jsonl (appended: a resumed run continues it).
  // Lines about epochs go to `out`; the progress line and notes to stderr.
  RunReporter(const TrainConfig& cfg, int64_t first_step, int64_t total_steps, FILE* out);

  // After each step. loss_scale: the scaler's scale now (0 when there is no scaling, fp32).
  void step(const StepResult& r, int64_t steps_done, double loss_scale);
  // After the evaluation at the end of an epoch (e null: no validation data).
  void epoch(int epoch, int epochs, int64_t step, const EvalResult* e,
             const std::vector<std::string>& class_names);
  void checkpoint(int64_t step, const std::string& path, bool best);
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
    double eta_s = 0;  // from the last take()
    StepMetrics take(int64_t step, int epoch, double lr, double scale, int64_t images_total,
                     double wait_total, double sync_total);
  };

  const TrainConfig& cfg_;
  FILE* out_;
  int64_t total_steps_;
  MetricsWriter metrics_;
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
};

}  // namespace cutrain
