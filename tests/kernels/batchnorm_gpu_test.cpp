// batchnorm GPU kernels (plain and fused with the ReLU after them) against the CPU reference:
// batchnorm_*_cpu, composed with relu_forward_cpu / relu_backward_cpu for the fused path; and
// the BatchNorm ladder's rungs (kernels/ladder/batchnorm_ladder.h) the same way, v1's plain
// running sums allowed M roundings instead of sqrt(M).
//
// Tolerances. The GPU and the CPU both add each channel's M terms blocked pairwise in fp32
// (kernels/blocked_sum.h), in different orders. Rounding errors of a running sum behave like a
// random walk, about sqrt(M) * 2^-24 relative; kSum(M) = 8 sqrt(M) 2^-24 allows eight times
// that, more than enough for the blocked sums. From it:
//   per-channel statistics: relative and absolute kSum (values are O(1));
//   y: 4 kSum absolute (an error in the mean moves y by invstd*dmean, one in invstd by
//      xhat*dinvstd/invstd, |xhat| <= ~3);
//   dx: 8 kSum absolute (gamma*invstd*(dsum_dy + xhat*dsum_dy_xhat)/M, sums over M terms);
//   dgamma, dbeta: 4 sqrt(M) kSum absolute (sums of M terms of size ~1 whose running total is
//      ~sqrt(M));
//   fp16 outputs may land on the neighbouring half of the fp32 value: plus 2^-10 relative
//      (one fp16 ulp).
#include <cmath>
#include <vector>

#include "kernels/batchnorm.h"
#include "kernels/elementwise.h"
#include "kernels/ladder/batchnorm_ladder.h"
#include "tests/kernels/gpu_compare.h"
#include "tests/kernels/batch_parts.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {

double sum_tol(int64_t M) { return 8 * std::sqrt(double(M)) * std::ldexp(1.0, -24); }
template <typename T> double ulp_rtol() { return sizeof(T) == 2 ? std::ldexp(1.0, -10) : 0; }

// The CPU reference of the fused training forward: BN, then relu in place when fused.
template <typename T>
void cpu_forward_train(int64_t M, int C, const std::vector<T>& x, const std::vector<float>& g,
                       const std::vector<float>& b, double eps, bool relu, std::vector<T>& y,
                       std::vector<float>& sm, std::vector<float>& si, std::vector<float>& rm,
                       std::vector<float>& rv) {
  batchnorm_forward_train_cpu<T>(M, C, x.data(), g.data(), b.data(), eps, 0.1, false, y.data(),
                                 sm.data(), si.data(), rm.data(), rv.data());
  if (relu) relu_forward_cpu<T>(M * C, y.data(), y.data());
}

// The fused backward's dy: relu_backward_cpu into a zeroed buffer (or dy itself).
template <typename T>
std::vector<T> cpu_masked_dy(bool relu, const std::vector<T>& y, const std::vector<T>& dy) {
  if (!relu) return dy;
  std::vector<T> g(dy.size(), T(0.0f));
  relu_backward_cpu<T>(int64_t(dy.size()), y.data(), dy.data(), g.data());
  return g;
}

struct Case {
  int64_t M;
  int C;
};
// The long case spans 393 row groups of the sums (batchnorm.cu; on the simulator a smaller one:
// still 97).
const Case kCases[] = {{2, 3}, {429, 67}, {4099, 5}, {sim_or<int64_t>(50177, 12289), 33}};

// A layer's random inputs, from seeds seed .. seed + 4: x (M,C) with mean ~0.5 (not centred),
// gamma, beta and the running statistics (C).
template <typename T> struct Inputs {
  std::vector<T> x;
  std::vector<float> g, b, rm, rv;
};
template <typename T> Inputs<T> random_inputs(size_t n, size_t Cs, uint64_t seed) {
  return {random_values<T>(n, seed, -2, 3), random_values<float>(Cs, seed + 1, 0.5, 1.5),
          random_values<float>(Cs, seed + 2, -0.5, 0.5), random_values<float>(Cs, seed + 3, -1, 1),
          random_values<float>(Cs, seed + 4, 0.5, 2)};
}

}  // namespace

