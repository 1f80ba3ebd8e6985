// defines: bench_memory_bound(), bench_kernels_gpu's rows for the memory-bound kernels at a
// large size n (default 64M elements, far beyond the L2 cache), in f16 and f32:
//   relu forward / backward, add, accumulate, batchnorm training forward / backward fused with
//   relu (C = 64 channels, M = n / 64 pixels), the input conversion (uint8 224x224x3 images),
//   sum, and the two casts.
// Each kernel is first checked against its CPU reference on the same full-size inputs (outputs
// poisoned, accumulated ones prefilled with random values); a wrong one is reported and not
// timed. Then GB/s = bytes / time, and the share of the device-to-device copy bandwidth. The
// bytes are those of the algorithm each header describes, counting every pass:
//   relu fwd 2nT (read x, write y)        relu bwd 4nT (y, dy, dx read and written)
//   add      3nT                          accumulate 3nT (dy, dx read and written)
//   bn fwd   3nT (x read twice: statistics, then normalise; y written)
//   bn bwd   8nT (x, y, dy read for the sums; again with dx read and written)
//   input    n + nT                       sum nT                 casts 6n
#pragma once
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "bench/gpu_timing.h"
#include "kernels/batchnorm.h"
#include "kernels/ladder/batchnorm_ladder.h"
#include "kernels/cast.h"
#include "kernels/elementwise.h"
#include "kernels/input.h"
#include "kernels/reduce.h"

