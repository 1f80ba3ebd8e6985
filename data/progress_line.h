// defines: StatusLine (one line of progress: redrawn in place on a terminal, plain lines in a
// log), format_train_progress() (the training progress line, a pure function) and
// TrainProgress (which decides when to print it). Its times are format_hms's (data/units.h).
//
// The progress line of long commands (train/cli/progress.h) draws with StatusLine too: one way of
// printing progress in the whole program. Why in data/: see data/metrics.h.
//
// The training line, on a terminal redrawn about 10 times a second, in a log every N steps:
//   epoch 2/10  step 1200/4690  loss 0.4312  acc 84.38%  12345 img/s  busy 96%  compute-bound  pipeline 1.04  scale 65536  ETA 0:12:03
// (busy, the bound and the pipeline ratio: data/metrics.h, read off the device's clock).
#pragma once
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "data/metrics.h"

namespace cutrain {

// The training progress line, without a line end. epochs and steps are the run's totals.
// The loss scale is left out when m.loss_scale is 0 (fp32: no scaling) and the ETA shows
// "-:--:--" when it is not known (NaN).
std::string format_train_progress(const StepMetrics& m, int epochs, int64_t steps, double eta_s);

class StatusLine {
 public:
  // On a terminal (isatty), the line is redrawn in place; otherwise each show() is one line.
  explicit StatusLine(FILE* out);
  // For tests and pipes that want one or the other: `width` clips a terminal line (0: no clip).
  StatusLine(FILE* out, bool tty, int width = 0);
  ~StatusLine();  // ends a drawn line
  StatusLine(const StatusLine&) = delete;
  StatusLine& operator=(const StatusLine&) = delete;

  bool tty() const { return tty_; }
  // Terminal: "\r" + text (clipped to the width - 1 columns with truncate_to_width, "…" where
  // it was cut, so it never wraps) + erase to the end of the line. Otherwise: text + "\n".
  // Flushed either way.
  void show(const std::string& text);
  // Terminal: if a line is drawn, ends it with "\n" so what is printed next starts on a line
  // of its own (call before printing anything else). Otherwise nothing.
  void end_line();

 private:
  FILE* out_;
  bool tty_;
  int width_;
  bool drawn_ = false;
};

// When to print the training line. Call update() whenever the loop has fresh metrics (the
// step's loss and accuracy read back from the device); it prints:
//   on a terminal: at most every `redraw` (0.1 s), and always at the last step;
//   otherwise: when the step reaches a multiple of `log_every` (the first update at or past
//   it, however often update() is called), and at the last step.
class TrainProgress {
 public:
  using Clock = std::chrono::steady_clock;
  TrainProgress(int epochs, int64_t steps, int64_t log_every, FILE* out = stderr);
  TrainProgress(int epochs, int64_t steps, int64_t log_every, FILE* out, bool tty, int width = 0);

  // Returns whether it printed.
  bool update(const StepMetrics& m, double eta_s, Clock::time_point now = Clock::now());
  void end_line() { line_.end_line(); }  // before printing anything else (an evaluation)
  bool tty() const { return line_.tty(); }

  Clock::duration redraw = std::chrono::milliseconds(100);

 private:
  int epochs_;
  int64_t steps_, log_every_;
  StatusLine line_;
  bool drawn_ = false;
  Clock::time_point last_draw_;
  int64_t last_logged_ = 0;
};

}  // namespace cutrain
