// bench_replicas: data-parallel replicas on CPU threads (--devices cpu,...).
//
// Prints, in one run:
//   1. the ring all-reduce (train/replicas/ring.h) of R = 2 and 4 replicas at the default model's
//      gradient size and at 64 MB: time, algorithm bandwidth (bytes / time) and bus bandwidth
//      (algorithm bandwidth x 2(R-1)/R: the bytes each replica actually copies per second), and
//      the ratio of the bus bandwidth to a plain memcpy's measured here (target >= 0.8);
//   2. training the default model on Fashion-MNIST with 1, 2 and 4 replicas, batch 64:
//      images/s, the all-reduce time per step, and the fraction of it hidden behind backward
//      (bench/replica_training.h, shared with bench_replicas_gpu);
//   3. --sync-bn's cost: the default and resnet models on 2 replicas without and with
//      synchronised BatchNorm: the step time, its ratio, and the time in the synchronisation.
// Validates before timing: every replica's all-reduced buffer is compared with the plain sum.
//
//   bin/bench_replicas [--steps 6] [--batch 64] [--reps 5]
//
// What these numbers predict for GPUs: see train/README.md ("Replicas"). On a CPU the
// replicas share the cores and the memory bus, so adding replicas adds no compute.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "kernels/check.h"
#include "kernels/rng.h"
#include "nn/model.h"
#include "train/engine/trainer.h"
#include "train/replicas/ring.h"

#include "bench/host_timing.h"
#include "bench/replica_training.h"

using namespace cutrain;
using bench::Clock;
using bench::median;
using bench::since;

// Seconds for one memcpy of `bytes` (median of reps, after a warm-up).
static double memcpy_seconds(size_t bytes, int reps) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  std::vector<double> t;
  for (int i = 0; i <= reps; i++) {
    const auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    if (i > 0) t.push_back(since(t0));
  }
  if (b[bytes / 2] != 1) std::printf("?");  // keep the copy
  return median(t);
}

// Median seconds of one all-reduce of n floats over R threads (every thread timed, the
// slowest counts).
static double allreduce_seconds(int R, int64_t n, int reps) {
  Ring ring(R);
  std::vector<std::vector<float>> buf(static_cast<size_t>(R), std::vector<float>(static_cast<size_t>(n)));
  for (int r = 0; r < R; r++)
    for (int64_t i = 0; i < n; i++)
      buf[size_t(r)][size_t(i)] = float(rng_uniform(uint64_t(r), 0, uint64_t(i)));
  std::vector<std::vector<double>> times(static_cast<size_t>(R));
  std::vector<std::thread> threads;
  for (int r = 0; r < R; r++)
    threads.emplace_back([&, r] {
      for (int k = 0; k <= reps; k++) {
        const auto t0 = Clock::now();
        ring.all_reduce(r, buf[size_t(r)].data(), n, DType::f32, k > 0);
        times[size_t(r)].push_back(since(t0));
      }
    });
  for (auto& t : threads) t.join();
  // k = 0 is the warm-up; check_allreduce() validated the results beforehand.
  std::vector<double> slowest;
  for (int k = 1; k <= reps; k++) {
    double m = 0;
    for (int r = 0; r < R; r++) m = std::max(m, times[size_t(r)][size_t(k)]);
    slowest.push_back(m);
  }
  return median(slowest);
}

static void check_allreduce(int R, int64_t n) {
  Ring ring(R);
  std::vector<std::vector<float>> buf(static_cast<size_t>(R), std::vector<float>(static_cast<size_t>(n)));
  std::vector<double> want(static_cast<size_t>(n), 0.0);
  for (int r = 0; r < R; r++)
    for (int64_t i = 0; i < n; i++) {
      buf[size_t(r)][size_t(i)] = float(rng_uniform(uint64_t(r), 1, uint64_t(i)));
      want[size_t(i)] += buf[size_t(r)][size_t(i)];
    }
  std::vector<std::thread> threads;
  for (int r = 0; r < R; r++)
    threads.emplace_back([&, r] { ring.all_reduce(r, buf[size_t(r)].data(), n, DType::f32, false); });
  for (auto& t : threads) t.join();
  for (int r = 0; r < R; r++)
    for (int64_t i = 0; i < n; i++)
      CHECK(std::abs(buf[size_t(r)][size_t(i)] - want[size_t(i)]) < 1e-5 * R,
            "all-reduce check failed: replica " << r << ", element " << i);
}

