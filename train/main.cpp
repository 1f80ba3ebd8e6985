// cutrain: the command line. Each subcommand is a few lines that call into the library.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <string>

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

  CLI11_PARSE(app, argc, argv);
  try {
    if (*info) return cmd_info();
    if (*describe) return cmd_describe(model, input, classes);
  } catch (const Error& e) {
    std::fprintf(stderr, "cutrain: %s\n", e.what());
    return 1;
  }
  return 0;
}
