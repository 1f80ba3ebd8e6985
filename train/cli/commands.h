// defines: the train, eval, predict, export and report subcommands of the cutrain program:
// their options (CLI11) and what each runs. main.cpp adds them and dispatches.
//
//   cutrain train --train LIST|FOLDER|PACK.h5 [--val ...] [options]      train/run/run.h
//   cutrain eval --checkpoint FILE|DIR --data LIST|FOLDER|PACK.h5          loss, top-1/5, per class
//   cutrain predict --checkpoint FILE|DIR (IMAGE... | --list LIST) [--top K] [--csv FILE]
//   cutrain export --checkpoint FILE|DIR --onnx MODEL.onnx    train/export/onnx_export.h
//   cutrain report RUN [--out FILE]                  RUN/report.html, train/report/report.h
//
// eval and predict read class names in their lists as the run's classes (the checkpoint's),
// by name (train/setup/classes.h, run_list_options).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "train/setup/config.h"

namespace CLI {
class App;
class Option;
}

namespace cutrain {

// --csv-columns PATH,LABEL, checked as it is parsed, for a command that reads lists (check-data,
// pack, eval, predict; train checks its own in validate_config).
CLI::Option* add_csv_columns_option(CLI::App* cmd, std::string& columns);

class Mpi;

struct TrainArgs {
  TrainConfig cfg;
  bool allow_data_change = false;  // run_training's (train/run/run.h)
  const Mpi* mpi = nullptr;        // started by mpirun: this process's place (train/replicas/mpi.h)
  CLI::App* cmd = nullptr;
};
CLI::App* add_train_command(CLI::App& app, TrainArgs& a);
int cmd_train(const TrainArgs& a);

struct EvalArgs {
  std::string checkpoint, data, csv_columns;
  std::string device = "auto", precision = "auto";
  std::string weights = "auto";  // auto | ema | raw (train/engine/engine.h: WeightChoice)
  std::string tta = "run";       // none | flip | run (the training run's --tta)
  int batch = 256, threads = 0;
  int64_t limit = 0;
  bool strict = false;
};
CLI::App* add_eval_command(CLI::App& app, EvalArgs& a);
int cmd_eval(const EvalArgs& a);

struct PredictArgs {
  std::string checkpoint, list, csv_columns;
  std::string csv;  // every class's probability of every image, as CSV
  std::vector<std::string> images;
  std::string device = "auto", precision = "auto";
  std::string weights = "auto", tta = "run";  // as EvalArgs
  int top = 5, batch = 256, threads = 0;
};
CLI::App* add_predict_command(CLI::App& app, PredictArgs& a);
int cmd_predict(const PredictArgs& a);

struct ExportArgs {
  std::string checkpoint, onnx;
  std::string input = "uint8";  // or "float" (train/export/onnx_export.h: OnnxInput)
  bool softmax = false;
  std::string weights = "auto";  // as EvalArgs
  std::string tta = "run";       // flip: the graph averages each image's logits with its mirror's
};
CLI::App* add_export_command(CLI::App& app, ExportArgs& a);
int cmd_export(const ExportArgs& a);

struct ReportArgs {
  std::string run, out;  // out "": RUN/report.html
};
CLI::App* add_report_command(CLI::App& app, ReportArgs& a);
int cmd_report(const ReportArgs& a);

}  // namespace cutrain