namespace cutrain {

inline void bandwidth_row(BenchContext& ctx, const std::string& kernel, const char* dtype,
                          int64_t n, double bytes, double ms, const Check& c, bool target) {
  const double gbps = ms > 0 ? bytes / (ms * 1e6) : 0;
  const double of_copy = ctx.ceilings.copy_gbps > 0 ? gbps / ctx.ceilings.copy_gbps : 0;
  char t[3][32] = {"", "", ""};
  if (ms > 0) {
    std::snprintf(t[0], sizeof t[0], "%.3f", ms);
    std::snprintf(t[1], sizeof t[1], "%.0f", gbps);
    if (of_copy > 0) std::snprintf(t[2], sizeof t[2], "%.0f%%", 100 * of_copy);
  }
  ctx.report.print("| %s | %s | %.1fM | %.2f | %s | %s | %s | %s |\n", kernel.c_str(), dtype,
                   double(n) / (1 << 20), bytes / double(n), t[0], t[1], t[2], c.text.c_str());
  ctx.report.add({{"family", "memory"}, {"kernel", kernel}, {"dtype", dtype}, {"n", n},
                  {"bytes", bytes}, {"ms", ms}, {"gbps", gbps}, {"of_copy", of_copy},
                  {"check", c.text}});
  if (!c.ok) ctx.report.failures++;
  if (target) ctx.bandwidth_ratio.push_back({kernel + " " + dtype, of_copy});
}

// Validates (check() returns the outcome), then times run(), then prints the row. `target`:
// the kernel counts for the ">= 70% of copy bandwidth" target.
// timing: the repeats (ctx.timing's when null; the ladder's naive rungs take fewer).
inline void measure(BenchContext& ctx, const std::string& kernel, const char* dtype, int64_t n,
                    double bytes, bool target, const std::function<Check()>& check,
                    const std::function<void()>& run, const TimingOptions* timing = nullptr) {
  if (!ctx.wanted(kernel + " " + dtype)) return;
  const Check c = check();
  const double ms = c.ok ? time_gpu(ctx.stream, timing ? *timing : ctx.timing, run) : 0;
  bandwidth_row(ctx, kernel, dtype, n, bytes, ms, c, target);
}

// Tolerances: elementwise results are rounded once from the same fp32 value as on the CPU,
// so they should be equal; one unit in the last place is allowed (2^-10 in f16, 2^-23 in
// f32) in case a kernel evaluates a + b in another precision and rounds differently.
template <typename T> double ulp() { return sizeof(T) == 2 ? 1.0 / 1024 : 1.0 / (1 << 23); }

template <typename T> void bench_elementwise(BenchContext& ctx, int64_t n, const char* dt) {
  if (!ctx.wanted_any({"relu forward", "relu backward", "add", "accumulate", "sum"}, dt)) return;
  cudaStream_t st = ctx.stream;
  const size_t un = size_t(n);
  const double bytes = double(n) * sizeof(T);
  const std::vector<T> a = random_vec<T>(un, 11), b = random_vec<T>(un, 12),
                       pre = random_vec<T>(un, 13);
  std::vector<T> relu_a(un);
  relu_forward_cpu<T>(n, a.data(), relu_a.data());  // the y of a relu: zeros where a < 0
  DeviceArray<T> da(a, st), db(b, st), d_relu_a(relu_a, st), dout(un, st);
  const auto check_out = [&](const std::vector<T>& want) {
    return compare("y", to_doubles(dout.download()), to_doubles(want), ulp<T>(), 0);
  };

  measure(ctx, "relu forward", dt, n, 2 * bytes, true, [&] {
    dout.poison();
    relu_forward_gpu<T>(n, da.get(), dout.get(), st);
    return check_out(relu_a);
  }, [&] { relu_forward_gpu<T>(n, da.get(), dout.get(), st); });

  measure(ctx, "relu backward", dt, n, 4 * bytes, true, [&] {
    dout.upload(pre);
    relu_backward_gpu<T>(n, d_relu_a.get(), db.get(), dout.get(), st);
    std::vector<T> want = pre;
    relu_backward_cpu<T>(n, relu_a.data(), b.data(), want.data());
    return check_out(want);
  }, [&] { relu_backward_gpu<T>(n, d_relu_a.get(), db.get(), dout.get(), st); });

  measure(ctx, "add", dt, n, 3 * bytes, true, [&] {
    dout.poison();
    add_forward_gpu<T>(n, da.get(), db.get(), dout.get(), st);
    std::vector<T> want(un);
    add_forward_cpu<T>(n, a.data(), b.data(), want.data());
    return check_out(want);
  }, [&] { add_forward_gpu<T>(n, da.get(), db.get(), dout.get(), st); });

  measure(ctx, "accumulate", dt, n, 3 * bytes, true, [&] {
    dout.upload(pre);
    accumulate_gpu<T>(n, db.get(), dout.get(), st);
    std::vector<T> want = pre;
    accumulate_cpu<T>(n, b.data(), want.data());
    return check_out(want);
  }, [&] { accumulate_gpu<T>(n, db.get(), dout.get(), st); });

  // sum: fp32 partial sums in any order err by ~log2(n) * 2^-24 * sum|x|; allow 1e-5 * sum|x|
  DeviceArray<float> total(1, st);
  measure(ctx, "sum", dt, n, bytes, false, [&] {
    total.upload({0.0f});  // right whether sum_gpu writes or adds to *out
    sum_gpu<T>(n, da.get(), total.get(), st);
    double want = 0, abs = 0;
    for (const T& v : a) want += double(v), abs += std::fabs(double(v));
    const double got = double(total.download()[0]);
    const bool ok = std::fabs(got - want) <= 1e-5 * abs;
    char text[128];
    std::snprintf(text, sizeof text, "%s %.7g, want %.7g", ok ? "ok:" : "WRONG sum:", got, want);
    return Check{ok, text};
  }, [&] { sum_gpu<T>(n, da.get(), total.get(), st); });
}

// Batchnorm training forward and backward with the relu fused, as the trainer runs them
// (conv -> bn -> relu), on every rung of the BatchNorm ladder (kernels/ladder/
// batchnorm_ladder.h): "bn forward +relu" is v2, the production kernels (the target row);
// "... v1 naive" and "... v3 vector" the others, the same bytes counted, so their share of
// the copy bandwidth compares directly. v1 (its sums run on C threads: seconds a call) only
// with --only naive, and then with few repeats. The reference runs in double (batchnorm_*_cpu<double> on the widened values): the
// fp32 CPU sums over a million pixels would themselves be off by ~1e-5; v1's plain fp32 sums
// over M rows are allowed M roundings.
template <typename T> void bench_batchnorm(BenchContext& ctx, int64_t n, const char* dt) {
  if (!ctx.wanted_any({"bn forward +relu", "bn backward +relu"}, dt)) return;
  cudaStream_t st = ctx.stream;
  const int C = 64;
  const int64_t M = n / C;
  const size_t un = size_t(M) * C, uc = size_t(C);
  const double eps = 1e-5, momentum = 0.1, bytes = double(un) * sizeof(T);
  const std::vector<T> x = random_vec<T>(un, 21, -1, 3), dy = random_vec<T>(un, 22),
                       dx0 = random_vec<T>(un, 23);
  const std::vector<float> gamma = random_vec<float>(uc, 24, 0.5, 1.5),
                           beta = random_vec<float>(uc, 25, -0.5, 0.5),
                           rmean0 = random_vec<float>(uc, 26, -0.1, 0.1),
                           rvar0 = random_vec<float>(uc, 27, 0.5, 1.5),
                           dgamma0 = random_vec<float>(uc, 28), dbeta0 = random_vec<float>(uc, 29);
  // the reference forward, relu included
  const std::vector<double> xd = to_doubles(x), gd = to_doubles(gamma), bd = to_doubles(beta);
  std::vector<double> yd(un), mean(uc), invstd(uc), rmean = to_doubles(rmean0),
                              rvar = to_doubles(rvar0);
  batchnorm_forward_train_cpu<double>(M, C, xd.data(), gd.data(), bd.data(), eps, momentum, false,
                                      yd.data(), mean.data(), invstd.data(), rmean.data(),
                                      rvar.data());
  relu_forward_cpu<double>(int64_t(un), yd.data(), yd.data());
  std::vector<T> y(un);  // the fused forward's output in T: the backward's relu mask
  for (size_t i = 0; i < un; i++) y[i] = T(float(yd[i]));

  DeviceArray<T> dev_x(x, st), dev_y(un, st), dev_dy(dy, st), dev_dx(un, st);
  DeviceArray<float> dev_gamma(gamma, st), dev_beta(beta, st), dev_mean(uc, st),
      dev_invstd(uc, st), dev_rmean(rmean0, st), dev_rvar(rvar0, st), dev_dgamma(uc, st),
      dev_dbeta(uc, st);
  for (BnRung rung : {BnRung::blocked, BnRung::vector, BnRung::naive}) {
  const bool naive = rung == BnRung::naive;
  // v1 sums each channel on one thread: seconds a call at this size. Only when asked for by
  // name (--only naive), so that a GPU window's bench step does not spend a minute on it.
  if (naive && ctx.only.find("naive") == std::string::npos) continue;
  const std::string suffix = rung == BnRung::blocked ? "" : std::string(" ") + bn_rung_name(rung);
  const TimingOptions few{1, 3};
  const double loose = naive ? 4 * double(M) * std::ldexp(1.0, -24) : 0;  // M roundings
  const double tol = 2 * ulp<T>() + 1e-5 + 4 * loose;  // y rounded once; fp32 statistics
  const double stat_tol = 1e-5 + loose;
  const auto forward = [&] {
    batchnorm_forward_train_rung_gpu<T>(rung, M, C, dev_x.get(), dev_gamma.get(), dev_beta.get(),
                                        eps, momentum, true, dev_y.get(), dev_mean.get(),
                                        dev_invstd.get(), dev_rmean.get(), dev_rvar.get(), st);
  };
  dev_rmean.upload(rmean0), dev_rvar.upload(rvar0);
  measure(ctx, "bn forward +relu" + suffix, dt, int64_t(un), 3 * bytes, suffix.empty(), [&] {
    dev_y.poison(), dev_mean.poison(), dev_invstd.poison();
    forward();
    return compare("y", to_doubles(dev_y.download()), yd, tol, tol) &&
           compare("mean", to_doubles(dev_mean.download()), mean, stat_tol, stat_tol) &&
           compare("invstd", to_doubles(dev_invstd.download()), invstd, stat_tol, stat_tol) &&
           compare("running_mean", to_doubles(dev_rmean.download()), rmean, stat_tol, stat_tol) &&
           compare("running_var", to_doubles(dev_rvar.download()), rvar, stat_tol, stat_tol);
  }, forward, naive ? &few : nullptr);

  // the backward reads the reference statistics and y, so it is checked on its own
  dev_y.upload(y);
  std::vector<float> meanf(mean.begin(), mean.end()), invstdf(invstd.begin(), invstd.end());
  dev_mean.upload(meanf), dev_invstd.upload(invstdf);
  const auto backward = [&] {
    batchnorm_backward_train_rung_gpu<T>(rung, M, C, dev_x.get(), dev_y.get(), dev_dy.get(),
                                         dev_gamma.get(), dev_mean.get(), dev_invstd.get(), true,
                                         dev_dx.get(), dev_dgamma.get(), dev_dbeta.get(), st);
  };
  measure(ctx, "bn backward +relu" + suffix, dt, int64_t(un), 8 * bytes, suffix.empty(), [&] {
    dev_dx.upload(dx0), dev_dgamma.upload(dgamma0), dev_dbeta.upload(dbeta0);
    backward();
    std::vector<double> dym(un, 0.0), dx = to_doubles(dx0), dgamma = to_doubles(dgamma0),
                                      dbeta = to_doubles(dbeta0);
    const std::vector<double> yT = to_doubles(y), dyd = to_doubles(dy);
    relu_backward_cpu<double>(int64_t(un), yT.data(), dyd.data(), dym.data());
    const std::vector<double> md = to_doubles(meanf), id = to_doubles(invstdf);
    batchnorm_backward_train_cpu<double>(M, C, xd.data(), nullptr, dym.data(), gd.data(), md.data(),
                                         id.data(), false, dx.data(), dgamma.data(), dbeta.data());
    const double tdx = 4 * ulp<T>() + 1e-4 + 8 * loose;  // dx subtracts nearly equal sums
    const double tg = 1e-4 + std::sqrt(double(M)) * loose;
    return compare("dx", to_doubles(dev_dx.download()), dx, tdx, tdx) &&
           compare("dgamma", to_doubles(dev_dgamma.download()), dgamma, tg, tg) &&
           compare("dbeta", to_doubles(dev_dbeta.download()), dbeta, tg, tg);
  }, backward, naive ? &few : nullptr);
  dev_mean.poison(), dev_invstd.poison();  // the next rung's forward writes them again
  }
}

// The per-batch input conversion: N uint8 images 224x224x3 (ImageNet's mean and stddev) to T,
// no crop (Hin = Win = S). Bit-identical to the CPU by its header; one ulp is allowed here.
template <typename T> void bench_input(BenchContext& ctx, int64_t n, const char* dt) {
  if (!ctx.wanted_any({"input normalize"}, dt)) return;
  cudaStream_t st = ctx.stream;
  const int S = 224, C = 3, N = int(std::max<int64_t>(1, n / (S * S * C)));
  const size_t un = size_t(N) * S * S * C;
  const std::vector<float> mean = {0.485f, 0.456f, 0.406f}, stddev = {0.229f, 0.224f, 0.225f};
  std::vector<uint8_t> x(un);
  for (size_t i = 0; i < un; i++) x[i] = uint8_t(rng_u64(31, i) & 0xff);
  DeviceArray<uint8_t> dev_x(x, st);
  DeviceArray<float> dev_mean(mean, st), dev_std(stddev, st);
  DeviceArray<T> dev_y(un, st);
  const auto run = [&] {
    input_normalize_gpu<T>(N, S, S, C, S, dev_x.get(), nullptr, dev_mean.get(), dev_std.get(),
                           dev_y.get(), st);
  };
  measure(ctx, "input normalize", dt, int64_t(un), double(un) * (1 + sizeof(T)), false, [&] {
    dev_y.poison();
    run();
    std::vector<T> want(un);
    input_normalize_cpu<T>(N, S, C, x.data(), mean, stddev, want.data());
    return compare("y", to_doubles(dev_y.download()), to_doubles(want), ulp<T>(), 0);
  }, run);
}

// fp32 <-> fp16, bit-identical to cast_cpu (kernels/cast.h): checked exactly.
inline void bench_casts(BenchContext& ctx, int64_t n) {
  if (!ctx.wanted_any({"cast f32->f16", "cast f16->f32"}, "-")) return;
  cudaStream_t st = ctx.stream;
  const size_t un = size_t(n);
  const std::vector<float> f = random_vec<float>(un, 41, -4, 4);
  const std::vector<half_t> h = random_vec<half_t>(un, 42, -4, 4);
  DeviceArray<float> dev_f(f, st), dev_fout(un, st);
  DeviceArray<half_t> dev_h(h, st), dev_hout(un, st);
  measure(ctx, "cast f32->f16", "-", n, 6.0 * n, true, [&] {
    dev_hout.poison();
    cast_f32_to_f16_gpu(n, dev_f.get(), dev_hout.get(), st);
    std::vector<half_t> want(un);
    cast_cpu<float, half_t>(n, f.data(), want.data());
    return compare("f16", to_doubles(dev_hout.download()), to_doubles(want), 0, 0);
  }, [&] { cast_f32_to_f16_gpu(n, dev_f.get(), dev_hout.get(), st); });
  measure(ctx, "cast f16->f32", "-", n, 6.0 * n, true, [&] {
    dev_fout.poison();
    cast_f16_to_f32_gpu(n, dev_h.get(), dev_fout.get(), st);
    std::vector<float> want(un);
    cast_cpu<half_t, float>(n, h.data(), want.data());
    return compare("f32", to_doubles(dev_fout.download()), to_doubles(want), 0, 0);
  }, [&] { cast_f16_to_f32_gpu(n, dev_h.get(), dev_fout.get(), st); });
}

inline void bench_memory_bound(BenchContext& ctx, int64_t n) {
  ctx.report.print("\n## Memory-bound kernels (n = %.0fM elements)\n\n"
                   "| kernel | dtype | elements | bytes/element | %s | GB/s | of copy | check |\n"
                   "| --- | --- | --- | --- | --- | --- | --- | --- |\n", double(n) / (1 << 20),
                   ms_heading());
  bench_elementwise<half_t>(ctx, n, "f16");
  bench_elementwise<float>(ctx, n, "f32");
  bench_batchnorm<half_t>(ctx, n, "f16");
  bench_batchnorm<float>(ctx, n, "f32");
  bench_input<half_t>(ctx, n, "f16");
  bench_input<float>(ctx, n, "f32");
  bench_casts(ctx, n);
}

}  // namespace cutrain