TEST_CASE_TEMPLATE("batchnorm [gpu]: training forward and backward match the CPU, on every rung "
                   "of the ladder (v2: the production kernels)", T, float, half_t) {
  REQUIRE_GPU();
  Stream st;
  const double eps = 1e-5;
  // kCases, and C a multiple of 8 (where v3 runs; elsewhere it runs v2: bn_rung_runs)
  std::vector<Case> cases(std::begin(kCases), std::end(kCases));
  for (const Case& k : {Case{1568, 32}, Case{1000, 64}, Case{37, 8},
                        Case{sim_or<int64_t>(6272, 1568), 128}})
    cases.push_back(k);
  for (BnRung r : kBnRungs)
    for (const Case& k : cases)
      for (bool relu : {false, true}) {
        const int64_t M = k.M;
        const int C = k.C;
        const size_t n = size_t(M) * size_t(C), Cs = size_t(C);
        INFO(bn_rung_name(r) << ": M " << M << " C " << C << (relu ? " fused relu" : ""));
        // v1 sums each channel in one running fp32 sum: M roundings, not ~sqrt(M)
        const double S = r == BnRung::naive ? 4 * double(M) * std::ldexp(1.0, -24) : sum_tol(M);
        const Inputs<T> in = random_inputs<T>(n, Cs, 11);
        std::vector<T> y(n);
        std::vector<float> sm(Cs), si(Cs), rm = in.rm, rv = in.rv;
        cpu_forward_train<T>(M, C, in.x, in.g, in.b, eps, relu, y, sm, si, rm, rv);
        DeviceBuffer d_x = upload(in.x), d_g = upload(in.g), d_b = upload(in.b);
        DeviceBuffer d_rm = upload(in.rm), d_rv = upload(in.rv);
        DeviceBuffer d_y = poisoned<T>(n, st.get()), d_sm = poisoned<float>(Cs, st.get()),
                     d_si = poisoned<float>(Cs, st.get());
        batchnorm_forward_train_rung_gpu<T>(r, M, C, ptr<T>(d_x), ptr<float>(d_g), ptr<float>(d_b),
                                            eps, 0.1, relu, ptr<T>(d_y), ptr<float>(d_sm),
                                            ptr<float>(d_si), ptr<float>(d_rm), ptr<float>(d_rv),
                                            st.get());
        st.synchronize();
        require_close_values(download<T>(d_y, n), y, 4 * S, ulp_rtol<T>());
        require_close_values(download<float>(d_sm, Cs), sm, S, S);
        require_close_values(download<float>(d_si, Cs), si, S, S);
        require_close_values(download<float>(d_rm, Cs), rm, S, S);
        require_close_values(download<float>(d_rv, Cs), rv, S, S);

        const std::vector<T> dy = random_values<T>(n, 16, -1, 1);
        const std::vector<T> dx0 = random_values<T>(n, 17, -1, 1);
        const std::vector<float> dg0 = random_values<float>(Cs, 18, -1, 1);
        const std::vector<float> db0 = random_values<float>(Cs, 19, -1, 1);
        std::vector<T> dx = dx0;
        std::vector<float> dg = dg0, db = db0;
        batchnorm_backward_train_cpu<T>(M, C, in.x.data(), nullptr,
                                        cpu_masked_dy(relu, y, dy).data(), in.g.data(),
                                        sm.data(), si.data(), false, dx.data(), dg.data(),
                                        db.data());
        DeviceBuffer d_ycpu = upload(y), d_dy = upload(dy), d_dx = upload(dx0);
        DeviceBuffer d_smc = upload(sm), d_sic = upload(si), d_dg = upload(dg0),
                     d_db = upload(db0);
        batchnorm_backward_train_rung_gpu<T>(r, M, C, ptr<T>(d_x), ptr<T>(d_ycpu), ptr<T>(d_dy),
                                             ptr<float>(d_g), ptr<float>(d_smc),
                                             ptr<float>(d_sic), relu, ptr<T>(d_dx),
                                             ptr<float>(d_dg), ptr<float>(d_db), st.get());
        st.synchronize();
        const double grad_tol = 4 * std::sqrt(double(M)) * S;
        require_close_values(download<T>(d_dx, n), dx, 8 * S, ulp_rtol<T>());
        require_close_values(download<float>(d_dg, Cs), dg, grad_tol, S);
        require_close_values(download<float>(d_db, Cs), db, grad_tol, S);
      }
}

