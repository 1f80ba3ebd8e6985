// bench_cpu_kernels: the CPU reference kernels of a model's conv and linear layers, timed on
// 1 thread and on N threads, side by side; then one whole training step (forward, loss,
// backward) through nn/, so the share of everything else (BN, ReLU, pooling, loss, tape)
// shows too.
//
// For each conv and linear layer at batch B: forward, backward data and backward filter
// (with bias), each the median of R runs after one warm-up, in ms and GFLOP/s (2 flops per
// multiply-add; backward data and filter cost as much as the forward each). Before timing, the
// N-thread results are compared with the 1-thread results bit for bit (the kernels promise
// that: kernels/README.md); a difference stops the bench.
//
//   bin/bench_cpu_kernels                        default model, batch 64, f32, N = all cores
//   bin/bench_cpu_kernels --threads 2 --dtype f16 --repeats 9
//   OMP_NUM_THREADS=2 bin/bench_cpu_kernels      the same N
#include <CLI/CLI.hpp>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "bench/model_layers.h"
#include "kernels/check.h"
#include "kernels/conv2d.h"
#include "kernels/linear.h"
#include "kernels/rng.h"
#include "nn/model.h"

using namespace cutrain;
using Clock = std::chrono::steady_clock;

namespace {

double cpu_seconds() {  // CPU time of the whole process: every thread, spinning included
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

struct Timing {
  double ms = 0;     // median wall-clock time of one run
  double cores = 0;  // CPU time / wall time over the timed runs: the cores this process got.
                     // N threads can only beat 1 when this is near N; on a shared machine
                     // other work may leave fewer.
};

Timing time_runs(int repeats, const std::function<void()>& f) {
  f();  // warm-up: caches, page faults, the OpenMP thread pool
  std::vector<double> ms;
  double wall = 0, cpu = 0;
  for (int i = 0; i < repeats; i++) {
    const auto t0 = Clock::now();
    const double c0 = cpu_seconds();
    f();
    cpu += cpu_seconds() - c0;
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    wall += ms.back() / 1000;
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], cpu / wall};
}

template <typename T> std::vector<T> random_vec(size_t n, uint64_t seed) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; i++) v[i] = T(rng_uniform(seed, i) * 2 - 1);
  return v;
}

template <typename T> bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

struct PassTimes {
  Timing t[3][2];  // [forward, backward data, backward filter][1 thread, N threads]
};

// Validates (N threads == 1 thread, bit for bit), then times the three passes of one layer.
template <typename T> PassTimes time_layer(const BenchLayer& L, int threads, int repeats) {
  const Conv2dShape& s = L.s;
  const size_t nx = size_t(s.N) * s.H * s.W * s.C, nw = size_t(s.K) * s.R * s.S * s.C;
  const size_t ny = size_t(s.N) * s.P() * s.Q() * s.K, K = size_t(s.K);
  const std::vector<T> x = random_vec<T>(nx, 1), w = random_vec<T>(nw, 2), b = random_vec<T>(K, 3),
                       dy = random_vec<T>(ny, 4);
  std::vector<T> y(ny), dx(nx), dw(nw), db(K);
  const std::function<void()> pass[3] = {
      [&] {
        if (L.conv) conv2d_forward_cpu<T>(s, x.data(), w.data(), b.data(), y.data());
        else linear_forward_cpu<T>(s.N, s.C, s.K, x.data(), w.data(), b.data(), y.data());
      },
      [&] {
        if (L.conv) conv2d_backward_data_cpu<T>(s, dy.data(), w.data(), dx.data());
        else linear_backward_cpu<T>(s.N, s.C, s.K, x.data(), w.data(), dy.data(), dx.data(),
                                    nullptr, nullptr);
      },
      [&] {
        if (L.conv) conv2d_backward_filter_cpu<T>(s, x.data(), dy.data(), dw.data(), db.data());
        else linear_backward_cpu<T>(s.N, s.C, s.K, x.data(), w.data(), dy.data(), nullptr,
                                    dw.data(), db.data());
      }};
  // validate: outputs from zero (the backward passes accumulate) on 1 and on N threads
  std::vector<T> ref[4];
  for (int t : {1, threads}) {
    omp_set_num_threads(t);
    std::fill(dx.begin(), dx.end(), T(0.0f));
    std::fill(dw.begin(), dw.end(), T(0.0f));
    std::fill(db.begin(), db.end(), T(0.0f));
    for (const auto& f : pass) f();
    if (t == 1) {
      ref[0] = y, ref[1] = dx, ref[2] = dw, ref[3] = db;
      continue;
    }
    CHECK(same_bits(y, ref[0]) && same_bits(dx, ref[1]) && same_bits(dw, ref[2]) &&
              same_bits(db, ref[3]),
          L.name << ": " << threads << " threads do not give the 1-thread result bit for bit");
  }
  PassTimes pt;
  for (int ti = 0; ti < 2; ti++) {
    omp_set_num_threads(ti == 0 ? 1 : threads);
    for (int p = 0; p < 3; p++) pt.t[p][ti] = time_runs(repeats, pass[p]);
  }
  return pt;
}

