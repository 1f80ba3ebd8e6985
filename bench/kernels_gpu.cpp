// bench_kernels_gpu: cutrain's CUDA kernels, each checked against its CPU reference and then
// timed, next to the ceilings of the same device measured in the same run and next to
// cuDNN/cuBLAS on the same shapes. (CUDA builds, and the simulator's: make SIM=1 builds
// build/sim/bin/bench_kernels_gpu, whose checks are real and whose times are not.)
//
//   ceilings        a 1 GiB device-to-device copy (GB/s, bytes read + written) and a cuBLAS
//                   fp16 GEMM 8192^3 (TFLOP/s); not under the simulator
//   conv, linear    every distinct layer shape of the models (default: `default` and
//                   `resnet`, 28x28x1, batch 256): forward, dgrad, wgrad on every rung of the
//                   conv ladder (v1 direct .. v5 async, kernels/ladder/README.md) and cuDNN,
//                   linear on direct, tc and cuBLAS, fp16 (bench/gpu_gemm_layers.h)
//   memory-bound    relu, add, accumulate, batchnorm+relu, input conversion, sum, casts at
//                   64M elements, f16 and f32 (bench/gpu_memory_bound.h)
//   targets         PASS/FAIL: the elementwise, BN and cast kernels at >= 70% of the copy
//                   bandwidth; tc conv forward within 2x of cuDNN on every layer
//
// Timing: CUDA events around back-to-back calls after warm-up, the median of --repeats
// (bench/gpu_timing.h). A kernel that fails its check is reported WRONG and not timed; the
// program then exits 1. With no usable GPU it says why and exits 0, so it can run anywhere.
//
//   bin/bench_kernels_gpu                               everything
//   bin/bench_kernels_gpu --only "conv forward"         rows whose key contains the text
//   bin/bench_kernels_gpu --only "conv wgrad v2 gemm default:conv4"   one rung, pass, layer
//   bin/bench_kernels_gpu --out r.md --json r.json      also write the tables and the rows
//   bin/bench_kernels_gpu --predict [--gpu h100]        the ladders' predicted costs
//                                                       (bench/ladder_predict.h), no GPU needed
// Row keys: "conv forward v4 tc default:conv2 resnet:block1.conv1 ...", "linear wgrad cublas
// ...", "relu backward f16", "bn forward +relu f32", "input normalize f16", "cast f32->f16 -".
#include <CLI/CLI.hpp>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#ifdef CUTRAIN_CUDNN
#include <cudnn.h>
#endif

#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "bench/gpu_gemm_layers.h"
#include "bench/gpu_memory_bound.h"
#include "bench/gpu_timing.h"
#include "bench/ladder_predict.h"
#include "kernels/vendor.h"

#ifndef CUTRAIN_COMMIT  // the Makefile passes `git describe --always --dirty`
#define CUTRAIN_COMMIT "unknown"
#endif

using namespace cutrain;
using nlohmann::json;

