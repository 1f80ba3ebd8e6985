// bench_allreduce_mpi: the all-reduce between processes (mpirun), against the same all-reduce
// between threads of one process and against a plain memcpy, side by side in one run.
//
//   mpirun -np N bin/bench_allreduce_mpi [--reps 7] [--max-mb 64]
//
// For each size from 4 KiB to --max-mb (fp32, the default model's and resnet's gradients
// included), rank 0 prints the median time of:
//   mpi ring    the trainer's collective under mpirun (make_mpi_ring, train/replicas/mpi.h):
//               the CPU ring's schedule over MPI_Sendrecv, N processes
//   MPI_Allreduce  OpenMPI's own (its algorithm and summation order; not bit-stable across N)
//   threads     the CPU ring of --devices cpu,... (make_cpu_ring): N threads of one process,
//               timed by rank 0 while the other ranks wait
// with the bus bandwidth of the mpi ring (bytes / time x 2(N-1)/N: what each rank copies per
// second, NCCL's convention) over a memcpy's of the same size.
// Validates first: the mpi ring's result equals the thread ring's bit for bit.
// train/DISTRIBUTED.md reads these numbers and carries them to GPUs on paper.
#include <mpi.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "kernels/check.h"
#include "kernels/rng.h"
#include "train/replicas/collective.h"
#include "train/replicas/mpi.h"

#include "bench/host_timing.h"

using namespace cutrain;
using bench::Clock;
using bench::median;
using bench::since;

// Rank r's buffer: a pure function of (r, i).
static std::vector<float> values(int r, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i++) v[size_t(i)] = float(rng_uniform(uint64_t(r), 3, uint64_t(i)));
  return v;
}

// Median over reps of the slowest rank's time for f() (after a warm-up), every rank starting
// together (a barrier before each).
template <typename F>
static double timed(const Mpi& mpi, int reps, F&& f) {
  std::vector<double> t;
  for (int k = 0; k <= reps; k++) {
    mpi.barrier();
    const auto t0 = Clock::now();
    f();
    const double mine = since(t0);
    std::vector<double> all(size_t(mpi.size()));
    mpi.all_gather(&mine, sizeof mine, all.data());
    if (k > 0) t.push_back(*std::max_element(all.begin(), all.end()));
  }
  return median(t);
}

int main(int argc, char** argv) {
  const std::unique_ptr<Mpi> mpi = Mpi::start_if_launched(&argc, &argv);
  CLI::App app{"bench_allreduce_mpi: the all-reduce between processes, threads and memcpy"};
  int reps = 7, max_mb = 64;
  app.add_option("--reps", reps, "Timed repetitions of each all-reduce (median)");
  app.add_option("--max-mb", max_mb, "The largest size, in MiB");
  CLI11_PARSE(app, argc, argv);
  if (!mpi) {
    std::fprintf(stderr, "bench_allreduce_mpi: start it with mpirun -np N (N >= 2)\n");
    return 2;
  }
  try {
    const int N = mpi->size(), r = mpi->rank();
    std::unique_ptr<Collective> ring = make_mpi_ring(*mpi);
    std::vector<int64_t> sizes;  // elements (fp32)
    for (int64_t b = 4 << 10; b <= (int64_t(max_mb) << 20); b *= 4) sizes.push_back(b / 4);
    sizes.push_back(140458);  // the default model's gradients (train/replicas: one bucket's worth)
    sizes.push_back(696042);  // resnet's
    std::sort(sizes.begin(), sizes.end());

    // Validation: the mpi ring gives the thread ring's bits.
    {
      const int64_t n = 100003;
      std::vector<float> mine = values(r, n);
      ring->all_reduce(0, {mine.data()}, n, DType::f32, true);
      if (r == 0) {
        std::vector<std::vector<float>> local;
        std::vector<void*> ptrs;
        for (int q = 0; q < N; q++) local.push_back(values(q, n));
        for (auto& v : local) ptrs.push_back(v.data());
        make_cpu_ring(N)->all_reduce(0, ptrs, n, DType::f32, true);
        CHECK(std::memcmp(local[0].data(), mine.data(), size_t(n) * sizeof(float)) == 0,
              "the mpi ring's result differs from the thread ring's");
      }
    }
    if (r == 0) {
      std::printf("bench_allreduce_mpi: %d processes; fp32; medians of %d (the slowest rank "
                  "each time); validated: the mpi ring equals the thread ring bit for bit\n\n",
                  N, reps);
      std::printf("| size | mpi ring | MPI_Allreduce | threads (1 process) | mpi ring bus bw | "
                  "memcpy bw | bus / memcpy |\n| --- | --- | --- | --- | --- | --- | --- |\n");
    }
    for (const int64_t n : sizes) {
      const size_t bytes = size_t(n) * sizeof(float);
      std::vector<float> buf = values(r, n);
      const double t_ring = timed(*mpi, reps, [&] { ring->all_reduce(0, {buf.data()}, n, DType::f32, true); });
      const double t_mpi = timed(*mpi, reps, [&] {
        MPI_Allreduce(MPI_IN_PLACE, buf.data(), int(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      });
      // Rank 0 alone: the thread ring of N threads and a memcpy, the others waiting.
      double t_threads = 0, t_copy = 0;
      if (r == 0) {
        std::vector<std::vector<float>> local;
        std::vector<void*> ptrs;
        for (int q = 0; q < N; q++) local.push_back(values(q, n));
        for (auto& v : local) ptrs.push_back(v.data());
        std::unique_ptr<Collective> threads = make_cpu_ring(N);
        std::vector<double> tt, tc;
        std::vector<float> copy(static_cast<size_t>(n));
        for (int k = 0; k <= reps; k++) {
          auto t0 = Clock::now();
          threads->all_reduce(0, ptrs, n, DType::f32, true);
          if (k > 0) tt.push_back(since(t0));
          t0 = Clock::now();
          std::memcpy(copy.data(), local[0].data(), bytes);
          if (k > 0) tc.push_back(since(t0));
        }
        t_threads = median(tt), t_copy = median(tc);
        const double bus = double(bytes) / t_ring * 2.0 * (N - 1) / N;
        const double copy_bw = double(bytes) / t_copy;
        std::printf("| %.3f MB%s | %.3f ms | %.3f ms | %.3f ms | %.2f GB/s | %.2f GB/s | %.2f |\n",
                    double(bytes) / 1e6,
                    n == 140458 ? " (default model)" : n == 696042 ? " (resnet)" : "",
                    t_ring * 1e3, t_mpi * 1e3, t_threads * 1e3, bus / 1e9, copy_bw / 1e9,
                    bus / copy_bw);
        std::fflush(stdout);
      }
      mpi->barrier();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_allreduce_mpi: %s\n", e.what());
    mpi->abort(1);
  }
  return 0;
}
