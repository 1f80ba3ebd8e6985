// defines: the run report, RUN/report.html: one self-contained page (inline CSS and SVG drawn
// by train/report/report_svg.h; no script, nothing fetched) that says at a glance how a run went:
// a header (model, data, device, epochs done, best validation top-1, final training loss,
// wall time, images/s, the bound with busy % and the pipeline ratio), loss and accuracy per
// step and per epoch (train and validation), the learning rate, the loss scale, images/s and
// the pipeline (busy, the device's waits, the host's data wait) per step, skipped
// steps, per-class accuracy and the confusion matrix of the last evaluation, bad files, links
// to the checkpoints and the trace, and the configuration.
//
//   write_report("runs/r1");                   // -> "runs/r1/report.html", from the run's files
//   report_html(read_report_input(dir, out));  // the same page as a string
//   report_html(input);                        // ... or from records made by hand (tests)
//
// `cutrain report RUN` writes it; `cutrain train` rewrites it after each epoch's checkpoint
// and at the end (train/run/reporter.h, refresh_report).
//
// What it reads, all written by the run:
//   the metrics file: config.json's "metrics" (saved absolute; in older runs relative to where
//     the run was started), else RUN/metrics.jsonl (train/run/reporter.h has the records):
//     "start", "step", "eval", "skip";
//   RUN/config.json (the table, the class names, the trace's path);
//   the folder: step-*.h5 and best.h5 (and which step file best.h5 is), bad_files.txt and
//     bad_files.replica<r>.txt (the loader's list of the training data's bad files: path, kind,
//     message; the validation data's are counted in the eval records), the trace file(s).
//
// The rules:
//   - A resumed run appends to its metrics file. A "start" record at step S (each process
//     writes one) drops the records of steps after S that came before it: they belong to a
//     run that went further before the resume from an earlier checkpoint. Without start
//     records (older files), a step, an epoch's evaluation, a skip recorded twice keeps its
//     last record.
//   - Per-epoch training loss and accuracy: the mean of the epoch's step records, each weighted
//     by the steps it covers (since the previous record), which is the image-weighted mean when
//     every batch is full; a record belongs to the epoch of its last step ("epoch").
//   - Images/s, busy %, the device's waits and the pipeline ratio in the header: the median of
//     the step records from epoch 2 on (the first epoch's records hold the start-up), of all of
//     them for a 1-epoch run. The bound is data/metrics.h's rule (run_bound) on those medians.
//     The pipeline ratio is the records' own: the wall time over the longer of the loader alone
//     and the device's compute (data/metrics.h). Records without the device's clock (files
//     from before cutrain recorded it) show the host's data wait alone.
//   - Wall time: the sum over the run's processes of each one's last "time" (seconds since it
//     started training).
//   - null in a record (JSON has no NaN: an overflowed loss) is NaN here, a gap in the chart.
//   - At most kMaxChartPoints points a series are drawn (report_svg.h: downsample).
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace cutrain {

constexpr size_t kMaxChartPoints = 600;

struct MetricsStep {
  int64_t step = 0;
  int epoch = 0;
  double loss = 0, accuracy = 0, lr = 0, loss_scale = 0, images_per_s = 0, data_wait_pct = 0;
  // The device's clock (data/metrics.h); NaN where the record has none (null, or a file from
  // before cutrain recorded it).
  double busy_pct = NAN, device_wait_pct = NAN, idle_pct = NAN, pipeline_ratio = NAN;
  double time = 0;
};

struct ClassAccuracy {
  std::string name;
  int64_t images = 0;
  double top1 = 0;
};

struct MetricsEval {
  int epoch = 0;
  int64_t step = 0;
  double loss = 0, top1 = 0, top5 = 0, time = 0;
  double ema_loss = NAN, ema_top1 = NAN, ema_top5 = NAN;  // the average's (--ema); NaN: none
  int64_t images = 0, bad_files = 0;
  std::vector<ClassAccuracy> per_class;
  std::vector<int64_t> confusion;  // (K,K) row-major, rows the true class; empty: not recorded
};

struct MetricsSkip {
  int64_t step = 0;
  std::string parameter;
  double loss_scale = 0;  // after the skip
};

struct MetricsStart {
  int64_t step = 0, total_steps = 0, steps_per_epoch = 0;
  int epochs = 0;
  std::string device;
};

struct RunRecords {
  std::vector<MetricsStep> steps;    // by step, one a step (the rules above)
  std::vector<MetricsEval> evals;    // by epoch, one an epoch
  std::vector<MetricsSkip> skips;    // by step
  std::vector<MetricsStart> starts;  // in the file's order: one per process of the run
  double wall_s = 0;
  int64_t lines = 0;       // records read
  int64_t unreadable = 0;  // lines that are not a JSON object with a "kind" (a torn last line)
};

// The records of a metrics file's text (JSON lines), by the rules above.
RunRecords parse_metrics(const std::string& jsonl);

struct EpochTrain {
  int epoch = 0;
  int64_t last_step = 0;   // the step of the epoch's last record: where its point is drawn
  double loss = 0, accuracy = 0;  // weighted means (NaN: no finite value)
};
// Per-epoch training loss and accuracy from the step records (the rule above).
std::vector<EpochTrain> train_epochs(const RunRecords& r);

struct ReportLink {
  std::string name;  // shown
  std::string href;  // relative to the report's folder, percent-encoded; "": not there (yet)
  std::string note;  // "best", "12.3 MB", "written at the end of the run", ...
};

struct BadFileLine {
  std::string path, kind, message;
};

struct ReportInput {
  std::string title;  // the run folder's name
  RunRecords records;
  // config.json's keys and values as text, in the file's order (arrays joined by ", ").
  std::vector<std::pair<std::string, std::string>> config;
  std::vector<std::string> class_names;
  std::vector<ReportLink> checkpoints;  // step files by step, then best.h5
  std::vector<ReportLink> files;        // the metrics file, config.json, the trace(s)
  std::vector<BadFileLine> bad_files;   // training data, every replica's list, each path once
  std::string metrics_name;             // the metrics file, as the footer names it
  std::string generated;                // when, as the footer says ("2026-11-28 14:03")
};

// The page. A pure function of `in`.
std::string report_html(const ReportInput& in);

// What report_html needs, read from the run folder `run_dir`, with links relative to the
// folder of `report_path`. Throws UserError when the folder or config.json is missing, the
// metrics file is missing or holds no record ("no metrics records yet ...").
ReportInput read_report_input(const std::string& run_dir, const std::string& report_path);

// Writes the page to `out` ("": RUN/report.html) atomically (data/atomic_file.h) and returns
// the path written.
std::string write_report(const std::string& run_dir, const std::string& out = "");

}  // namespace cutrain
