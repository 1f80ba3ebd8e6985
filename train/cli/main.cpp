// cutrain: the command line. Each subcommand is a few lines that call into the library.
#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "data/check_data.h"
#include "data/fashion_mnist.h"
#include "data/pack.h"
#include "data/text_width.h"
#include "kernels/check.h"
#include "kernels/gpu.h"
#include "kernels/printable.h"
#include "nn/model.h"
#include "train/cli/cli.h"
#include "train/cli/commands.h"
#include "train/cli/describe.h"
#include "train/cli/progress.h"
#include "train/cli/step_plan.h"
#include "train/replicas/mpi.h"
#include "train/replicas/peer_access.h"
#include "train/setup/config.h"
#include "train/setup/device.h"

using namespace cutrain;

static int cmd_info() {
  std::printf("cutrain, built %s\n", cuda_compiled() ? "with CUDA" : "CPU-only");
  if (gpu_usable()) {
    for (int d = 0; d < gpu_count(); d++) std::printf("  cuda:%d  %s\n", d, gpu_name(d).c_str());
    if (gpu_count() > 1) {  // which replicas of --devices 0,1,... copy peer to peer
      std::vector<int> all;
      for (int d = 0; d < gpu_count(); d++) all.push_back(d);
      std::fputs(format_peer_matrix(enable_peer_access(all)).c_str(), stdout);
    }
  } else {
    std::printf("  no GPU: %s\n", gpu_unavailable_reason().c_str());
  }
  // What `cutrain train` would use: the same choice the trainer makes (make demo reads it).
  const RunDevice run = choose_device("auto", "auto");
  std::printf("  training (--device auto): %s\n", run.describe().c_str());
  const std::string prefix = "cutrain: running on the CPU: ";
  if (run.notice.rfind(prefix, 0) == 0)
    std::printf("  not on a GPU because: %s\n", run.notice.substr(prefix.size()).c_str());
  return 0;
}

// "28x28x1" -> H, W, C.
static void parse_input_size(const std::string& s, ModelOptions& opt) {
  char extra = 0;
  const int n = std::sscanf(s.c_str(), "%dx%dx%d%c", &opt.H, &opt.W, &opt.C, &extra);
  USER_CHECK(n == 3 && opt.H > 0 && opt.W > 0 && opt.C > 0 && opt.H <= kMaxSize &&
                 opt.W <= kMaxSize && opt.C <= 4096,
        "--input must be HxWxC with sizes in [1, 4096], like 28x28x1; got '" << s << "'");
}

static int cmd_describe(const std::string& model, const std::string& input, int classes,
                        bool json, bool step, StepPlanOptions plan, const std::string& gpu) {
  ModelOptions opt;
  parse_input_size(input, opt);
  opt.classes = classes;
  if (step) {
    USER_CHECK(opt.H == opt.W, "describe --step: the input must be square (train's --size), got "
                                   << input);
    USER_CHECK(!json, "describe: --json describes the model; --step prints the step's plan");
    const Roofline& roof = roofline_of(gpu);  // an unknown name: an error before the walk
    plan.model = model;
    plan.size = opt.H;
    plan.channels = opt.C;
    plan.classes = classes;
    if (plan.measure && gpu_usable()) plan.device = Device::cuda;
    const StepPlan walked = step_plan(plan);
    std::fputs(step_plan_text(walked.plan, plan, roof).c_str(), stdout);
    if (!walked.held)
      std::printf("(the host waited for the GPU while queuing the step: the measured times "
                  "include that wait)\n");
    return 0;
  }
  const auto m = build_model(load_model_spec(model), opt);
  std::fputs(json ? model_json(*m).c_str() : m->table().c_str(), stdout);
  return 0;
}