TEST_CASE_TEMPLATE("batchnorm [gpu]: eval forward and backward match the CPU", T, float, half_t) {
  REQUIRE_GPU();
  Stream st;
  const double eps = 1e-3;
  for (const Case& k : kCases)
    for (bool relu : {false, true}) {
      const int64_t M = k.M;
      const int C = k.C;
      const size_t n = size_t(M) * size_t(C), Cs = size_t(C);
      INFO("M " << M << " C " << C << (relu ? " fused relu" : ""));
      const double S = sum_tol(M);
      const Inputs<T> in = random_inputs<T>(n, Cs, 11);
      const std::vector<T>& x = in.x;
      const std::vector<float> &g = in.g, &b = in.b, &rm = in.rm, &rv = in.rv;
      std::vector<T> y(n);
      batchnorm_forward_eval_cpu<T>(M, C, x.data(), g.data(), b.data(), rm.data(), rv.data(), eps,
                                    false, y.data());
      if (relu) relu_forward_cpu<T>(int64_t(n), y.data(), y.data());
      DeviceBuffer d_x = upload(x), d_g = upload(g), d_b = upload(b), d_rm = upload(rm),
                   d_rv = upload(rv), d_y = poisoned<T>(n, st.get());
      batchnorm_forward_eval_gpu<T>(M, C, ptr<T>(d_x), ptr<float>(d_g), ptr<float>(d_b),
                                    ptr<float>(d_rm), ptr<float>(d_rv), eps, relu, ptr<T>(d_y),
                                    st.get());
      st.synchronize();
      // No sums: the same fp32 formula per element, up to the GPU contracting a multiply-add
      // into an FMA (a few fp32 ulps).
      require_close_values(download<T>(d_y, n), y, 1e-6, 1e-6 + ulp_rtol<T>());

      const std::vector<T> dy = random_values<T>(n, 16, -1, 1);
      const std::vector<T> dx0 = random_values<T>(n, 17, -1, 1);
      const std::vector<float> dg0 = random_values<float>(Cs, 18, -1, 1);
      const std::vector<float> db0 = random_values<float>(Cs, 19, -1, 1);
      std::vector<T> dx = dx0;
      std::vector<float> dg = dg0, db = db0;
      batchnorm_backward_eval_cpu<T>(M, C, x.data(), nullptr, cpu_masked_dy(relu, y, dy).data(),
                                     g.data(), rm.data(), rv.data(), eps, false, dx.data(),
                                     dg.data(), db.data());
      DeviceBuffer d_ycpu = upload(y), d_dy = upload(dy), d_dx = upload(dx0), d_dg = upload(dg0),
                   d_db = upload(db0);
      batchnorm_backward_eval_gpu<T>(M, C, ptr<T>(d_x), ptr<T>(d_ycpu), ptr<T>(d_dy),
                                     ptr<float>(d_g), ptr<float>(d_rm), ptr<float>(d_rv), eps,
                                     relu, ptr<T>(d_dx), ptr<float>(d_dg), ptr<float>(d_db),
                                     st.get());
      st.synchronize();
      const double grad_tol = 4 * std::sqrt(double(M)) * S;
      require_close_values(download<T>(d_dx, n), dx, 1e-6, 1e-6 + ulp_rtol<T>());
      require_close_values(download<float>(d_dg, Cs), dg, grad_tol, S);
      require_close_values(download<float>(d_db, Cs), db, grad_tol, S);
    }
}