namespace {

std::string version_text(int v) {  // CUDA's 13000 -> "13.0"
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

// "580.159.04" from the kernel module's version line, the number nvidia-smi shows; where that
// file is missing (a sandboxed host: seen on an H200 under gVisor), nvidia-smi's own answer.
std::string driver_version() {
  std::ifstream f("/proc/driver/nvidia/version");
  std::string line;
  std::getline(f, line);
  const size_t at = line.find("Kernel Module");
  std::string v;
  if (at != std::string::npos) {
    std::istringstream in(line.substr(at + 13));
    in >> v;
    return v;
  }
  if (FILE* p = popen("nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null", "r")) {
    char buf[64] = {0};
    if (std::fgets(buf, sizeof buf, p)) v = buf;
    pclose(p);
  }
  while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.pop_back();
  return v.empty() ? "unknown" : v;
}

json device_info() {
  cudaDeviceProp p;
  CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
  int driver = 0, runtime = 0;
  CUDA_CHECK(cudaDriverGetVersion(&driver));
  CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  std::string cublas = "the simulator's (plain loops)";  // sim/cublas.cpp: no version
#ifndef CUTRAIN_SIM
  int cb[3] = {0, 0, 0};
  cublasGetProperty(MAJOR_VERSION, &cb[0]);
  cublasGetProperty(MINOR_VERSION, &cb[1]);
  cublasGetProperty(PATCH_LEVEL, &cb[2]);
  cublas = std::to_string(cb[0]) + "." + std::to_string(cb[1]) + "." + std::to_string(cb[2]);
#endif
  std::string cudnn = "not in this build";
#ifdef CUTRAIN_CUDNN
  const size_t v = cudnnGetVersion();  // 91900 = 9.19.0
  cudnn = std::to_string(v / 10000) + "." + std::to_string(v % 10000 / 100) + "." +
          std::to_string(v % 100);
#endif
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  return {{"date", date},
          {"gpu", p.name},
          {"sm", std::to_string(p.major) + "." + std::to_string(p.minor)},
          {"multiprocessors", p.multiProcessorCount},
          {"memory_gib", double(p.totalGlobalMem) / (1 << 30)},
          {"l2_mib", double(p.l2CacheSize) / (1 << 20)},
          {"driver", driver_version()},
          {"cuda_driver", version_text(driver)},
          {"cuda_runtime", version_text(runtime)},
          {"cublas", cublas},
          {"cudnn", cudnn},
          {"commit", CUTRAIN_COMMIT}};
}

void measure_ceilings(BenchContext& ctx) {
  if (kSimulated) {  // a 1 GiB copy and an 8192^3 GEMM would take the simulator hours
    ctx.report.print("\n## Ceilings: not measured under the simulator (no shares of them "
                     "below)\n");
    return;
  }
  cudaStream_t st = ctx.stream;
  const size_t bytes = size_t(1) << 30;
  DeviceBuffer src(bytes, 0, st), dst(bytes, 0, st);
  memset_async(src.data(), 0x3c, bytes, st);
  const double copy_ms =
      time_gpu(st, ctx.timing, [&] { copy_async(dst.data(), src.data(), bytes, st); });
  ctx.ceilings.copy_gbps = 2.0 * double(bytes) / (copy_ms * 1e6);  // read + written

  const int n = 8192;  // random data: zeros draw less power and run faster
  DeviceArray<half_t> a(random_vec<half_t>(size_t(n) * n, 51), st),
      b(random_vec<half_t>(size_t(n) * n, 52), st), c(size_t(n) * n, st);
  const double gemm_ms =
      time_gpu(st, ctx.timing, [&] { gemm_f16_cublas(n, n, n, a.get(), b.get(), c.get(), st); });
  ctx.ceilings.gemm_tflops = 2.0 * n * n * double(n) / (gemm_ms * 1e9);

  ctx.report.print("\n## Ceilings (measured in this run)\n\n| what | ms | rate |\n"
                   "| --- | --- | --- |\n"
                   "| device-to-device copy, 1 GiB (cudaMemcpyAsync) | %.3f | %.0f GB/s |\n"
                   "| cuBLAS fp16 GEMM 8192^3, fp32 accumulate | %.3f | %.1f TFLOP/s |\n",
                   copy_ms, ctx.ceilings.copy_gbps, gemm_ms, ctx.ceilings.gemm_tflops);
}

// One PASS/FAIL line: every value must reach `need`; the worst one is named, shown as
// printf(fmt, value * scale).
json target(Report& r, const char* what, const std::vector<std::pair<std::string, double>>& v,
            double need, double scale, const char* fmt) {
  if (v.empty()) {
    r.print("- NOT MEASURED: %s (filtered out, or no library to compare with)\n", what);
    return {{"target", what}, {"result", "not measured"}};
  }
  auto worst = v.begin();
  for (auto it = v.begin(); it != v.end(); ++it)
    if (it->second < worst->second) worst = it;
  const bool pass = worst->second >= need;
  char value[32];
  std::snprintf(value, sizeof value, fmt, worst->second * scale);
  r.print("- %s: %s; worst %s at %s (%zu measured)\n", pass ? "PASS" : "FAIL", what,
          worst->first.c_str(), value, v.size());
  return {{"target", what}, {"result", pass ? "PASS" : "FAIL"}, {"worst", worst->first},
          {"worst_value", worst->second}, {"count", v.size()}};
}

void write_file(const std::string& path, const std::string& text) {
  if (path.empty()) return;
  std::ofstream f(path);
  f << text;
  CHECK(f.good(), "cannot write " << path);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_kernels_gpu: cutrain's CUDA kernels against the device's ceilings and "
               "cuDNN/cuBLAS"};
  BenchContext ctx;
  std::vector<std::string> models = {"default", "resnet"};
  int batch = 256, check_batch = 5;
  int64_t n = int64_t(1) << 26;
  std::string out, json_out, gpu = "h100";
  bool predict = false;
  app.add_option("--repeats", ctx.timing.repeats, "Timed repeats (the median is shown)")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--warmup", ctx.timing.warmup, "Untimed calls before timing")
      ->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--batch", batch, "Batch size of the conv and linear layers")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--check-batch", check_batch, "Batch at which they are checked on the CPU")
      ->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--models", models, "Built-in models or model files, comma-separated")
      ->delimiter(',')->capture_default_str();
  app.add_option("--elements", n, "Size of the memory-bound kernels")
      ->capture_default_str()->check(CLI::Range(int64_t(64), int64_t(1) << 30));
  app.add_option("--only", ctx.only, "Run only the rows whose key contains this text");
  app.add_option("--out", out, "Also write the markdown report to this file");
  app.add_option("--json", json_out, "Also write the device, ceilings and rows as JSON");
  app.add_flag("--predict", predict,
               "Print the kernel ladders' predicted costs on --gpu (kernels/ladder/README.md's "
               "tables) and exit; needs no GPU");
  app.add_option("--gpu", gpu, "The GPU whose data-sheet peaks --predict uses")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  Report& r = ctx.report;
  try {
    if (predict) {
      std::fputs(ladder_predictions(roofline_of(gpu)).c_str(), stdout);
      return 0;
    }
    if (!gpu_usable()) {
      r.print("bench_kernels_gpu: no usable GPU (%s): nothing measured\n",
              gpu_unavailable_reason().c_str());
      write_file(out, r.markdown());
      write_file(json_out, json{{"skipped", gpu_unavailable_reason()}}.dump(2) + "\n");
      return 0;
    }
    Stream stream(0);
    ctx.stream = stream.get();
    const json device = device_info();
    r.print("# bench_kernels_gpu, %s\n\n", device["date"].get<std::string>().c_str());
    r.print("%s (sm_%s, %d SMs, %.0f GiB, L2 %.0f MiB); driver %s (CUDA %s), runtime %s, "
            "cuBLAS %s, cuDNN %s; commit %s\n",
            device["gpu"].get<std::string>().c_str(), device["sm"].get<std::string>().c_str(),
            device["multiprocessors"].get<int>(), device["memory_gib"].get<double>(),
            device["l2_mib"].get<double>(), device["driver"].get<std::string>().c_str(),
            device["cuda_driver"].get<std::string>().c_str(),
            device["cuda_runtime"].get<std::string>().c_str(),
            device["cublas"].get<std::string>().c_str(),
            device["cudnn"].get<std::string>().c_str(), CUTRAIN_COMMIT);
    r.print("median of %d after %d warm-up calls%s%s\n", ctx.timing.repeats, ctx.timing.warmup,
            ctx.only.empty() ? "" : "; only rows matching ", ctx.only.c_str());
    if (kSimulated)
      r.print("\nSimulated device (make SIM=1, sim/README.md): every check against the CPU "
              "reference is real; every time is the simulator's: simulated, meaningless.\n");

    measure_ceilings(ctx);
    bench_gemm_layers(ctx, models, batch, check_batch);
    bench_memory_bound(ctx, n);

    r.print("\n## Targets\n\n");
    json targets = json::array();
    targets.push_back(target(r, "elementwise, BN and cast kernels at >= 70% of copy bandwidth",
                             ctx.bandwidth_ratio, 0.70, 100, "%.0f%% of copy"));
    targets.push_back(target(r, "tc conv forward within 2x of cuDNN on every layer",
                             ctx.tc_conv_vs_cudnn, 0.5, 1, "%.2fx cuDNN's speed"));
    if (r.failures > 0)
      r.print("\n%d kernel(s) gave WRONG results (see the check column): exit 1\n", r.failures);

    write_file(out, r.markdown());
    write_file(json_out,
               json{{"program", "bench_kernels_gpu"}, {"device", device},
                    {"options", {{"repeats", ctx.timing.repeats}, {"warmup", ctx.timing.warmup},
                                 {"batch", batch}, {"check_batch", check_batch},
                                 {"models", models}, {"elements", n}, {"only", ctx.only}}},
                    {"ceilings", {{"copy_gbps", ctx.ceilings.copy_gbps},
                                  {"gemm_f16_tflops", ctx.ceilings.gemm_tflops}}},
                    {"rows", r.rows()}, {"targets", targets}, {"wrong", r.failures}}
                       .dump(2) + "\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_kernels_gpu: %s\n", e.what());
    return 1;
  }
  return r.failures > 0 ? 1 : 0;
}