static int cmd_import_fashion_mnist(const std::string& from, const std::string& out,
                                    ImportOptions opt) {
  std::printf("import-fashion-mnist: %s -> %s\n", printable(from).c_str(), printable(out).c_str());
  std::fflush(stdout);  // before the progress lines on stderr
  opt.progress = Progress("encoded", "images");
  const ImportSummary s = import_fashion_mnist(from, out, opt);
  if (s.reused) {
    std::printf("  already complete (%lld train, %lld test images): kept; --force re-encodes\n",
                (long long)s.train, (long long)s.test);
  } else {
    std::printf("  wrote %lld + %lld JPEGs (%.1f MB) in %.1f s with %d thread%s\n",
                (long long)s.train, (long long)s.test, s.jpeg_bytes / 1e6, s.seconds, s.threads,
                s.threads == 1 ? "" : "s");
  }
  std::printf("  %s\n  %s\n  %s\n", printable(s.train_list).c_str(), printable(s.test_list).c_str(),
              printable(s.classes_file).c_str());
  return 0;
}

// cutrain pack LIST OUT.h5 --size S: every image decoded once into an HDF5 pack (data/pack.h).
struct PackArgs {
  std::string list, out, csv_columns;
  PackOptions opt;
};

static CLI::App* add_pack_command(CLI::App& app, PackArgs& a) {
  auto* pack = app.add_subcommand(
      "pack", "Decode every image of a list once into an HDF5 pack of SxS pixels");
  pack->add_option("list", a.list, "Image list, CSV list, or a folder with a folder per class")
      ->required();
  pack->add_option("out", a.out, "The pack to write, e.g. train.h5")->required();
  pack->add_option("--size", a.opt.size, "Stored images are SxS: shorter side to S, centre crop")
      ->check(CLI::Range(1, kMaxSize))
      ->required();
  pack->add_option("--channels", a.opt.channels, "1 or 3")
      ->check(CLI::IsMember({1, 3}))
      ->capture_default_str();
  pack->add_option("--threads", a.opt.threads, "Decode threads (0: hardware threads)")
      ->check(CLI::Range(0, kMaxThreads))
      ->capture_default_str();
  pack->add_flag("--strict", a.opt.strict, "Stop at the first bad file instead of skipping it");
  add_csv_columns_option(pack, a.csv_columns);
  return pack;
}

static int cmd_pack(const PackArgs& a) {
  ListOptions lists;
  lists.csv_columns = a.csv_columns;
  const ImageList list = read_images(a.list, lists);
  std::printf("pack: %s (%zu images) -> %s at %dx%dx%d\n", printable(a.list).c_str(),
              list.samples.size(), printable(a.out).c_str(), a.opt.size, a.opt.size,
              a.opt.channels);
  std::fflush(stdout);  // before the progress lines on stderr
  const PackSummary s = write_pack(list, a.out, a.opt, Progress("packed", "images"));
  std::printf("  packed %lld of %lld images: %.1f MB on disk, %.1f s (%.0f images/s)\n",
              (long long)s.packed, (long long)s.listed, s.bytes_on_disk / 1e6, s.seconds,
              double(s.listed) / s.seconds);
  if (!s.bad.empty()) {
    std::printf("  skipped %zu bad files:\n", s.bad.size());
    for (size_t i = 0; i < s.bad.size() && i < 10; i++)
      std::printf("    %s: %s\n", printable(s.bad[i].name).c_str(),
                  printable(s.bad[i].message).c_str());
    if (s.bad.size() > 10) std::printf("    ... and %zu more\n", s.bad.size() - 10);
    std::printf("  all of them are in the pack's bad_files and bad_reasons datasets\n");
  }
  return 0;
}