// One training step of the whole model at batch N: forward (training mode), loss, backward.
// Returns the median ms on 1 and on N threads, after checking that both give the same loss
// and gradients bit for bit.
void time_step(const ModelSpec& spec, ModelOptions o, int batch, int threads, int repeats,
               Timing t[2]) {
  auto model = build_model(spec, o);
  std::vector<double> xs(size_t(batch) * o.H * o.W * o.C);
  for (size_t i = 0; i < xs.size(); i++) xs[i] = rng_uniform(7, i) * 2 - 1;
  VarPtr x = make_var(Tensor::from_doubles(xs, {batch, o.H, o.W, o.C}, o.dtype));
  std::vector<int32_t> labels(static_cast<size_t>(batch));
  for (int i = 0; i < batch; i++) labels[size_t(i)] = int32_t(rng_u64(8, uint64_t(i)) % 10);
  const Tensor y = Tensor::from_ints(labels, {batch});
  double loss = 0;
  const auto step = [&] {
    for (const VarPtr& p : model->parameters()) p->zero_grad();
    Tape tape;
    VarPtr l = softmax_cross_entropy(tape, model->forward(tape, x, true), y, 0.0);
    tape.backward(l, 1.0);
    loss = l->value.item();
  };
  std::vector<std::vector<double>> grads[2];
  double losses[2];
  for (int ti = 0; ti < 2; ti++) {
    omp_set_num_threads(ti == 0 ? 1 : threads);
    step();
    losses[ti] = loss;
    for (const VarPtr& p : model->parameters()) grads[ti].push_back(p->grad.to_doubles());
    t[ti] = time_runs(repeats, step);
  }
  CHECK(losses[0] == losses[1] && grads[0] == grads[1],
        "whole step: " << threads << " threads do not give the 1-thread loss and gradients");
}

// "8.10 8.02 6.22": the 1, 5 and 15 minute load averages. On a shared machine other work
// steals cores and inflates the times; the header and footer print this so readers can judge.
std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return f ? a + " " + b + " " + c : "unknown";
}

std::string cpu_name() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

