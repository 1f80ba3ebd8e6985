// cutrain: the command line. Each subcommand is a few lines that call into the library.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <string>
#include <thread>

#include <unistd.h>

#include "data/fashion_mnist.h"
#include "kernels/check.h"
#include "kernels/gpu.h"
#include "nn/model.h"

using namespace cutrain;

static int cmd_info() {
  std::printf("cutrain, built %s\n", cuda_compiled() ? "with CUDA" : "CPU-only");
  if (gpu_usable()) {
    for (int d = 0; d < gpu_count(); d++) std::printf("  cuda:%d  %s\n", d, gpu_name(d).c_str());
  } else {
    std::printf("  no GPU: %s\n", gpu_unavailable_reason().c_str());
  }
  return 0;
}

// "28x28x1" -> H, W, C.
static void parse_input_size(const std::string& s, ModelOptions& opt) {
  char extra = 0;
  const int n = std::sscanf(s.c_str(), "%dx%dx%d%c", &opt.H, &opt.W, &opt.C, &extra);
  CHECK(n == 3 && opt.H > 0 && opt.W > 0 && opt.C > 0,
        "--input must be HxWxC with positive sizes, like 28x28x1; got '" << s << "'");
}

static int cmd_describe(const std::string& model, const std::string& input, int classes) {
  ModelOptions opt;
  parse_input_size(input, opt);
  opt.classes = classes;
  std::fputs(build_model(load_model_spec(model), opt)->table().c_str(), stdout);
  return 0;
}

// On a terminal one line redrawn in place; in a log file a line every tenth of the way.
static void print_import_progress(int64_t done, int64_t total) {
  static int64_t last_tenth = -1;
  if (isatty(fileno(stderr))) {
    std::fprintf(stderr, "\r  encoded %lld / %lld images%s", (long long)done, (long long)total,
                 done == total ? "\n" : "");
  } else if (done * 10 / total != last_tenth) {
    last_tenth = done * 10 / total;
    std::fprintf(stderr, "  encoded %lld / %lld images\n", (long long)done, (long long)total);
  }
}

static int cmd_import_fashion_mnist(const std::string& from, const std::string& out,
                                    ImportOptions opt) {
  std::printf("import-fashion-mnist: %s -> %s\n", from.c_str(), out.c_str());
  opt.progress = print_import_progress;
  const ImportSummary s = import_fashion_mnist(from, out, opt);
  if (s.reused) {
    std::printf("  already complete (%lld train, %lld test images): kept; --force re-encodes\n",
                (long long)s.train, (long long)s.test);
  } else {
    std::printf("  wrote %lld + %lld JPEGs (%.1f MB) in %.1f s with %d thread%s\n",
                (long long)s.train, (long long)s.test, s.jpeg_bytes / 1e6, s.seconds, s.threads,
                s.threads == 1 ? "" : "s");
  }
  std::printf("  %s\n  %s\n  %s\n", s.train_list.c_str(), s.test_list.c_str(),
              s.classes_file.c_str());
  return 0;
}

int main(int argc, char** argv) {
  CLI::App app{"cutrain: a from-scratch C++/CUDA trainer for small image classifiers"};
  app.require_subcommand(1);
  auto* info = app.add_subcommand("info", "Show how this binary was built and the GPUs it sees");

  auto* describe = app.add_subcommand("describe", "Build a model and print its layer table");
  std::string model = "default", input = "28x28x1";
  int classes = 10;
  describe->add_option("model", model, "A built-in model (default, resnet) or a model file")
      ->capture_default_str();
  describe->add_option("--input", input, "Input image size HxWxC")->capture_default_str();
  describe->add_option("--classes", classes, "Number of classes")->capture_default_str();

  auto* import_fm = app.add_subcommand(
      "import-fashion-mnist", "Turn the Fashion-MNIST IDX files into JPEGs plus train/test lists");
  std::string import_from = kFashionMnistDir, import_out = "data/fashion-mnist";
  ImportOptions import_opt;
  import_opt.threads = int(std::thread::hardware_concurrency());
  import_fm->add_option("--from", import_from, "Folder of the IDX files")->capture_default_str();
  import_fm->add_option("--out", import_out, "Output folder")->capture_default_str();
  import_fm->add_option("--threads", import_opt.threads, "Encoder threads")->capture_default_str();
  import_fm->add_flag("--force", import_opt.force, "Re-encode even when a complete import exists");

  CLI11_PARSE(app, argc, argv);
  try {
    if (*info) return cmd_info();
    if (*describe) return cmd_describe(model, input, classes);
    if (*import_fm) return cmd_import_fashion_mnist(import_from, import_out, import_opt);
  } catch (const Error& e) {
    std::fprintf(stderr, "cutrain: %s\n", e.what());
    return 1;
  }
  return 0;
}