static int cmd_check_data(const std::string& list_path, const ListOptions& lists,
                          const ImageSpec& spec, int threads, const std::string& bad_out) {
  const ImageList list = read_images(list_path, lists);
  std::printf("check-data: %s: %zu images, decoding to %dx%dx%d\n", printable(list_path).c_str(),
              list.samples.size(), spec.size, spec.size, spec.channels);
  std::fflush(stdout);  // before the progress lines on stderr
  const CheckReport r = check_data(list, spec, threads, Progress("decoded", "images"));
  std::printf("  %lld good, %zu bad, %.1f s (%.0f images/s)\n", (long long)r.good, r.bad.size(),
              r.seconds, double(r.images) / r.seconds);
  for (const auto& kv : r.bad_by_kind)
    std::printf("  %-10s %lld\n", image_error_name(kv.first), (long long)kv.second);
  for (size_t i = 0; i < r.bad.size() && i < 10; i++)
    std::printf("    %s: %s\n", printable(r.bad[i].name).c_str(),
                printable(r.bad[i].message).c_str());
  if (r.bad.size() > 10) std::printf("    ... and %zu more\n", r.bad.size() - 10);
  if (!bad_out.empty() && !r.bad.empty()) {
    FILE* f = std::fopen(bad_out.c_str(), "w");
    USER_CHECK(f, "cannot write " << bad_out);
    for (const BadFile& b : r.bad)
      std::fprintf(f, "%s\t%s\t%s\n", b.name.c_str(), image_error_name(b.kind), b.message.c_str());
    std::fclose(f);
    std::printf("  all bad files listed in %s\n", printable(bad_out).c_str());
  }
  std::printf("  classes (good images):\n");
  const size_t name_width = column_width(list.class_names, 20);  // terminal columns
  for (size_t c = 0; c < r.histogram.size(); c++)
    std::printf("    %3zu %s %8lld\n", c,
                fit_to_width(c < list.class_names.size() ? list.class_names[c] : "", name_width)
                    .c_str(),
                (long long)r.histogram[c]);
  const double imb = class_imbalance(r.histogram);
  std::printf("  imbalance (largest / smallest class): %.2f%s\n", imb,
              imb > 1.5 ? "  <- consider cutrain train --balance sampler (re-sampling) or "
                          "--balance loss (re-weighting)"
                        : "");
  return r.bad.empty() ? 0 : 2;
}