template <typename T>
void run(const ModelSpec& spec, const ModelOptions& o, int batch, int threads, int repeats) {
  const std::vector<BenchLayer> layers = gemm_layers(spec, o, batch);  // may throw: first
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  std::printf("# bench_cpu_kernels, %s\n\nhost: %s, %d cores; load average %s\n", date,
              cpu_name().c_str(), omp_get_num_procs(), load_average().c_str());
  std::printf("model %s, input %dx%dx%d, batch %d, %s, median of %d; N = %d threads\n\n",
              spec.source.c_str(), o.H, o.W, o.C, batch, dtype_name(o.dtype), repeats, threads);
  std::printf("| layer | pass | MFLOP | 1 thread ms | GFLOP/s | %d threads ms | GFLOP/s | "
              "speedup | cores busy |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
              threads);
  const char* pass_name[3] = {"forward", "backward data", "backward filter"};
  double total[2] = {0, 0};
  for (const BenchLayer& L : layers) {
    const PassTimes pt = time_layer<T>(L, threads, repeats);
    const double mflop = double(L.s.forward_flops()) / 1e6;  // each pass costs the same
    for (int p = 0; p < 3; p++) {
      const Timing &one = pt.t[p][0], &many = pt.t[p][1];
      std::printf("| %s `%s` | %s | %.1f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n",
                  L.name.c_str(), L.text.c_str(), pass_name[p], mflop, one.ms, mflop / one.ms,
                  many.ms, mflop / many.ms, one.ms / many.ms, many.cores);
      total[0] += one.ms, total[1] += many.ms;
    }
  }
  std::printf("| all conv + linear | | | %.1f | | %.1f | | %.2f | |\n\n", total[0], total[1],
              total[0] / total[1]);
  Timing step[2];
  time_step(spec, o, batch, threads, repeats, step);
  std::printf("| whole training step (batch %d) | 1 thread | %d threads | speedup |\n"
              "| --- | --- | --- | --- |\n", batch, threads);
  std::printf("| ms | %.1f | %.1f | %.2f |\n", step[0].ms, step[1].ms, step[0].ms / step[1].ms);
  std::printf("| images/s | %.0f | %.0f | |\n", batch * 1000 / step[0].ms,
              batch * 1000 / step[1].ms);
  std::printf("| conv + linear share | %.0f%% | %.0f%% | |\n", 100 * total[0] / step[0].ms,
              100 * total[1] / step[1].ms);
  std::printf("| cores busy | %.2f | %.2f | |\n", step[0].cores, step[1].cores);
  if (threads > 1 && step[1].cores < 0.9 * threads)
    std::printf("\nnote: the %d-thread step kept only %.2f cores busy; other work held the rest, "
                "so the %d-thread column does not measure scaling here. (On a shared machine, "
                "OMP_WAIT_POLICY=passive keeps idle OpenMP threads from spinning.)\n",
                threads, step[1].cores, threads);
  std::printf("\nidentical: every layer and the whole step give the same bits on 1 and %d "
              "threads\nload average at the end: %s\n", threads, load_average().c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_cpu_kernels: conv and linear CPU kernels, 1 thread against N"};
  std::string model = "default", dtype = "f32";
  int batch = 64, repeats = 5, threads = omp_get_max_threads();
  app.add_option("--model", model, "A built-in model or a model file")->capture_default_str();
  app.add_option("--batch", batch, "Batch size")->capture_default_str();
  app.add_option("--repeats", repeats, "Timed runs per pass (the median is shown)")
      ->capture_default_str();
  app.add_option("--threads", threads, "N: the thread count to compare with 1")
      ->capture_default_str();
  app.add_option("--dtype", dtype, "f32 or f16")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    CHECK(dtype == "f32" || dtype == "f16", "--dtype must be f32 or f16, got '" << dtype << "'");
    CHECK(batch > 0 && repeats > 0 && threads > 0,
          "--batch, --repeats and --threads must be positive");
    const ModelSpec spec = load_model_spec(model);
    ModelOptions o;  // 28x28x1, 10 classes: the Fashion-MNIST shape
    o.dtype = dtype == "f16" ? DType::f16 : DType::f32;
    if (o.dtype == DType::f16) run<half_t>(spec, o, batch, threads, repeats);
    else run<float>(spec, o, batch, threads, repeats);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_cpu_kernels: %s\n", e.what());
    return 1;
  }
  return 0;
}