// Null gradient outputs are skipped (as on the CPU), and the reductions give the same bits on
// every run (fixed grid, no atomics).
TEST_CASE("batchnorm [gpu]: null gradients are skipped; results are the same bits every run") {
  REQUIRE_GPU();
  Stream st;
  const int64_t M = 3001;
  const int C = 19;
  const size_t n = size_t(M) * C, Cs = size_t(C);
  const std::vector<half_t> x = random_values<half_t>(n, 21, -3, 2);
  const std::vector<half_t> dy = random_values<half_t>(n, 22, -1, 1);
  const std::vector<float> g(Cs, 1.0f), b(Cs, 0.0f), r0(Cs, 0.5f), z(Cs, 0.0f);
  DeviceBuffer d_x = upload(x), d_dy = upload(dy), d_g = upload(g), d_b = upload(b);
  std::vector<std::vector<float>> runs;
  for (int run = 0; run < 2; run++) {
    DeviceBuffer d_y = poisoned<half_t>(n, st.get()), d_sm = poisoned<float>(Cs, st.get()),
                 d_si = poisoned<float>(Cs, st.get()), d_rm = upload(r0), d_rv = upload(r0),
                 d_dg = upload(z);
    batchnorm_forward_train_gpu<half_t>(M, C, ptr<half_t>(d_x), ptr<float>(d_g),
                                        ptr<float>(d_b), 1e-5, 0.1, true, ptr<half_t>(d_y),
                                        ptr<float>(d_sm), ptr<float>(d_si), ptr<float>(d_rm),
                                        ptr<float>(d_rv), st.get());
    // dx and dbeta null: only dgamma is written.
    batchnorm_backward_train_gpu<half_t>(M, C, ptr<half_t>(d_x), ptr<half_t>(d_y),
                                         ptr<half_t>(d_dy), ptr<float>(d_g), ptr<float>(d_sm),
                                         ptr<float>(d_si), true, nullptr, ptr<float>(d_dg),
                                         nullptr, st.get());
    // dgamma and dbeta null: only dx (no reduction runs).
    DeviceBuffer d_dx = upload(std::vector<half_t>(n, half_t(0.0f)));
    batchnorm_backward_eval_gpu<half_t>(M, C, ptr<half_t>(d_x), nullptr, ptr<half_t>(d_dy),
                                        ptr<float>(d_g), ptr<float>(d_rm), ptr<float>(d_rv),
                                        1e-5, false, ptr<half_t>(d_dx), nullptr, nullptr,
                                        st.get());
    st.synchronize();
    std::vector<float> all;
    for (const DeviceBuffer* d : {&d_sm, &d_si, &d_rm, &d_rv, &d_dg})
      for (float v : download<float>(*d, Cs)) all.push_back(v);
    for (half_t v : download<half_t>(d_y, n)) all.push_back(float(v));
    for (half_t v : download<half_t>(d_dx, n)) all.push_back(float(v));
    for (float v : all) REQUIRE(std::isfinite(v));
    runs.push_back(all);
  }
  require_same_bits(runs[1], runs[0]);
}

// fp16 at its limits: activations near 65504 (mean ~62750, spread ~1600: the two-pass variance
// keeps it) and subnormal activations k * 2^-24 with eps = 0 (variance ~1e-12: invstd ~1e6).
// Every output must be finite, as the fp32 reference is, and match it. Tolerance: as above,
// except that an error in the mean scales with |mean| and reaches y divided by the spread:
// 4 kSum * |mean| / std <= 200 kSum here.
TEST_CASE("batchnorm [gpu]: fp16 inputs near 65504 and near 2^-24 give finite results") {
  REQUIRE_GPU();
  Stream st;
  const int64_t M = 429;
  const int C = 7;
  const size_t n = size_t(M) * C, Cs = size_t(C);
  const double S = sum_tol(M);
  for (int big = 0; big < 2; big++)
    for (bool relu : {false, true}) {
      INFO((big ? "near 65504" : "subnormal") << (relu ? ", fused relu" : ""));
      std::vector<half_t> x(n), dy = random_values<half_t>(n, 31, -1, 1);
      for (size_t i = 0; i < n; i++) {
        const float u = rng_uniform(32, i);
        x[i] = big ? half_t(60000.0f + 5504.0f * u)
                   : half_t(std::floor(u * 41.0f - 20.0f) * 5.9604645e-08f);
        if (!big) dy[i] = half_t(float(dy[i]) / 16384.0f);  // dx ~ invstd * dy stays in range
      }
      const double eps = big ? 1e-5 : 0.0;
      const std::vector<float> g = random_values<float>(Cs, 33, 0.5, 1.5);
      const std::vector<float> b = random_values<float>(Cs, 34, -0.5, 0.5);
      const std::vector<float> r0(Cs, 1.0f), z(Cs, 0.0f);
      std::vector<half_t> y(n), dx(n, half_t(0.0f));
      std::vector<float> sm(Cs), si(Cs), rm = r0, rv = r0, dg = z, db = z;
      cpu_forward_train<half_t>(M, C, x, g, b, eps, relu, y, sm, si, rm, rv);
      batchnorm_backward_train_cpu<half_t>(M, C, x.data(), nullptr,
                                           cpu_masked_dy(relu, y, dy).data(), g.data(), sm.data(),
                                           si.data(), false, dx.data(), dg.data(), db.data());

      DeviceBuffer d_x = upload(x), d_dy = upload(dy), d_g = upload(g), d_b = upload(b),
                   d_rm = upload(r0), d_rv = upload(r0), d_dg = upload(z), d_db = upload(z);
      DeviceBuffer d_y = poisoned<half_t>(n, st.get()), d_sm = poisoned<float>(Cs, st.get()),
                   d_si = poisoned<float>(Cs, st.get()),
                   d_dx = upload(std::vector<half_t>(n, half_t(0.0f)));
      batchnorm_forward_train_gpu<half_t>(M, C, ptr<half_t>(d_x), ptr<float>(d_g),
                                          ptr<float>(d_b), eps, 0.1, relu, ptr<half_t>(d_y),
                                          ptr<float>(d_sm), ptr<float>(d_si), ptr<float>(d_rm),
                                          ptr<float>(d_rv), st.get());
      // The backward on the CPU's forward results, so both see the same ReLU mask (a y within
      // an ulp of 0 may round to either side on the two) and statistics.
      DeviceBuffer d_ycpu = upload(y), d_smc = upload(sm), d_sic = upload(si);
      batchnorm_backward_train_gpu<half_t>(M, C, ptr<half_t>(d_x), ptr<half_t>(d_ycpu),
                                           ptr<half_t>(d_dy), ptr<float>(d_g), ptr<float>(d_smc),
                                           ptr<float>(d_sic), relu, ptr<half_t>(d_dx),
                                           ptr<float>(d_dg), ptr<float>(d_db), st.get());
      st.synchronize();
      const double rt = std::ldexp(1.0, -10);
      require_close_values(download<half_t>(d_y, n), y, 200 * S, rt);
      require_close_values(download<float>(d_sm, Cs), sm, 0, S);
      require_close_values(download<float>(d_si, Cs), si, 0, S);
      require_close_values(download<float>(d_rv, Cs), rv, 0, S);
      // dx is on the scale gamma * invstd * |dy| (~1e-3 near 65504, ~100 for the subnormals):
      // 8 kSum of that scale, as in the first test, plus an fp16 ulp.
      double gain = 0, dy_max = 0;
      for (size_t c = 0; c < Cs; c++) gain = std::fmax(gain, double(g[c]) * si[c]);
      for (const half_t& v : dy) dy_max = std::fmax(dy_max, std::fabs(double(float(v))));
      require_close_values(download<half_t>(d_dx, n), dx, 8 * S * gain * dy_max, rt);
      require_close_values(download<float>(d_dg, Cs), dg, 4 * std::sqrt(double(M)) * S, S);
      require_close_values(download<float>(d_db, Cs), db, 4 * std::sqrt(double(M)) * S, S);
    }
}

