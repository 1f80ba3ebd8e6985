// The report page's charts (report_page.h): the training curves from the step and eval
// records, and the last evaluation's per-class accuracy and confusion matrix.
#include <algorithm>
#include <cmath>

#include "train/report/report_page.h"
#include "train/report/report_svg.h"

namespace cutrain::report_page {

namespace {

// A per-step series of one field of the step records, downsampled for drawing.
ChartSeries step_series(const RunRecords& r, double MetricsStep::*field, const std::string& name,
                        const char* color, double scale = 1) {
  ChartSeries s;
  s.name = name, s.color = color, s.scale = scale, s.width = 1.2;
  std::vector<ChartPoint> p;
  for (const MetricsStep& st : r.steps) p.push_back({double(st.step), st.*field});
  s.points = downsample(p, kMaxChartPoints);
  return s;
}

// A per-epoch series: dots joined by a line, each dot's title naming its epoch.
ChartSeries epoch_series(const std::string& name, const char* color,
                         const std::vector<std::pair<int, ChartPoint>>& points, double scale,
                         const char* format) {
  ChartSeries s;
  s.name = name, s.color = color, s.scale = scale, s.dots = true, s.width = 2.2;
  for (const auto& [epoch, p] : points) {
    s.points.push_back(p);
    s.titles.push_back(name + ", epoch " + std::to_string(epoch) + " (step " +
                       std::to_string(int64_t(p.x)) + "): " + fmt(format, p.y * scale));
  }
  return s;
}

// Whether the run trained on augmented images (config.json's "augment").
bool augmented(const ReportInput& in) {
  for (const auto& [key, value] : in.config)
    if (key == "augment") return value == "true";
  return false;
}

}  // namespace

std::string training_charts(const ReportInput& in, const std::vector<EpochTrain>& epochs) {
  const RunRecords& r = in.records;
  const bool val = !r.evals.empty();
  std::vector<std::pair<int, ChartPoint>> tl, ta, vl, v1, v5;
  for (const EpochTrain& e : epochs)
    tl.push_back({e.epoch, {double(e.last_step), e.loss}}),
        ta.push_back({e.epoch, {double(e.last_step), e.accuracy}});
  for (const MetricsEval& e : r.evals)
    vl.push_back({e.epoch, {double(e.step), e.loss}}),
        v1.push_back({e.epoch, {double(e.step), e.top1}}),
        v5.push_back({e.epoch, {double(e.step), e.top5}});
  std::vector<ChartMark> skips;
  for (const MetricsSkip& s : r.skips)
    skips.push_back({double(s.step), "step " + std::to_string(s.step) + " skipped: inf/NaN "
                                     "gradient in " + s.parameter + ", loss scale then " +
                                     fmt("%g", s.loss_scale)});
  const std::string no_val = val ? "" : "No validation data: training only. ";

  std::string s = "<h2>Training</h2>\n<div class=\"grid\">\n";
  LineChart loss;
  loss.label = "loss", loss.y_label = "loss", loss.marks = skips;
  loss.series = {step_series(r, &MetricsStep::loss, "train loss (step record)", kTrainStep),
                 epoch_series("train loss", kTrain, tl, 1, "%.4f")};
  if (val) loss.series.push_back(epoch_series("val loss", kVal, vl, 1, "%.4f"));
  std::string legend = legend_item(kTrainStep, "train, per record") +
                       legend_item(kTrain, "train, epoch mean") +
                       (val ? legend_item(kVal, "validation") : "") +
                       (skips.empty() ? "" : legend_item(kSkip, "skipped step", true));
  s += figure("Loss", legend, line_chart(loss),
              no_val + "Epoch means: the epoch's step records, each weighted by the steps it "
                       "covers (image-weighted when every batch is full).");

  LineChart acc;
  acc.label = "accuracy", acc.y_label = "accuracy (%)";
  acc.series = {step_series(r, &MetricsStep::accuracy, "train accuracy (step record)",
                            kTrainStep, 100),
                epoch_series("train accuracy", kTrain, ta, 100, "%.2f%%")};
  if (val) {
    acc.series.push_back(epoch_series("val top-5", kVal5, v5, 100, "%.2f%%"));
    acc.series.back().dashed = true;
    acc.series.push_back(epoch_series("val top-1", kVal, v1, 100, "%.2f%%"));
  }
  legend = legend_item(kTrainStep, "train, per record") + legend_item(kTrain, "train, epoch mean") +
           (val ? legend_item(kVal, "val top-1") + legend_item(kVal5, "val top-5", true) : "");
  s += figure("Accuracy", legend, line_chart(acc),
              no_val + "Train: top-1 on the training batches" +
                  (augmented(in) ? " (augmented)" : "") +
                  (val ? "; validation: top-1 and top-5 after each epoch." : "."));

  LineChart lr;
  lr.label = "learning rate", lr.y_label = "learning rate", lr.y_from_zero = true;
  lr.series = {step_series(r, &MetricsStep::lr, "learning rate", "#0d9488")};
  lr.series[0].width = 1.8;
  s += figure("Learning rate", legend_item("#0d9488", "per step record"), line_chart(lr));

  const bool scaled = std::any_of(r.steps.begin(), r.steps.end(),
                                  [](const MetricsStep& st) { return st.loss_scale > 0; });
  LineChart scale;
  scale.label = "loss scale", scale.y_label = "loss scale", scale.log2_y = true;
  scale.marks = skips;
  scale.series = {step_series(r, &MetricsStep::loss_scale, "loss scale", "#7c3aed")};
  scale.series[0].width = 1.8, scale.series[0].format = "%g";
  scale.empty_text = "fp32: no loss scaling (every record's loss scale is 0)";
  s += figure("Loss scale (log axis)",
              legend_item("#7c3aed", "per step record") +
                  (skips.empty() ? "" : legend_item(kSkip, "skipped step", true)),
              line_chart(scale),
              scaled ? "fp16: halved and the step skipped on an inf/NaN gradient, doubled after "
                       "2000 clean steps." : "");

  LineChart ips;
  ips.label = "images per second", ips.y_label = "images/s", ips.y_from_zero = true;
  ips.series = {step_series(r, &MetricsStep::images_per_s, "images/s", "#16a34a")};
  s += figure("Throughput", legend_item("#16a34a", "images/s since the previous record"),
              line_chart(ips));

  // The pipeline: the device's clock (busy, waiting for a batch, idle) and the host's wait.
  const bool clocked = std::any_of(r.steps.begin(), r.steps.end(), [](const MetricsStep& st) {
    return std::isfinite(st.busy_pct);
  });
  LineChart pipe;
  pipe.label = "pipeline", pipe.y_label = "% of the wall time", pipe.y_from_zero = true;
  pipe.series = {step_series(r, &MetricsStep::data_wait_pct, "host waits for data", kPipeHost)};
  std::string pipe_legend = legend_item(kPipeHost, "host in Loader::next()");
  if (clocked) {
    pipe.series.push_back(step_series(r, &MetricsStep::busy_pct, "device busy", kPipeBusy));
    pipe.series.push_back(
        step_series(r, &MetricsStep::device_wait_pct, "device waits for a batch", kPipeWait));
    pipe.series.push_back(step_series(r, &MetricsStep::idle_pct, "device idle", kPipeIdle));
    pipe_legend = legend_item(kPipeBusy, "device busy") +
                  legend_item(kPipeWait, "device waits for a batch") +
                  legend_item(kPipeIdle, "device idle (nothing queued)") + pipe_legend;
  }
  for (ChartSeries& series : pipe.series) series.format = "%.1f%%";
  s += figure("Pipeline", pipe_legend, line_chart(pipe),
              clocked ? "On the device's clock (GPU: events on the compute stream; CPU: the "
                        "host's). Loader-bound when the device waits for batches more than 5% "
                        "of the time, host-bound when it idles more than 5%, else compute-bound. "
                        "The host's wait includes waiting for the device to give a slot back."
                      : "These records have no device clock (a run before cutrain recorded "
                        "it): the host's wait in Loader::next() alone.");
  return s + "</div>\n";
}

std::string last_evaluation(const ReportInput& in) {
  if (in.records.evals.empty()) return "";
  const MetricsEval& e = in.records.evals.back();
  std::string s = "<h2>Per class, epoch " + std::to_string(e.epoch) + " (validation, " +
                  std::to_string(e.images) + " images)</h2>\n<div class=\"grid\">\n";
  std::vector<std::string> names, titles;
  std::vector<double> values;
  int worst = -1;
  for (size_t k = 0; k < e.per_class.size(); k++) {
    const ClassAccuracy& c = e.per_class[k];
    names.push_back(k < in.class_names.size() ? in.class_names[k] : c.name);
    values.push_back(c.top1);
    titles.push_back(names.back() + ": top-1 " + fmt("%.2f%%", 100 * c.top1) + " of " +
                     std::to_string(c.images) + " images");
    if (c.images > 0 && (worst < 0 || c.top1 < values[size_t(worst)])) worst = int(k);
  }
  s += figure("Per-class accuracy", legend_item(kVal, "top-1") + legend_item(kSkip, "worst"),
              bar_chart(names, values, titles, kVal, worst, kSkip));
  s += e.confusion.empty()
           ? figure("Confusion matrix", "", "",
                    "Not in the eval record (runs before it was recorded, or more than 100 "
                    "classes).")
           : figure("Confusion matrix", "rows: true class, columns: predicted",
                    heat_map(names, e.confusion),
                    "Colour: the cell's share of its row (the class's images); the diagonal "
                    "(outlined) is each class's top-1.");
  return s + "</div>\n";
}

}  // namespace cutrain::report_page
