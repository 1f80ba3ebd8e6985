// bench_cpu_kernels: the CPU kernels of a model's conv and linear layers, the reference
// (--impl direct) or oneDNN (--impl onednn, the CPU's default), timed on 1 thread and on N
// threads, side by side; then one whole training step (forward, loss, backward) through nn/ on
// the same kernels, so the share of everything else (BN, ReLU, pooling, loss, tape) shows too;
// then every BatchNorm layer's fused BN+ReLU against BN then ReLU (below).
//
// For each conv and linear layer at batch B: forward, backward data and backward filter
// (with bias), each the median of R runs after one warm-up, in ms and GFLOP/s (2 flops per
// multiply-add; backward data and filter cost as much as the forward each). Before timing:
// the reference's N-thread results are compared with its 1-thread results bit for bit (the
// kernels promise that: kernels/README.md); oneDNN's are compared with the reference's within
// 1e-4 of the largest value, and two N-thread runs bit for bit (its promise: kernels/onednn.h).
// A difference stops the bench. --json FILE writes the per-layer medians for other programs
// (bench/cpu_training.py sets them beside PyTorch's).
//
// BatchNorm (--bn-only: this table alone): for each BN layer of the model, (M, C) with M = N*H*W,
// the training forward and backward with the ReLU fused (relu = true: what nn/ runs for `bn`
// then `relu`) against the two ops it replaces (BN with relu = false, then relu_forward_cpu;
// relu_backward_cpu into a zeroed buffer, then BN's backward), on 1 thread and on N. First
// both are checked to give the same bits (kernels/batchnorm.h promises it); then each is timed
// alternately, run for run, so that a busy machine slows both alike; medians, and the ratio
// separate / fused (> 1: the fused op is faster).
//
//   bin/bench_cpu_kernels                  default model, batch 64, f32, oneDNN, N = all cores
//   bin/bench_cpu_kernels --impl direct --threads 2 --dtype f16 --repeats 9
//   bin/bench_cpu_kernels --bn-only --model resnet --repeats 21     fused BN+ReLU alone
//   OMP_NUM_THREADS=2 bin/bench_cpu_kernels      the same N
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <omp.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "bench/host_timing.h"
#include "bench/model_layers.h"
#include "kernels/batchnorm.h"
#include "kernels/check.h"
#include "kernels/conv2d.h"
#include "kernels/elementwise.h"
#include "kernels/linear.h"
#include "kernels/onednn.h"
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

// Every |a - b| within 1e-4 of the largest |b| (at least 1): oneDNN against the reference.
template <typename T> bool close(const std::vector<T>& a, const std::vector<T>& b) {
  double top = 1, worst = 0;
  for (size_t i = 0; i < b.size(); i++) {
    top = std::max(top, std::fabs(double(b[i])));
    worst = std::max(worst, std::fabs(double(a[i]) - double(b[i])));
  }
  return a.size() == b.size() && worst <= 1e-4 * top;
}

// The linear layers run the same library as the convolutions.
LinearImpl li_of(ConvImpl c) {
  return c == ConvImpl::onednn ? LinearImpl::onednn : LinearImpl::direct;
}

struct PassTimes {
  Timing t[3][2];  // [forward, backward data, backward filter][1 thread, N threads]
};