TEST_CASE("batchnorm [gpu]: the running statistics' update from a step's summed batch statistics "
          "equals the CPU bit for bit") {
  REQUIRE_GPU();
  Stream st;
  for (int C : {1, 7, 300}) {
    for (double scale : {1.0, 1.0 / 3, 2.0 / 5}) {
      INFO("C " << C << " scale " << scale);
      const std::vector<float> sums = random_values<float>(size_t(2 * C), 11 + C, 0, 4);
      std::vector<float> rm = random_values<float>(size_t(C), 12 + C, -1, 1);
      std::vector<float> rv = random_values<float>(size_t(C), 13 + C, 0.5, 2);
      DeviceBuffer d_s = upload(sums), d_m = upload(rm), d_v = upload(rv);
      CUDA_CHECK(cudaDeviceSynchronize());
      batchnorm_running_update_gpu(C, ptr<float>(d_s), scale, 0.1, ptr<float>(d_m),
                                   ptr<float>(d_v), st.get());
      st.synchronize();
      batchnorm_running_update_cpu<float>(C, sums.data(), scale, 0.1, rm.data(), rv.data());
      REQUIRE(download<float>(d_m, size_t(C)) == rm);
      REQUIRE(download<float>(d_v, size_t(C)) == rv);
    }
  }
}

