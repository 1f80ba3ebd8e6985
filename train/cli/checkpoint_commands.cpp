// The commands that start from a checkpoint: eval, predict and export (commands.h).
#include <csv.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "data/atomic_file.h"
#include "data/fingerprint.h"
#include "data/text_width.h"
#include "kernels/check.h"
#include "kernels/parallel.h"
#include "kernels/printable.h"
#include "train/checkpoint/checkpoint.h"
#include "train/cli/commands.h"
#include "train/cli/predict.h"
#include "train/engine/trainer.h"
#include "train/export/onnx_export.h"
#include "train/setup/classes.h"
#include "train/setup/device.h"
#include "train/setup/resolve.h"
#include "train/setup/sources.h"
#include "train/setup/val_split.h"

namespace cutrain {

namespace {

const char* kEvalDecodeThreadsHelp =
    "Decode threads (0: every hardware thread on the CPU, one fewer on a GPU)";

// --checkpoint FILE|DIR, required (resolve_checkpoint_arg, train/cli/predict.h).
void add_checkpoint_option(CLI::App* cmd, std::string& checkpoint) {
  cmd->add_option("--checkpoint", checkpoint, "A checkpoint file, or a run folder (its best.h5, "
                                              "else its newest checkpoint)")->required();
}

// --weights and --tta, one rule for eval, predict and export.
void add_weights_options(CLI::App* cmd, std::string& weights, std::string& tta) {
  cmd->add_option("--weights", weights, "auto (the weights' moving average when the checkpoint "
                                        "has one: its run's --ema), ema, or raw (the weights)")
      ->check(CLI::IsMember({"auto", "ema", "raw"}));
  cmd->add_option("--tta", tta, "Test-time flips: none, flip (each image's logits averaged with "
                                "its mirror image's) or run (as the checkpoint's run evaluated)")
      ->check(CLI::IsMember({"none", "flip", "run"}));
}

// --tta run: the checkpoint's own setting.
bool tta_flip(const std::string& tta, const TrainConfig& cfg) {
  return tta == "flip" || (tta == "run" && cfg.tta == "flip");
}

}  // namespace

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
                          const std::string& precision, const std::string& weights) {
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
  const WeightChoice choice = parse_weight_choice(weights);
  l.model = load_model(l.ckpt, l.cfg, d.dtype, in, choice);
  std::printf("%s: step %lld, epoch %lld, %s, %dx%dx%d, %d classes, %s; %s\n",
              printable(l.path).c_str(), (long long)l.ckpt.step, (long long)l.ckpt.epoch,
              printable(l.cfg.model).c_str(), l.cfg.size, l.cfg.size, l.cfg.channels, l.cfg.classes,
              weights_loaded(l.ckpt, choice), d.describe().c_str());
  return l;
}

// The lists of eval and predict: class names are the checkpoint's classes.
ListOptions checkpoint_lists(const Loaded& l, const std::string& csv_columns) {
  ListOptions o = run_list_options(l.cfg);
  o.csv_columns = csv_columns;
  o.classes_source = "the checkpoint's classes";
  return o;
}

EvalOptions eval_options(const Loaded& l, int batch, int threads, bool strict,
                         const std::string& tta) {
  EvalOptions o;
  o.tta_flip = tta_flip(tta, l.cfg);
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
  add_checkpoint_option(e, a.checkpoint);
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
  add_weights_options(e, a.weights, a.tta);
  return e;
}

int cmd_eval(const EvalArgs& a) {
  Loaded l = load_for_inference(a.checkpoint, a.device, a.precision, a.weights);
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
  const EvalOptions o = eval_options(l, a.batch, a.threads, a.strict, a.tta);
  std::printf("eval: %s (%lld images%s)\n", printable(name).c_str(), (long long)data->size(),
              o.tta_flip ? ", each with its mirror image: --tta flip" : "");
  std::fflush(stdout);
  const EvalResult r = evaluate(*l.model, data, o);
  std::printf("%s\n%s", eval_summary(r).c_str(), per_class_report(r, l.cfg.class_names).c_str());
  return 0;
}

CLI::App* add_predict_command(CLI::App& app, PredictArgs& a) {
  auto* p = app.add_subcommand("predict", "The most likely classes of images, with names and "
                                          "probabilities");
  p->option_defaults()->always_capture_default();
  add_checkpoint_option(p, a.checkpoint);
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
  add_weights_options(p, a.weights, a.tta);
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
  Loaded l = load_for_inference(a.checkpoint, a.device, a.precision, a.weights);
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
      *l.model, data, eval_options(l, a.batch, a.threads, false, a.tta), a.top, !a.csv.empty());
  auto name = [&](int k) {
    return size_t(k) < l.cfg.class_names.size() ? l.cfg.class_names[size_t(k)] : std::to_string(k);
  };
  const size_t width = column_width(l.cfg.class_names, 20);  // terminal columns, not bytes
  for (const Prediction& p : preds) {
    const Sample& s = list.samples[size_t(p.index)];
    std::printf("%s", printable(s.path).c_str());
    if (labelled)
      std::printf("  [label %s%s]", printable(name(s.label)).c_str(),
                  p.classes[0] == s.label ? "" : ", wrong");
    std::printf("\n");
    for (size_t i = 0; i < p.classes.size(); i++)
      std::printf("  %zu. %s %6.2f%%\n", i + 1, fit_to_width(name(p.classes[i]), width).c_str(),
                  100 * p.probs[i]);
  }
  if (!a.csv.empty()) {
    write_file_atomically(a.csv, predictions_csv(preds, list, labelled, l.cfg.class_names));
    std::printf("wrote every class's probability of %zu images to %s\n", preds.size(),
                printable(a.csv).c_str());
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
  add_checkpoint_option(e, a.checkpoint);
  e->add_option("--onnx", a.onnx, "The .onnx file to write")->required();
  e->add_option("--input", a.input, "What the graph takes, NHWC: uint8 (pixels 0..255) or "
                                    "float (pixels/255 in [0,1])")
      ->check(CLI::IsMember({"uint8", "float"}));
  e->add_flag("--softmax", a.softmax, "Output the probabilities (softmax) instead of the logits");
  add_weights_options(e, a.weights, a.tta);
  return e;
}

int cmd_export(const ExportArgs& a) {
  // The fp32 weights on the CPU: the master weights of a run trained in fp16.
  const Loaded l = load_for_inference(a.checkpoint, "cpu", "fp32", a.weights);
  OnnxOptions o;
  o.input = parse_onnx_input(a.input);
  o.softmax = a.softmax;
  o.tta_flip = tta_flip(a.tta, l.cfg);
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

}  // namespace cutrain
