// cutrain: the command line. Each subcommand is a few lines that call into the library.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "kernels/check.h"
#include "kernels/gpu.h"

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

int main(int argc, char** argv) {
  CLI::App app{"cutrain: a from-scratch C++/CUDA trainer for small image classifiers"};
  app.require_subcommand(1);
  auto* info = app.add_subcommand("info", "Show how this binary was built and the GPUs it sees");
  CLI11_PARSE(app, argc, argv);
  try {
    if (*info) return cmd_info();
  } catch (const Error& e) {
    std::fprintf(stderr, "cutrain: %s\n", e.what());
    return 1;
  }
  return 0;
}