int main(int argc, char** argv) {
  CLI::App app{"bench_replicas: the ring all-reduce and data-parallel training on CPU threads"};
  int steps = 6, batch = 64, reps = 5;
  app.add_option("--steps", steps, "Timed training steps per replica count (after 1 warm-up)");
  app.add_option("--batch", batch, "Global batch (divisible by 4)");
  app.add_option("--reps", reps, "Timed repetitions of each all-reduce");
  CLI11_PARSE(app, argc, argv);
  try {
    std::printf("bench_replicas: %u hardware threads on this machine\n",
                std::thread::hardware_concurrency());

    // ---- 1. the all-reduce against memcpy ------------------------------------------------
    ModelOptions mo;
    mo.H = mo.W = 28, mo.C = 1, mo.classes = 10;
    const int64_t grad_n = build_model(load_model_spec("default"), mo)->parameter_count();
    std::printf("\n1. ring all-reduce, fp32 (bus bw = bytes/time x 2(R-1)/R; target >= 0.8 of memcpy)\n");
    std::printf("| size | R | time | alg bw | bus bw | memcpy bw | bus / memcpy |\n");
    std::printf("| --- | --- | --- | --- | --- | --- | --- |\n");
    for (const int64_t n : {grad_n, int64_t(16) << 20}) {
      const size_t bytes = size_t(n) * 4;
      const double copy_bw = double(bytes) / memcpy_seconds(bytes, reps) / 1e9;
      for (int R : {2, 4}) {
        check_allreduce(R, std::min<int64_t>(n, 100000));
        const double t = allreduce_seconds(R, n, reps);
        const double alg = double(bytes) / t / 1e9, bus = alg * 2.0 * (R - 1) / R;
        std::printf("| %.2f MB%s | %d | %.3f ms | %.2f GB/s | %.2f GB/s | %.2f GB/s | %.2f |\n",
                    double(bytes) / 1e6, n == grad_n ? " (default model)" : "", R, t * 1e3, alg,
                    bus, copy_bw, bus / copy_bw);
        std::fflush(stdout);
      }
    }

    // ---- 2. training with 1, 2, 4 replicas -----------------------------------------------
    const std::string dir = (std::filesystem::temp_directory_path() / "bench_replicas_fmnist").string();
    const ImportSummary fm = bench_fashion_mnist(dir, 2);
    std::printf("\n2. training the default model, batch %d, fp32, %d timed steps each (after 1)\n",
                batch, steps);
    print_replica_header();
    double one = 0;
    for (int R : {1, 2, 4}) {
      std::string devices;
      for (int r = 0; R > 1 && r < R; r++) devices += r == 0 ? "cpu" : ",cpu";
      Trainer t(bench_replica_config(fm.train_list, dir + "/run", batch, 1, steps, devices, 1),
                choose_device("cpu", "fp32"));
      if (R == 2) std::fprintf(stderr, "%s\n", t.replicas_description().c_str());
      const ReplicaTiming m = time_replica_training(t, 1, steps);
      if (R == 1) one = m.images_per_s();
      print_replica_row(m, one, steps);
    }

    // ---- 3. --sync-bn's cost ----------------------------------------------------------------
    std::printf("\n3. --sync-bn: 2 replicas, batch %d, fp32, without and with synchronised "
                "BatchNorm, %d timed steps each (after 1)\n", batch, steps);
    bench_sync_bn({"default", "resnet"}, 2,
                  [&](const std::string& model, bool sync_bn) {
                    return bench_replica_config(fm.train_list, dir + "/run", batch, 1, steps,
                                                "cpu,cpu", 1, model, sync_bn);
                  },
                  choose_device("cpu", "fp32"), 1, steps);
    std::filesystem::remove_all(dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_replicas: %s\n", e.what());
    return 1;
  }
  return 0;
}
