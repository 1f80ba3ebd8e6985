// The train and report commands, and the option every list-reading command shares
// (checkpoint_commands.cpp: eval, predict and export).
#include "train/cli/commands.h"

#include <CLI/CLI.hpp>

#include <cstdio>

#include "kernels/check.h"
#include "train/report/report.h"
#include "train/run/run.h"
#include "train/setup/recipe.h"

namespace cutrain {

namespace {
const char* kCsvColumnsHelp =
    "CSV lists: the path and label columns, by header name or 0-based index (default: the "
    "columns named image, filename, file, path or image_path, and label, class, category or "
    "target); given, every list file is read as CSV";
const char* kDecodeThreadsHelp =
    "Decode threads (0: every hardware thread on the CPU, one fewer on a GPU; shared among the "
    "replicas)";
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
  t->add_option("--conv", c.conv, "conv2d kernels. auto: on a GPU each layer's passes timed "
                                 "at the start, tc against cuDNN, the faster kept (saved as the "
                                 "run's --kernel-plan); onednn on the CPU. GPU: "
                                 "tc (tensor cores, fp16; direct in fp32), direct or cudnn. CPU: "
                                 "onednn (fp32; fp16 runs direct) or direct (the reference: the "
                                 "same bits on any thread count)")
      ->group("Model");
  t->add_option("--kernel-plan", c.kernel_plan,
                "GPU: the conv kernels of each layer and pass, LAYER=FORWARD,DATA,FILTER;... "
                "(such as conv2=tc,cudnn,cudnn), over --conv for the layers named; or a run "
                "folder, whose plan (its config.json's) this run repeats, kernel for kernel")
      ->group("Model");
  t->add_option("--linear", c.linear, "linear kernels: auto, tc, direct, cublas or onednn (as "
                                     "--conv)")
      ->group("Model");
  t->add_flag("--cuda-graph,!--no-cuda-graph", c.cuda_graph,
              "On (the default) where one replica trains on a GPU: the step of a full batch "
              "is captured as two CUDA graphs and replayed each step (fewer launch gaps; the "
              "same results bit for bit). --no-cuda-graph launches every kernel from the host")
      ->group("Model");
  // optimisation
  t->add_option("--recipe", c.recipe,
                "Start from a recipe, a preset of these options that a search found: fmnist "
                "(Fashion-MNIST), or a .json file of options; options given here override its "
                "values (train/setup/recipe.h)")
      ->group("Optimization");
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
  t->add_option("--ema", c.ema,
                "Keep an exponential moving average of the weights with this decay (such as "
                "0.999; warmed up as min(DECAY, (1+t)/(10+t)) at step t), BatchNorm's running "
                "statistics averaged too; evaluated each epoch beside the weights, and best.h5 "
                "is chosen by it (0: none)")
      ->group("Optimization");
  t->add_option("--tta", c.tta, "Test-time augmentation of the evaluations: none, or flip (each "
                                "image's logits averaged with its mirror image's)")
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
  t->add_flag("--tensorboard,!--no-tensorboard", c.tensorboard,
              "On (the default): TensorBoard event files in OUT (tensorboard --logdir OUT): "
              "the step records' and evaluations' scalars, the configuration as text")
      ->group("Run");
  t->add_option("--log-every", c.log_every, "Steps between progress lines in a log")
      ->group("Run");
  t->add_option("--checkpoint-every", c.checkpoint_every,
                "Steps between extra checkpoints (0: after each epoch only)")->group("Run");
  t->add_option("--collective-timeout", c.collective_timeout,
                "Seconds a replica or an mpirun rank waits in a collective (the gradients' "
                "all-reduce, --sync-bn's sums, a count) for the others; past it the run stops "
                "with one message naming the step, the collective and the ranks it waited for, "
                "and its newest checkpoint stays for --resume (0: no limit)")
      ->capture_default_str()->group("Run");
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
  // --recipe: its values under the options given (config.json keeps the result)
  const TrainConfig cfg = apply_recipe(a.cfg, given);
  const RunSummary s = run_training(cfg, given, stdout, a.allow_data_change, a.mpi);
  return s.exit_code;
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