// Validates (above), then times the three passes of one layer on `impl`.
template <typename T>
PassTimes time_layer(const BenchLayer& L, ConvImpl impl, int threads, int repeats) {
  const Conv2dShape& s = L.s;
  const size_t nx = size_t(s.N) * s.H * s.W * s.C, nw = size_t(s.K) * s.R * s.S * s.C;
  const size_t ny = size_t(s.N) * s.P() * s.Q() * s.K, K = size_t(s.K);
  const std::vector<T> x = random_vec<T>(nx, 1), w = random_vec<T>(nw, 2), b = random_vec<T>(K, 3),
                       dy = random_vec<T>(ny, 4);
  std::vector<T> y(ny), dx(nx), dw(nw), db(K);
  ConvImpl ci = impl;  // what the passes run (the check below runs the reference too)
  const std::function<void()> pass[3] = {
      [&] {
        if (L.conv) conv2d_forward_cpu<T>(ci, s, x.data(), w.data(), b.data(), y.data());
        else linear_forward_cpu<T>(li_of(ci), s.N, s.C, s.K, x.data(), w.data(), b.data(),
                                   y.data());
      },
      [&] {
        if (L.conv) conv2d_backward_data_cpu<T>(ci, s, dy.data(), w.data(), dx.data());
        else linear_backward_cpu<T>(li_of(ci), s.N, s.C, s.K, x.data(), w.data(), dy.data(),
                                    dx.data(), nullptr, nullptr);
      },
      [&] {
        if (L.conv) conv2d_backward_filter_cpu<T>(ci, s, x.data(), dy.data(), dw.data(), db.data());
        else linear_backward_cpu<T>(li_of(ci), s.N, s.C, s.K, x.data(), w.data(), dy.data(),
                                    nullptr, dw.data(), db.data());
      }};
  // All three passes from zero (the backward passes accumulate) on `t` threads: y, dx, dw, db.
  const auto outputs = [&](ConvImpl run_impl, int t) {
    ci = run_impl;
    omp_set_num_threads(t);
    std::fill(dx.begin(), dx.end(), T(0.0f));
    std::fill(dw.begin(), dw.end(), T(0.0f));
    std::fill(db.begin(), db.end(), T(0.0f));
    for (const auto& f : pass) f();
    return std::vector<std::vector<T>>{y, dx, dw, db};
  };
  const auto ref = outputs(ConvImpl::direct, 1);
  const auto got = outputs(impl, threads);
  if (impl == ConvImpl::direct) {
    for (int i = 0; i < 4; i++)
      CHECK(same_bits(got[size_t(i)], ref[size_t(i)]),
            L.name << ": " << threads << " threads do not give the 1-thread result bit for bit");
  } else {
    const auto again = outputs(impl, threads);
    for (int i = 0; i < 4; i++) {
      CHECK(close(got[size_t(i)], ref[size_t(i)]),
            L.name << ": oneDNN's output " << i << " is not within 1e-4 of the reference's");
      CHECK(same_bits(again[size_t(i)], got[size_t(i)]),
            L.name << ": two oneDNN runs on " << threads << " threads differ");
    }
  }
  ci = impl;
  PassTimes pt;
  for (int ti = 0; ti < 2; ti++) {
    omp_set_num_threads(ti == 0 ? 1 : threads);
    for (int p = 0; p < 3; p++) pt.t[p][ti] = time_runs(repeats, pass[p]);
  }
  return pt;
}

// One training step of the whole model at batch N: forward (training mode), loss, backward,
// on `impl` (o.context). Returns the median ms on 1 and on N threads; on the reference, after
// checking that both give the same loss and gradients bit for bit.
void time_step(const ModelSpec& spec, ModelOptions o, ConvImpl impl, int batch, int threads,
               int repeats, Timing t[2]) {
  o.context.conv = impl, o.context.linear = li_of(impl);
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
    Tape tape(o.context);
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
  CHECK(impl != ConvImpl::direct || (losses[0] == losses[1] && grads[0] == grads[1]),
        "whole step: " << threads << " threads do not give the 1-thread loss and gradients");
}