TEST_CASE_TEMPLATE("batchnorm [gpu]: synchronised over R parts of the batch (BatchNormSync), "
                   "plain and fused, matches the CPU's whole batch", T, float, half_t) {
  // Each part on a thread and a stream of its own; its sums meet the others' on the host (a
  // ThreadSum, as the replicas' all-reduce would). Every part's y and dx against the rows of
  // the CPU's whole-batch result, the statistics against the whole batch's, the parts' dgamma
  // and dbeta added up against the whole batch's: the tolerances of the test above.
  REQUIRE_GPU();
  const int C = 67;
  const size_t Cs = size_t(C);
  const double eps = 1e-5;
  for (const BatchParts& parts : {BatchParts{{200, 229}}, BatchParts{{100, 150, 179}}})
    for (bool relu : {false, true}) {
      const int R = parts.count();
      INFO(R << " parts" << (relu ? ", fused relu" : ""));
      const int64_t M = parts.total();
      const size_t n = size_t(M) * Cs;
      const double S = sum_tol(M);
      const Inputs<T> in = random_inputs<T>(n, Cs, 1);
      const std::vector<T> dy = random_values<T>(n, 6, -1, 1);
      // The whole batch on the CPU.
      std::vector<T> y(n), dx(n, T(0.0f));
      std::vector<float> sm(Cs), si(Cs), rm = in.rm, rv = in.rv, dg(Cs, 0), db(Cs, 0);
      cpu_forward_train<T>(M, C, in.x, in.g, in.b, eps, relu, y, sm, si, rm, rv);
      batchnorm_backward_train_cpu<T>(M, C, in.x.data(), nullptr, cpu_masked_dy(relu, y, dy).data(),
                                      in.g.data(), sm.data(), si.data(), false, dx.data(),
                                      dg.data(), db.data());
      // The parts on the GPU, side by side; each part's results, checked after.
      struct Part {
        std::vector<T> y, dx;
        std::vector<float> sm, si, rm, rv, dg, db;
      };
      std::vector<Part> got(parts.rows.size());
      ThreadSum<float> all(R);
      parts.run([&](int r) {
        Stream st;
        const int64_t Mr = parts.rows[size_t(r)];
        const size_t nr = size_t(Mr) * Cs;
        BatchNormSync sync;
        sync.count = M;
        sync.sum = [&](void* v, int k) {  // device sums -> host -> every part's -> device
          std::vector<float> h(static_cast<size_t>(k));
          st.synchronize();
          copy_sync(h.data(), v, sizeof(float) * size_t(k));
          all.sum(r, h.data(), k);
          copy_sync(v, h.data(), sizeof(float) * size_t(k));
        };
        DeviceBuffer d_x = upload(parts.of(in.x, C, r)), d_dy = upload(parts.of(dy, C, r));
        DeviceBuffer d_g = upload(in.g), d_b = upload(in.b), d_rm = upload(in.rm),
                     d_rv = upload(in.rv);
        DeviceBuffer d_y = poisoned<T>(nr, st.get()), d_sm = poisoned<float>(Cs, st.get()),
                     d_si = poisoned<float>(Cs, st.get());
        DeviceBuffer d_dx = upload(std::vector<T>(nr, T(0.0f)));
        DeviceBuffer d_dg = upload(std::vector<float>(Cs, 0)),
                     d_db = upload(std::vector<float>(Cs, 0));
        batchnorm_forward_train_gpu<T>(Mr, C, ptr<T>(d_x), ptr<float>(d_g), ptr<float>(d_b), eps,
                                       0.1, relu, ptr<T>(d_y), ptr<float>(d_sm), ptr<float>(d_si),
                                       ptr<float>(d_rm), ptr<float>(d_rv), st.get(), &sync);
        batchnorm_backward_train_gpu<T>(Mr, C, ptr<T>(d_x), ptr<T>(d_y), ptr<T>(d_dy),
                                        ptr<float>(d_g), ptr<float>(d_sm), ptr<float>(d_si), relu,
                                        ptr<T>(d_dx), ptr<float>(d_dg), ptr<float>(d_db), st.get(),
                                        &sync);
        st.synchronize();
        Part& p = got[size_t(r)];
        p.y = download<T>(d_y, nr), p.dx = download<T>(d_dx, nr);
        p.sm = download<float>(d_sm, Cs), p.si = download<float>(d_si, Cs);
        p.rm = download<float>(d_rm, Cs);
        p.rv = download<float>(d_rv, Cs);
        p.dg = download<float>(d_dg, Cs), p.db = download<float>(d_db, Cs);
      });
      std::vector<float> dg_sum(Cs, 0), db_sum(Cs, 0);
      for (int r = 0; r < R; r++) {
        INFO("part " << r);
        const Part& p = got[size_t(r)];
        require_close_values(p.y, parts.of(y, C, r), 4 * S, ulp_rtol<T>());
        require_close_values(p.dx, parts.of(dx, C, r), 8 * S, ulp_rtol<T>());
        require_close_values(p.sm, sm, S, S);
        require_close_values(p.si, si, S, S);
        require_close_values(p.rm, rm, S, S);
        require_close_values(p.rv, rv, S, S);
        for (size_t c = 0; c < Cs; c++) dg_sum[c] += p.dg[c], db_sum[c] += p.db[c];
      }
      const double grad_tol = 4 * std::sqrt(double(M)) * S;
      require_close_values(dg_sum, dg, grad_tol, S);
      require_close_values(db_sum, db, grad_tol, S);
    }
}