int main(int argc, char** argv) {
  // Started by mpirun: MPI first (train/replicas/mpi.h); `cutrain train` is then one rank of
  // the run. Alone, MPI is never touched.
  const std::unique_ptr<Mpi> mpi = Mpi::start_if_launched(&argc, &argv);
  CLI::App app{"cutrain: a from-scratch C++/CUDA trainer for small image classifiers"};
  app.require_subcommand(1);
  auto* info = app.add_subcommand("info", "Show how this binary was built and the GPUs it sees");

  auto* describe = app.add_subcommand("describe", "Build a model and print its layer table");
  std::string model = "default", input = "28x28x1";
  int classes = 10;
  describe->add_option("model", model, "A built-in model (default, resnet) or a model file")
      ->capture_default_str();
  describe->add_option("--input", input, "Input image size HxWxC")->capture_default_str();
  describe->add_option("--classes", classes, "Number of classes")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  bool describe_json = false;
  describe->add_flag("--json", describe_json,
                     "The table as JSON, with every parameter's name and shape "
                     "(train/cli/describe.h)");
  bool describe_step = false;
  StepPlanOptions step_opt;
  std::string step_gpu = "h100";
  describe->add_flag("--step", describe_step,
                     "Every launch of one training step on a GPU, in order, with its bytes, "
                     "flops and ideal time on --gpu's roofline, then the totals (walked on the "
                     "CPU; train/cli/step_plan.h)");
  describe->add_option("--batch", step_opt.batch, "--step: images per step")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  describe->add_option("--precision", step_opt.precision, "--step: fp16 or fp32")
      ->check(CLI::IsMember({"fp16", "fp32"}))
      ->capture_default_str();
  describe->add_option("--gpu", step_gpu, "--step: the roofline of h100, h200, a100 or l4")
      ->capture_default_str();
  describe->add_option("--optimizer", step_opt.optimizer, "--step: sgd, nesterov or adamw")
      ->capture_default_str();
  describe->add_option("--conv", step_opt.conv, "--step: the GPU's conv2d kernels (as train's)")
      ->capture_default_str();
  describe->add_option("--linear", step_opt.linear, "--step: the GPU's linear kernels")
      ->capture_default_str();
  describe->add_flag("--measure", step_opt.measure,
                     "--step on a GPU: run the step there and time each launch (events, the "
                     "stream held while the step is queued), beside the ideal times");
  describe->add_option("--kernel-plan", step_opt.kernel_plan,
                       "--step: per-layer conv kernels, LAYER=FORWARD,DATA,FILTER;... (train's)");

  auto* import_fm = app.add_subcommand(
      "import-fashion-mnist", "Turn the Fashion-MNIST IDX files into JPEGs plus train/test lists");
  std::string import_from = fashion_mnist_idx_dir(), import_out = "data/fashion-mnist";
  ImportOptions import_opt;
  import_opt.threads = int(std::thread::hardware_concurrency());
  import_fm->add_option("--from", import_from, "Folder of the IDX files")->capture_default_str();
  import_fm->add_option("--out", import_out, "Output folder")->capture_default_str();
  import_fm->add_option("--threads", import_opt.threads, "Encoder threads (0: hardware threads)")
      ->check(CLI::Range(0, kMaxThreads))
      ->capture_default_str();
  import_fm->add_flag("--force", import_opt.force, "Re-encode even when a complete import exists");

  auto* check = app.add_subcommand(
      "check-data", "Decode every image of a list; report bad files and the class histogram");
  std::string check_list, check_bad;
  int check_threads = 0;
  ListOptions check_lists;
  ImageSpec check_spec;
  check->add_option("list", check_list, "Image list, CSV list, or a folder with a folder per class")
      ->required();
  check->add_option("--classes", check_lists.num_classes,
                    "Number of classes (0: from classes.txt, the class names or the labels)")
      ->check(CLI::Range(0, 1 << 20));
  add_csv_columns_option(check, check_lists.csv_columns);
  check->add_option("--size", check_spec.size, "Decode to SxS")
      ->check(CLI::Range(1, kMaxSize))
      ->capture_default_str();
  check->add_option("--channels", check_spec.channels, "1 or 3")
      ->check(CLI::IsMember({1, 3}))
      ->capture_default_str();
  check->add_option("--threads", check_threads, "Decode threads (0: hardware threads - 1)")
      ->check(CLI::Range(0, kMaxThreads));
  check->add_option("--bad-files", check_bad, "Write every bad file to this file");

  PackArgs pack_args;
  auto* pack = add_pack_command(app, pack_args);

  TrainArgs train_args;
  train_args.mpi = mpi.get();
  auto* train = add_train_command(app, train_args);
  EvalArgs eval_args;
  auto* eval = add_eval_command(app, eval_args);
  PredictArgs predict_args;
  auto* predict = add_predict_command(app, predict_args);
  ExportArgs export_args;
  auto* export_cmd = add_export_command(app, export_args);
  ReportArgs report_args;
  auto* report = add_report_command(app, report_args);

  const int parsed = parse_command_line(app, argc, argv);
  if (parsed >= 0) return parsed;
  const int code = run_reporting_errors([&] {
    if (*info) return cmd_info();
    if (*describe)
      return cmd_describe(model, input, classes, describe_json, describe_step, step_opt, step_gpu);
    if (*import_fm) return cmd_import_fashion_mnist(import_from, import_out, import_opt);
    if (*pack) return cmd_pack(pack_args);
    if (*check) return cmd_check_data(check_list, check_lists, check_spec, check_threads, check_bad);
    if (*train) return cmd_train(train_args);
    if (*eval) return cmd_eval(eval_args);
    if (*predict) return cmd_predict(predict_args);
    if (*export_cmd) return cmd_export(export_args);
    if (*report) return cmd_report(report_args);
    return 0;
  });
  // A rank that failed (its error printed above) stops every rank: the others would wait for
  // it in their next collective. A clean stop on a signal is taken by every rank together.
  if (mpi && mpi->size() > 1 && code != 0 && code != 128 + SIGINT && code != 128 + SIGTERM) {
    std::fprintf(stderr, "cutrain: rank %d of %d failed (exit %d): stopping every rank\n",
                 mpi->rank(), mpi->size(), code);
    mpi->abort(code);
  }
  return code;
}
