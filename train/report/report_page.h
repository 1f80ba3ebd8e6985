// defines: what the report page's two files share (report.cpp: the page, its header and
// tables; report_charts.cpp: its charts and the last evaluation's figures): the colours, number
// and time formats, a chart's figure with its caption and legend, and the two chart sections.
// Internal to train/report/report*.cpp.
#pragma once
#include <string>
#include <vector>

#include "train/report/report.h"

namespace cutrain::report_page {

// Train blue, validation orange: the same in every chart, legend and the per-class bars.
inline constexpr const char* kTrain = "#2563eb";      // train, per epoch
inline constexpr const char* kTrainStep = "#93c5fd";  // train, per step record
inline constexpr const char* kVal = "#ea580c";        // validation top-1 and loss
inline constexpr const char* kVal5 = "#fdba74";       // validation top-5
inline constexpr const char* kSkip = "#dc2626";       // skipped steps, the worst class
inline constexpr const char* kPipeBusy = "#16a34a";   // the device computing
inline constexpr const char* kPipeWait = "#d97706";   // the device waiting for a batch
inline constexpr const char* kPipeIdle = "#7c3aed";   // the device with nothing queued
inline constexpr const char* kPipeHost = "#64748b";   // the host in Loader::next()

// printf of a finite value; an en dash for NaN or inf.
std::string fmt(const char* format, double v);
// "2 h 05 min", "3 min 12 s", "41.2 s"
std::string duration(double seconds);
// A legend entry: a short line in `color` (dashed), then the name.
std::string legend_item(const char* color, const std::string& name, bool dashed = false);
// A card: the title and legend on one line, the drawing, a note below ("": none).
std::string figure(const std::string& title, const std::string& legend, const std::string& svg,
                   const std::string& note = "");

// "Training": loss, accuracy, learning rate, loss scale, images/s, the pipeline.
std::string training_charts(const ReportInput& in, const std::vector<EpochTrain>& epochs);
// The last evaluation: per-class accuracy and the confusion matrix ("" without validation).
std::string last_evaluation(const ReportInput& in);

}  // namespace cutrain::report_page