// Runs a and b alternately, `repeats` times each after a warm-up of each: their median ms.
std::pair<double, double> time_alternating(int repeats, const std::function<void()>& a,
                                           const std::function<void()>& b) {
  a(), b();
  std::vector<double> ms[2];
  for (int i = 0; i < repeats; i++)
    for (int k = 0; k < 2; k++) {
      const auto t0 = Clock::now();
      (k == 0 ? a : b)();
      ms[k].push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
  return {bench::median(ms[0]), bench::median(ms[1])};
}

// One BN layer: the fused op against BN then ReLU (the header's table), checked, then timed.
// Prints its rows; returns {separate, fused} ms summed over both passes on each thread count.
template <typename T>
std::array<double, 4> time_bn_layer(const std::string& name, int64_t M, int C, int threads,
                                    int repeats) {
  using A = acc_t<T>;
  const size_t n = size_t(M) * size_t(C), Cs = size_t(C);
  const std::vector<T> x = random_vec<T>(n, 11), dy = random_vec<T>(n, 12);
  std::vector<A> gamma(Cs), beta(Cs);
  for (size_t c = 0; c < Cs; c++) gamma[c] = A(0.5 + rng_uniform(13, c)), beta[c] = A(0.1);
  struct Out {  // what one way writes
    std::vector<T> y, z, dz, dx;  // z: BN's output before the separate ReLU; dz: its gradient
    std::vector<A> mean, invstd, rmean, rvar, dgamma, dbeta;
  };
  const auto fresh = [&] {
    Out o{std::vector<T>(n), std::vector<T>(n), std::vector<T>(n), std::vector<T>(n),
          std::vector<A>(Cs), std::vector<A>(Cs), std::vector<A>(Cs, A(0)),
          std::vector<A>(Cs, A(1)), std::vector<A>(Cs, A(0)), std::vector<A>(Cs, A(0))};
    return o;
  };
  Out sep = fresh(), fus = fresh();
  const auto forward = [&](Out& o, bool fused) {
    batchnorm_forward_train_cpu<T>(M, C, x.data(), gamma.data(), beta.data(), 1e-5, 0.1, fused,
                                   fused ? o.y.data() : o.z.data(), o.mean.data(),
                                   o.invstd.data(), o.rmean.data(), o.rvar.data());
    if (!fused) relu_forward_cpu<T>(M * C, o.z.data(), o.y.data());
  };
  const auto backward = [&](Out& o, bool fused) {
    std::fill(o.dx.begin(), o.dx.end(), T(0.0f));  // both: a zeroed dx to accumulate into
    if (fused) {
      batchnorm_backward_train_cpu<T>(M, C, x.data(), o.y.data(), dy.data(), gamma.data(),
                                      o.mean.data(), o.invstd.data(), true, o.dx.data(),
                                      o.dgamma.data(), o.dbeta.data());
    } else {
      std::fill(o.dz.begin(), o.dz.end(), T(0.0f));
      relu_backward_cpu<T>(M * C, o.y.data(), dy.data(), o.dz.data());
      batchnorm_backward_train_cpu<T>(M, C, x.data(), nullptr, o.dz.data(), gamma.data(),
                                      o.mean.data(), o.invstd.data(), false, o.dx.data(),
                                      o.dgamma.data(), o.dbeta.data());
    }
  };
  omp_set_num_threads(threads);
  forward(sep, false), forward(fus, true), backward(sep, false), backward(fus, true);
  CHECK(same_bits(fus.y, sep.y) && same_bits(fus.mean, sep.mean) &&
            same_bits(fus.invstd, sep.invstd) && same_bits(fus.dx, sep.dx) &&
            same_bits(fus.dgamma, sep.dgamma) && same_bits(fus.dbeta, sep.dbeta),
        name << ": the fused BN+ReLU does not give BN then ReLU's bits");
  std::array<double, 4> total{};  // separate 1, fused 1, separate N, fused N
  const char* pass_name[2] = {"forward", "backward"};
  for (int p = 0; p < 2; p++) {
    double ms[2][2];  // [1 thread, N][separate, fused]
    for (int ti = 0; ti < 2; ti++) {
      omp_set_num_threads(ti == 0 ? 1 : threads);
      const auto [s, f] =
          p == 0 ? time_alternating(repeats, [&] { forward(sep, false); },
                                    [&] { forward(fus, true); })
                 : time_alternating(repeats, [&] { backward(sep, false); },
                                    [&] { backward(fus, true); });
      ms[ti][0] = s, ms[ti][1] = f;
      total[size_t(2 * ti)] += s, total[size_t(2 * ti + 1)] += f;
    }
    std::printf("| %s | %lld x %d | %s | %.3f | %.3f | %.2f | %.3f | %.3f | %.2f |\n",
                name.c_str(), static_cast<long long>(M), C, pass_name[p], ms[0][0], ms[0][1],
                ms[0][0] / ms[0][1], ms[1][0], ms[1][1], ms[1][0] / ms[1][1]);
  }
  return total;
}

// Every BN layer of the model at batch N (Model::rows(), shapes only), fused against separate.
template <typename T>
void time_bn_layers(const ModelSpec& spec, ModelOptions o, int batch, int threads,
                    int repeats) {
  o.shapes_only = true;
  const auto model = build_model(spec, o);
  std::printf("BatchNorm+ReLU (training), fused against BN then ReLU, the same bits checked; "
              "medians of %d alternated runs; ratio = separate / fused (> 1: fused is faster)\n\n"
              "| layer | M x C | pass | 1 thread: BN, ReLU ms | fused ms | ratio | "
              "%d threads: BN, ReLU ms | fused ms | ratio |\n"
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n", repeats, threads);
  std::array<double, 4> all{};
  for (const TableRow& r : model->rows()) {
    if (r.text.rfind("bn", 0) != 0) continue;
    const int64_t M = int64_t(batch) * (r.out.flat ? 1 : int64_t(r.out.H) * r.out.W);
    const auto t = time_bn_layer<T>(r.name, M, r.out.C, threads, repeats);
    for (size_t i = 0; i < 4; i++) all[i] += t[i];
  }
  std::printf("| all BN layers | | both | %.3f | %.3f | %.2f | %.3f | %.3f | %.2f |\n\n", all[0],
              all[1], all[0] / all[1], all[2], all[3], all[2] / all[3]);
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
void run(const ModelSpec& spec, const ModelOptions& o, ConvImpl impl, int batch, int threads,
         int repeats, const std::string& json_path, bool bn_only) {
  const std::vector<BenchLayer> layers = gemm_layers(spec, o, batch);  // may throw: first
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  std::printf("# bench_cpu_kernels, %s\n\nhost: %s, %d cores; load average %s\n", date,
              cpu_name().c_str(), omp_get_num_procs(), load_average().c_str());
  std::printf("model %s, input %dx%dx%d, batch %d, %s, median of %d; N = %d threads\n",
              spec.source.c_str(), o.H, o.W, o.C, batch, dtype_name(o.dtype), repeats, threads);
  if (bn_only) {
    std::printf("\n");
    time_bn_layers<T>(spec, o, batch, threads, repeats);
    std::printf("load average at the end: %s\n", load_average().c_str());
    return;
  }
  std::printf("kernels: %s\n\n", impl == ConvImpl::onednn
                                     ? (onednn_version() + ", --impl onednn").c_str()
                                     : "the reference (--impl direct)");
  std::printf("| layer | pass | MFLOP | 1 thread ms | GFLOP/s | %d threads ms | GFLOP/s | "
              "speedup | cores busy |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
              threads);
  const char* pass_name[3] = {"forward", "backward data", "backward filter"};
  double total[2] = {0, 0};
  nlohmann::json rows = nlohmann::json::array();
  std::vector<std::string> picked;  // what oneDNN runs, layer by layer
  for (const BenchLayer& L : layers) {
    const PassTimes pt = time_layer<T>(L, impl, threads, repeats);
    if (impl == ConvImpl::onednn && L.conv)
      picked.push_back(L.name + ": " + conv2d_onednn_kernels(L.s));
    const double mflop = double(L.s.forward_flops()) / 1e6;  // each pass costs the same
    for (int p = 0; p < 3; p++) {
      const Timing &one = pt.t[p][0], &many = pt.t[p][1];
      std::printf("| %s `%s` | %s | %.1f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |\n",
                  L.name.c_str(), L.text.c_str(), pass_name[p], mflop, one.ms, mflop / one.ms,
                  many.ms, mflop / many.ms, one.ms / many.ms, many.cores);
      total[0] += one.ms, total[1] += many.ms;
      const Conv2dShape& c = L.s;
      rows.push_back({{"layer", L.name}, {"spec", L.text}, {"conv", L.conv},
                      {"pass", pass_name[p]}, {"N", c.N}, {"H", c.H}, {"W", c.W}, {"C", c.C},
                      {"K", c.K}, {"R", c.R}, {"S", c.S}, {"stride_h", c.stride_h},
                      {"stride_w", c.stride_w}, {"pad_h", c.pad_h}, {"pad_w", c.pad_w},
                      {"ms_1", one.ms}, {"ms_N", many.ms}});
    }
  }
  std::printf("| all conv + linear | | | %.1f | | %.1f | | %.2f | |\n\n", total[0], total[1],
              total[0] / total[1]);
  Timing step[2];
  time_step(spec, o, impl, batch, threads, repeats, step);
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
  if (impl == ConvImpl::direct)
    std::printf("\nidentical: every layer and the whole step give the same bits on 1 and %d "
                "threads\n", threads);
  else
    std::printf("\nchecked: every layer within 1e-4 of the reference, and the same bits in two "
                "runs on %d threads\noneDNN's kernels:\n", threads);
  for (const std::string& line : picked) std::printf("- %s\n", line.c_str());
  std::printf("\n");
  time_bn_layers<T>(spec, o, batch, threads, repeats);
  std::printf("load average at the end: %s\n", load_average().c_str());
  if (!json_path.empty()) {
    const nlohmann::json j = {{"model", spec.source}, {"batch", batch}, {"threads", threads},
                              {"impl", impl_name(impl)}, {"dtype", dtype_name(o.dtype)},
                              {"step_ms_1", step[0].ms}, {"step_ms_N", step[1].ms},
                              {"layers", rows}};
    std::ofstream f(json_path);
    f << j.dump(1) << "\n";
    CHECK(f.good(), "cannot write " << json_path);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_cpu_kernels: conv and linear CPU kernels, 1 thread against N"};
  std::string model = "default", dtype = "f32", impl_arg = "onednn", json_path;
  int batch = 64, repeats = 5, threads = omp_get_max_threads();
  app.add_option("--model", model, "A built-in model or a model file")->capture_default_str();
  app.add_option("--batch", batch, "Batch size")->capture_default_str();
  app.add_option("--repeats", repeats, "Timed runs per pass (the median is shown)")
      ->capture_default_str();
  app.add_option("--threads", threads, "N: the thread count to compare with 1")
      ->capture_default_str();
  app.add_option("--dtype", dtype, "f32 or f16")->capture_default_str();
  app.add_option("--impl", impl_arg, "onednn (fp32) or direct (the reference)")
      ->capture_default_str();
  app.add_option("--json", json_path, "Also write the per-layer medians to this JSON file");
  bool bn_only = false;
  app.add_flag("--bn-only", bn_only, "Only the BatchNorm table: fused BN+ReLU against BN, ReLU");
  CLI11_PARSE(app, argc, argv);
  try {
    CHECK(dtype == "f32" || dtype == "f16", "--dtype must be f32 or f16, got '" << dtype << "'");
    CHECK(impl_arg == "onednn" || impl_arg == "direct",
          "--impl must be onednn or direct, got '" << impl_arg << "'");
    const ConvImpl impl = parse_conv_impl(impl_arg, false);
    CHECK(impl == ConvImpl::direct || dtype == "f32",
          "--impl onednn is fp32 only: add --impl direct");
    CHECK(batch > 0 && repeats > 0 && threads > 0,
          "--batch, --repeats and --threads must be positive");
    const ModelSpec spec = load_model_spec(model);
    ModelOptions o;  // 28x28x1, 10 classes: the Fashion-MNIST shape
    o.dtype = dtype == "f16" ? DType::f16 : DType::f32;
    if (o.dtype == DType::f16)
      run<half_t>(spec, o, impl, batch, threads, repeats, json_path, bn_only);
    else
      run<float>(spec, o, impl, batch, threads, repeats, json_path, bn_only);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_cpu_kernels: %s\n", e.what());
    return 1;
  }
  return 0;
}
