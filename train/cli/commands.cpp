#include "train/cli/commands.h"

#include <CLI/CLI.hpp>

#include <csv.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "data/atomic_file.h"
#include "data/fingerprint.h"
#include "data/text_width.h"
#include "kernels/check.h"
#include "kernels/parallel.h"
#include "train/cli/predict.h"
#include "train/engine/trainer.h"
#include "train/export/onnx_export.h"
#include "train/run/checkpoint.h"
#include "train/run/dataset.h"
#include "train/run/device.h"
#include "train/run/report.h"
#include "train/run/run.h"

namespace cutrain {

namespace {
const char* kCsvColumnsHelp =
    "CSV lists: the path and label columns, by header name or 0-based index (default: the "
    "columns named image, filename, file, path or image_path, and label, class, category or "
    "target); given, every list file is read as CSV";
const char* kDecodeThreadsHelp =
    "Decode threads (0: every hardware thread on the CPU, one fewer on a GPU; shared among the "
    "replicas)";
const char* kEvalDecodeThreadsHelp =
    "Decode threads (0: every hardware thread on the CPU, one fewer on a GPU)";
}  // namespace

CLI::Option* add_csv_columns_option(CLI::App* cmd, std::string& columns) {
  return cmd->add_option("--csv-columns", columns, kCsvColumnsHelp)
      ->check(CLI::Validator([](std::string& v) { return csv_columns_problem(v); }, "PATH,LABEL"));
}

// ---- train -------------------------------------------------------------------------------

CLI::App* add_train_command(CLI::App& app, TrainArgs& a) {
  TrainConfig& c = a.cfg;
  auto* t = app.add_subcommand("train", "Train a model on a list, a folder of class folders or "
                                        "a pack; checkpoints, metrics and config.json go to --out");
  a.cmd = t;
  t->option_defaults()->always_capture_default();
  // data
  t->add_option("--train", c.train, "Training data: an image list, a folder with a folder per "
                                    "class, or an HDF5 pack (cutrain pack)")->group("Data");
  t->add_option("--val", c.val, "Validation data (same kinds), evaluated after each epoch; "
                                "class names in it are the training classes' names")
      ->group("Data");
  t->add_option("--val-split", c.val_split, "Hold out this fraction of --train as the "
                                            "validation data instead (stratified by class, "
                                            "fixed by --seed; 0: none)")->group("Data");
  t->add_option("--csv-columns", c.csv_columns, kCsvColumnsHelp)->group("Data");
  t->add_option("--size", c.size, "Images are SIZExSIZE (0: from the data)")->group("Data");
  t->add_option("--channels", c.channels, "1 or 3 (0: from the data)")->group("Data");
  t->add_option("--mean", c.mean, "Per-channel mean of pixel/255, e.g. 0.49,0.48,0.45 "
                                  "(default: measured on the training images)")
      ->delimiter(',')->group("Data");
  t->add_option("--std", c.std, "Per-channel standard deviation of pixel/255 (default: measured)")
      ->delimiter(',')->group("Data");
  t->add_flag("--augment", c.augment, "Random crop and horizontal flip of training images")
      ->group("Data");
  t->add_option("--pad", c.pad, "Random crops may reach PAD pixels past the edges (zeros) "
                                "(-1: SIZE/8 with --augment and no --resize)")->group("Data");
  t->add_option("--resize", c.resize, "Shorter side before cropping (0: SIZE)")->group("Data");
  t->add_option("--limit-train", c.limit_train, "Use only the first N training images (0: all)")
      ->group("Data");
  t->add_option("--limit-val", c.limit_val, "Use only the first N validation images (0: all)")
      ->group("Data");
  t->add_flag("--strict", c.strict, "Stop at the first bad image instead of skipping it")
      ->group("Data");
  // model and device
  t->add_option("--model", c.model, "A built-in model (default, resnet) or a description file")
      ->group("Model");
  t->add_option("--device", c.device, "auto, cpu or cuda")->group("Model");
  t->add_option("--devices", c.devices, "Data-parallel replicas, one per entry: cpu,cpu (CPU "
                                        "threads) or GPU ordinals 0,1 (repeats allowed); the "
                                        "batch is split evenly (default: one, on --device)")
      ->group("Model");
  t->add_option("--precision", c.precision, "auto (fp16 on cuda, fp32 on cpu), fp16 or fp32")
      ->group("Model");
  t->add_option("--conv", c.conv, "conv2d kernels. auto: tc on a GPU, onednn on the CPU. GPU: "
                                 "tc (tensor cores, fp16; direct in fp32), direct or cudnn. CPU: "
                                 "onednn (fp32; fp16 runs direct) or direct (the reference: the "
                                 "same bits on any thread count)")
      ->group("Model");
  t->add_option("--linear", c.linear, "linear kernels: auto, tc, direct, cublas or onednn (as "
                                     "--conv)")
      ->group("Model");
  t->add_flag("--cuda-graph", c.cuda_graph,
              "GPU, one replica: capture the step of a full batch as CUDA graphs and replay "
              "them each step (fewer launch gaps; the same results bit for bit)")
      ->group("Model");
  // optimisation
  t->add_option("--optimizer", c.optimizer, "sgd, nesterov or adamw")->group("Optimization");
  t->add_option("--lr", c.lr, "Peak learning rate (0: 0.1 for sgd/nesterov, 0.001 for adamw)")
      ->group("Optimization");
  t->add_option("--momentum", c.momentum, "SGD momentum")->group("Optimization");
  t->add_option("--wd", c.wd, "Weight decay (-1: 5e-4 for sgd/nesterov, 0.05 for adamw)")
      ->group("Optimization");
  t->add_option("--schedule", c.schedule, "cosine, linear, constant or onecycle")
      ->group("Optimization");
  t->add_option("--warmup", c.warmup, "Epochs of linear warm-up (-1: 1, or 0 for onecycle)")
      ->group("Optimization");
  t->add_option("--epochs", c.epochs, "Epochs to train")->group("Optimization");
  t->add_option("--batch", c.batch, "Images per optimizer step")->group("Optimization");
  t->add_option("--accum", c.accum, "Compute each step as this many micro-batches "
                                    "(gradient accumulation; divides --batch)")
      ->group("Optimization");
  t->add_flag("--sync-bn", c.sync_bn,
              "Replicas (--devices, mpirun): BatchNorm takes its statistics over the whole "
              "batch, every replica's shard, as one replica with the whole batch would "
              "(synchronised BatchNorm; without it each replica uses its own shard's)")
      ->group("Optimization");
  t->add_option("--max-skips", c.max_skips,
                "fp16: stop the run, naming the step, after this many steps in a row were "
                "skipped for inf/NaN gradients (fp32 has no loss scale to lower: it stops at "
                "the first)")
      ->group("Optimization");
  t->add_option("--label-smoothing", c.label_smoothing, "Label smoothing of the loss")
      ->group("Optimization");
  t->add_option("--balance", c.balance,
                "Imbalanced classes: none; sampler (each epoch draws as many samples of every "
                "class, repeating small classes, subsampling large ones); or loss (each "
                "sample's loss weighted by N / (classes x its class's count))")
      ->group("Optimization");
  t->add_option("--seed", c.seed, "Seed of the weights, the batch order and the augmentation")
      ->group("Optimization");
  // the run
  t->add_option("--threads", c.threads, kDecodeThreadsHelp)->group("Run");
  t->add_option("--compute-threads", c.compute_threads,
                "OpenMP threads of the CPU kernels, per replica (0: the cores, shared out among "
                "the replicas computing at once)")
      ->group("Run");
  t->add_option("--out", c.out, "Folder for checkpoints, metrics and config.json")->group("Run");
  t->add_option("--keep", c.keep, "Checkpoints kept besides the best")->group("Run");
  t->add_option("--resume", c.resume, "Continue the run in this folder from its newest "
                                      "checkpoint, exactly")->group("Run");
  t->add_flag("--allow-data-change", a.allow_data_change,
              "With --resume, when the training data changed since the checkpoint: go on from "
              "the next epoch in a fresh order over the new data (otherwise refused)")
      ->group("Run");
  t->add_option("--metrics", c.metrics, "Metrics as JSON lines (default: OUT/metrics.jsonl)")
      ->group("Run");
  t->add_option("--trace", c.trace, "Write a Chrome/Perfetto trace of the run to this file "
                                    "(ui.perfetto.dev)")->group("Run");
  t->add_option("--log-every", c.log_every, "Steps between progress lines in a log")
      ->group("Run");
  t->add_option("--checkpoint-every", c.checkpoint_every,
                "Steps between extra checkpoints (0: after each epoch only)")->group("Run");
  t->add_option("--check-replicas", c.check_replicas,
                "Debug: every N steps, check that all replicas hold the same weights bit for "
                "bit, and stop at the first difference (0: never)")->group("Run");
  return t;
}

int cmd_train(const TrainArgs& a) {
  std::vector<std::string> given;  // for --resume: which options the command line set
  for (const CLI::Option* o : a.cmd->get_options())
    if (o->count() > 0 && !o->get_lnames().empty() && o->get_name() != "--allow-data-change")
      given.push_back(option_key(o->get_name()));
  USER_CHECK(!a.allow_data_change || !a.cfg.resume.empty(),
             "--allow-data-change goes with --resume: a new run has no earlier data");
  const RunSummary s = run_training(a.cfg, given, stdout, a.allow_data_change, a.mpi);
  return s.exit_code;
}

// ---- eval and predict --------------------------------------------------------------------

namespace {

struct Loaded {
  std::string path;
  Checkpoint ckpt;
  TrainConfig cfg;
  RunDevice device;
  std::unique_ptr<ComputeThreadsScope> threads;  // the run's compute threads, while loaded
  std::unique_ptr<Model> model;
};

Loaded load_for_inference(const std::string& checkpoint, const std::string& device,
                          const std::string& precision) {
  Loaded l;
  l.path = resolve_checkpoint_arg(checkpoint);
  l.ckpt = read_checkpoint(l.path);
  l.cfg = config_from_json_text(l.ckpt.config_json, l.path);
  const RunDevice d = choose_device(device, precision);
  if (!d.notice.empty()) std::fprintf(stderr, "%s\n", d.notice.c_str());
  l.device = d;
  l.threads = std::make_unique<ComputeThreadsScope>(inference_compute_threads(l.cfg));
  // The model runs the run's kernels (--conv, --linear), by the rules training and resume use
  // (kernels/impl.h), so that on the run's device `cutrain eval` repeats the run's own
  // evaluation. On a GPU the model is made on the legacy default stream; evaluate() runs on a
  // stream of its own after it, predict() there.
  const bool gpu = d.device == Device::cuda;
  Context in = gpu ? Context::cuda(nullptr, ConvImpl::tc, LinearImpl::tc, d.gpu) : Context::cpu();
  in.conv = parse_conv_impl(l.cfg.conv, gpu);
  in.linear = parse_linear_impl(l.cfg.linear, gpu);
  l.model = load_model(l.ckpt, l.cfg, d.dtype, in);
  std::printf("%s: step %lld, epoch %lld, %s, %dx%dx%d, %d classes; %s\n", l.path.c_str(),
              (long long)l.ckpt.step, (long long)l.ckpt.epoch, l.cfg.model.c_str(), l.cfg.size,
              l.cfg.size, l.cfg.channels, l.cfg.classes, d.describe().c_str());
  return l;
}

// The lists of eval and predict: class names are the checkpoint's classes.
ListOptions checkpoint_lists(const Loaded& l, const std::string& csv_columns) {
  ListOptions o = run_list_options(l.cfg);
  o.csv_columns = csv_columns;
  o.classes_source = "the checkpoint's classes";
  return o;
}

EvalOptions eval_options(const Loaded& l, int batch, int threads, bool strict) {
  EvalOptions o;
  o.batch = batch;
  o.threads = run_decode_threads(threads, l.device, 1);
  o.strict = strict;
  o.norm = Normalization{l.cfg.mean, l.cfg.std};
  return o;
}

}  // namespace

CLI::App* add_eval_command(CLI::App& app, EvalArgs& a) {
  auto* e = app.add_subcommand("eval", "Evaluate a checkpoint: loss, top-1 and top-5 accuracy, "
                                       "per-class accuracy");
  e->option_defaults()->always_capture_default();
  e->add_option("--checkpoint", a.checkpoint, "A checkpoint file, or a run folder (its best.h5, "
                                              "else its newest checkpoint)")->required();
  e->add_option("--data", a.data, "An image list, a CSV list, a folder of class folders or a pack "
                                  "(default: the run's validation data: its --val, or the part "
                                  "of --train that --val-split held out)");
  add_csv_columns_option(e, a.csv_columns);
  e->add_option("--limit", a.limit, "Only the first N images (0: all)")
      ->check(CLI::NonNegativeNumber);
  e->add_option("--batch", a.batch, "Images per batch")->check(CLI::Range(1, kMaxBatch));
  e->add_option("--threads", a.threads, kEvalDecodeThreadsHelp)
      ->check(CLI::Range(0, kMaxThreads));
  e->add_option("--device", a.device, "auto, cpu or cuda");
  e->add_option("--precision", a.precision, "auto, fp16 or fp32");
  e->add_flag("--strict", a.strict, "Stop at the first bad image instead of skipping it");
  return e;
}

int cmd_eval(const EvalArgs& a) {
  Loaded l = load_for_inference(a.checkpoint, a.device, a.precision);
  std::shared_ptr<const SampleSource> data;
  std::string name = a.data;
  if (!a.data.empty()) {
    data = open_source_for_model(a.data, eval_image_spec(l.cfg), a.limit, l.cfg.class_names,
                                 l.path, checkpoint_lists(l, a.csv_columns));
  } else {
    USER_CHECK(has_validation(l.cfg), l.path << ": its run had no validation data (neither "
                                             << "--val nor --val-split): give --data");
    if (l.cfg.val_split > 0 && !l.ckpt.data_fingerprint.empty()) {
      // The held-out part is recomputed from --train: only the same data give the same split.
      const DataFingerprint was = DataFingerprint::from_json(l.ckpt.data_fingerprint, l.path);
      const DataFingerprint now = fingerprint_of(*open_train_source(l.cfg, eval_image_spec(l.cfg)));
      USER_CHECK(was == now, l.cfg.train << " changed since " << l.path << " was written ("
                                         << data_difference(was, now) << "), so the part "
                                         << "--val-split held out is not the same: give --data");
    }
    data = open_val_source(l.cfg, eval_image_spec(l.cfg));
    if (a.limit > 0 && a.limit < data->size()) {
      std::vector<int64_t> first(static_cast<size_t>(a.limit));
      for (int64_t i = 0; i < a.limit; i++) first[size_t(i)] = i;
      data = subset_source(data, std::move(first));
    }
    name = validation_name(l.cfg);
  }
  std::printf("eval: %s (%lld images)\n", name.c_str(), (long long)data->size());
  std::fflush(stdout);
  const EvalResult r = evaluate(*l.model, data, eval_options(l, a.batch, a.threads, a.strict));
  std::printf("%s\n%s", eval_summary(r).c_str(), per_class_report(r, l.cfg.class_names).c_str());
  return 0;
}

CLI::App* add_predict_command(CLI::App& app, PredictArgs& a) {
  auto* p = app.add_subcommand("predict", "The most likely classes of images, with names and "
                                          "probabilities");
  p->option_defaults()->always_capture_default();
  p->add_option("--checkpoint", a.checkpoint, "A checkpoint file, or a run folder (its best.h5, "
                                              "else its newest checkpoint)")->required();
  p->add_option("images", a.images, "Image files");
  p->add_option("--list", a.list, "An image list or a folder of class folders, instead of files "
                                  "(the listed labels are shown beside the predictions)");
  add_csv_columns_option(p, a.csv_columns);
  p->add_option("--top", a.top, "How many classes to show per image")
      ->check(CLI::Range(1, 1000));
  p->add_option("--batch", a.batch, "Images per batch")->check(CLI::Range(1, kMaxBatch));
  p->add_option("--threads", a.threads, kEvalDecodeThreadsHelp)
      ->check(CLI::Range(0, kMaxThreads));
  p->add_option("--device", a.device, "auto, cpu or cuda");
  p->add_option("--precision", a.precision, "auto, fp16 or fp32");
  p->add_option("--csv", a.csv, "Also write every class's probability of every image to this "
                                "CSV file (columns path, label, predicted, then one per class)");
  return p;
}

namespace {

// One CSV field, quoted by libcsv (quotes inside doubled).
std::string csv_field(const std::string& s) {
  std::string out(2 * s.size() + 2, '\0');
  out.resize(csv_write(out.data(), out.size(), s.data(), s.size()));
  return out;
}

// predict --csv: a header, then a row per image: path, label name (lists only), top-1 class
// name, and every class's probability (%.9g: enough digits to compare with another runtime).
std::string predictions_csv(const std::vector<Prediction>& preds, const ImageList& list,
                            bool labelled, const std::vector<std::string>& names) {
  auto name = [&](int k) {
    return size_t(k) < names.size() ? names[size_t(k)] : std::to_string(k);
  };
  std::string out = "path,label,predicted";
  const size_t K = preds.empty() ? names.size() : preds[0].all.size();
  for (size_t k = 0; k < K; k++) out += "," + csv_field(name(int(k)));
  out += "\n";
  char num[32];
  for (const Prediction& p : preds) {
    const Sample& s = list.samples[size_t(p.index)];
    out += csv_field(s.path) + "," + (labelled ? csv_field(name(s.label)) : "") + "," +
           csv_field(name(p.classes[0]));
    for (double v : p.all) {
      std::snprintf(num, sizeof num, ",%.9g", v);
      out += num;
    }
    out += "\n";
  }
  return out;
}

}  // namespace

int cmd_predict(const PredictArgs& a) {
  USER_CHECK(a.images.empty() != a.list.empty(), "predict: give image files or --list, not "
                                                << (a.images.empty() ? "neither" : "both"));
  Loaded l = load_for_inference(a.checkpoint, a.device, a.precision);
  ImageList list;
  const bool labelled = !a.list.empty();
  if (labelled) {
    list = read_images(a.list, checkpoint_lists(l, a.csv_columns));
    // The list's labels in the model's classes: by name when both name them.
    const std::vector<int32_t> map = class_mapping(list.class_names, l.cfg.class_names, a.list, l.path);
    for (Sample& s : list.samples) {
      if (!map.empty()) s.label = map[size_t(s.label)];
      USER_CHECK(s.label < int32_t(l.cfg.class_names.size()),
                 a.list << ": label " << s.label << " of " << s.path << " is not a class of "
                        << l.path << " (" << l.cfg.class_names.size() << " classes)");
    }
  } else {
    for (const std::string& path : a.images) list.samples.push_back(Sample{path, 0});
    list.source = "the command line";
  }
  const auto data = std::make_shared<ListSource>(list, eval_image_spec(l.cfg));
  const std::vector<Prediction> preds = predict(
      *l.model, data, eval_options(l, a.batch, a.threads, false), a.top, !a.csv.empty());
  auto name = [&](int k) {
    return size_t(k) < l.cfg.class_names.size() ? l.cfg.class_names[size_t(k)] : std::to_string(k);
  };
  const size_t width = column_width(l.cfg.class_names, 20);  // terminal columns, not bytes
  for (const Prediction& p : preds) {
    const Sample& s = list.samples[size_t(p.index)];
    std::printf("%s", s.path.c_str());
    if (labelled)
      std::printf("  [label %s%s]", name(s.label).c_str(), p.classes[0] == s.label ? "" : ", wrong");
    std::printf("\n");
    for (size_t i = 0; i < p.classes.size(); i++)
      std::printf("  %zu. %s %6.2f%%\n", i + 1, fit_to_width(name(p.classes[i]), width).c_str(),
                  100 * p.probs[i]);
  }
  if (!a.csv.empty()) {
    write_file_atomically(a.csv, predictions_csv(preds, list, labelled, l.cfg.class_names));
    std::printf("wrote every class's probability of %zu images to %s\n", preds.size(),
                a.csv.c_str());
  }
  const size_t bad = list.samples.size() - preds.size();
  if (bad) std::printf("%zu image%s could not be read (see above)\n", bad, bad == 1 ? "" : "s");
  return bad ? 2 : 0;
}

// ---- export ------------------------------------------------------------------------------

CLI::App* add_export_command(CLI::App& app, ExportArgs& a) {
  auto* e = app.add_subcommand("export", "Write a checkpoint's model as an ONNX graph, its "
                                         "input normalisation and class names included");
  e->option_defaults()->always_capture_default();
  e->add_option("--checkpoint", a.checkpoint, "A checkpoint file, or a run folder (its best.h5, "
                                              "else its newest checkpoint)")->required();
  e->add_option("--onnx", a.onnx, "The .onnx file to write")->required();
  e->add_option("--input", a.input, "What the graph takes, NHWC: uint8 (pixels 0..255) or "
                                    "float (pixels/255 in [0,1])")
      ->check(CLI::IsMember({"uint8", "float"}));
  e->add_flag("--softmax", a.softmax, "Output the probabilities (softmax) instead of the logits");
  return e;
}

int cmd_export(const ExportArgs& a) {
  // The fp32 weights on the CPU: the master weights of a run trained in fp16.
  const Loaded l = load_for_inference(a.checkpoint, "cpu", "fp32");
  OnnxOptions o;
  o.input = parse_onnx_input(a.input);
  o.softmax = a.softmax;
  o.mean = l.cfg.mean;
  o.std = l.cfg.std;
  o.class_names = l.cfg.class_names;
  // What cutrain's loader does before the graph's input, for a caller to do the same.
  const int resize = l.cfg.resize > 0 ? l.cfg.resize : l.cfg.size;
  const std::string preprocess =
      "decode as " + std::string(l.cfg.channels == 1 ? "grayscale" : "RGB") +
      ", resize the shorter side to " + std::to_string(resize) + " pixels, crop the centre " +
      std::to_string(l.cfg.size) + "x" + std::to_string(l.cfg.size);
  // Where it came from: file names, not the folders they were in (a model file is shared);
  // the run's configuration whole, which does name its data (say so in the README).
  auto file_name = [](const std::string& p) { return std::filesystem::path(p).filename().string(); };
  o.metadata = {{"preprocess", preprocess},
                {"checkpoint", file_name(l.path)},
                {"step", std::to_string(l.ckpt.step)},
                {"epoch", std::to_string(l.ckpt.epoch)},
                {"model", file_name(l.cfg.model)},
                {"training_config", l.ckpt.config_json}};
  const OnnxGraph g = onnx_model(*l.model, o);
  write_file_atomically(a.onnx, g.bytes);
  std::printf("export: %s -> %s (%.2f MB): %d nodes, %lld parameters, opset 13\n"
              "  input  %s, normalised in the graph (mean %s, std %s)\n"
              "         before it, as cutrain's loader: %s\n"
              "  output %s; class names in the metadata\n"
              "  checked by ONNX's checker and shape inference\n",
              l.path.c_str(), a.onnx.c_str(), double(g.bytes.size()) / 1e6, g.nodes,
              (long long)g.parameters, g.input.c_str(), nlohmann::json(o.mean).dump().c_str(),
              nlohmann::json(o.std).dump().c_str(), preprocess.c_str(), g.output.c_str());
  return 0;
}

// ---- report ------------------------------------------------------------------------------

CLI::App* add_report_command(CLI::App& app, ReportArgs& a) {
  auto* r = app.add_subcommand("report", "Write a run's report page (RUN/report.html: charts, "
                                         "per-class accuracy, confusion matrix, configuration)");
  r->add_option("run", a.run, "The run folder (the --out of cutrain train)")->required();
  r->add_option("--out", a.out, "Write the page here instead (its links are relative to it)");
  return r;
}

int cmd_report(const ReportArgs& a) {
  std::printf("%s\n", write_report(a.run, a.out).c_str());
  return 0;
}

}  // namespace cutrain
