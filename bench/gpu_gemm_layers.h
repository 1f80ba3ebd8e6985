// defines: bench_gemm_layers(), bench_kernels_gpu's conv and linear rows. Every distinct conv
// and linear layer shape of the chosen models at batch N (layers of the same shape, e.g. the
// two convs of a ResNet block, are timed once and named together), in fp16:
//   passes  forward, dgrad (backward data, dx +=), wgrad (backward filter, dw += and db +=)
//   impls   conv: every rung of the conv ladder (kernels/ladder/conv_ladder.h: v1 direct,
//           v2 gemm, v3 fma, v4 tc, v5 async; v1 and v4 are the production direct and tc) and
//           cuDNN, and after the table the ladder's summary: each rung's time and its speed-up
//           over the rung below; linear: direct, tc and cuBLAS (kernels/impl.h's switch)
// A row's key, for --only, is "conv <pass> <impl> <layers>": `--only "conv wgrad v2 gemm
// default:conv4"` runs one rung's one pass on one layer (checked, then timed).
// Each implementation is first checked against the CPU reference (run in fp32 on the same
// fp16 values) at a small batch; a wrong one is reported and not timed. Then each pass is
// timed at the full batch: TFLOP/s (2 flops per multiply-add; each pass costs the forward's
// flops), the share of the cuBLAS GEMM ceiling, and the speed relative to the vendor library
// (vendor ms / ms: 1 = as fast, 0.5 = twice as slow).
#pragma once
#include <algorithm>
#include <string>
#include <vector>

#include "bench/gpu_timing.h"
#include "bench/model_layers.h"
#include "kernels/conv2d.h"
#include "kernels/impl.h"
#include "kernels/ladder/conv_ladder.h"
#include "kernels/linear.h"
#include "kernels/vendor.h"

namespace cutrain {

// One layer shape and every model layer that has it ("default:conv2", "resnet:block1.conv1").
struct LayerGroup {
  BenchLayer layer;
  std::vector<std::string> names;
};

inline std::vector<LayerGroup> distinct_layers(const std::vector<std::string>& models,
                                               int batch) {
  std::vector<LayerGroup> groups;
  for (const std::string& m : models) {
    ModelOptions o;  // 28x28x1, 10 classes: the Fashion-MNIST shape
    for (const BenchLayer& L : gemm_layers(load_model_spec(m), o, batch)) {
      const auto same = [&](const LayerGroup& g) {
        const Conv2dShape &a = g.layer.s, &b = L.s;
        return g.layer.conv == L.conv && g.layer.bias == L.bias && a.N == b.N && a.H == b.H &&
               a.W == b.W && a.C == b.C && a.K == b.K && a.R == b.R && a.S == b.S &&
               a.stride_h == b.stride_h && a.stride_w == b.stride_w && a.pad_h == b.pad_h &&
               a.pad_w == b.pad_w;
      };
      auto it = std::find_if(groups.begin(), groups.end(), same);
      if (it == groups.end()) groups.push_back({L, {}}), it = groups.end() - 1;
      it->names.push_back(m + ":" + L.name);
    }
  }
  return groups;
}

enum class Pass { forward, dgrad, wgrad };
constexpr Pass kPasses[3] = {Pass::forward, Pass::dgrad, Pass::wgrad};
inline const char* pass_name(Pass p) {
  return p == Pass::forward ? "forward" : p == Pass::dgrad ? "dgrad" : "wgrad";
}

// Host and device copies of one layer's tensors (fp16) at shape s: inputs and the prefill of
// the accumulated gradients random, y poisoned.
struct GemmTensors {
  std::vector<half_t> x, w, b, dy, dx, dw, db;  // the host values uploaded
  DeviceArray<half_t> dev_x, dev_w, dev_b, dev_y, dev_dy, dev_dx, dev_dw, dev_db;

  GemmTensors(const Conv2dShape& s, cudaStream_t st)
      : x(random_vec<half_t>(size_t(s.N) * s.H * s.W * s.C, 1)),
        w(random_vec<half_t>(size_t(s.K) * s.R * s.S * s.C, 2)),
        b(random_vec<half_t>(size_t(s.K), 3)),
        dy(random_vec<half_t>(size_t(s.N) * s.P() * s.Q() * s.K, 4)),
        dx(random_vec<half_t>(x.size(), 5)),
        dw(random_vec<half_t>(w.size(), 6)),
        db(random_vec<half_t>(b.size(), 7)),
        dev_x(x, st), dev_w(w, st), dev_b(b, st), dev_y(dy.size(), st), dev_dy(dy, st),
        dev_dx(dx, st), dev_dw(dw, st), dev_db(db, st) {
    dev_y.poison();
  }
};

// impl: conv: 0 .. kRungs-1 the ladder's rungs in order (kConvRungs), kVendor cuDNN; linear:
// 0 direct, 1 tc, kVendor cuBLAS.
constexpr int kRungs = int(sizeof kConvRungs / sizeof kConvRungs[0]);
constexpr int kVendor = kRungs, kImpls = kRungs + 1;
inline const char* impl_label(const BenchLayer& L, int impl) {
  if (impl == kVendor) return L.conv ? "cudnn" : "cublas";
  if (L.conv) return conv_rung_name(kConvRungs[impl]);
  return impl == 0 ? "direct" : "tc";
}
// The implementations a layer is timed on, the vendor first: its time is the yardstick.
inline std::vector<int> impls_of(const BenchLayer& L) {
  std::vector<int> v{kVendor};
  for (int i = 0; i < (L.conv ? kRungs : 2); i++) v.push_back(i);
  return v;
}

inline void run_pass(const BenchLayer& L, const Conv2dShape& s, int impl, Pass p,
                     const GemmTensors& t, cudaStream_t st) {
  const half_t* b = L.bias ? t.dev_b.get() : nullptr;
  half_t* db = L.bias ? t.dev_db.get() : nullptr;
  if (L.conv && impl < kRungs) {  // a rung of the ladder
    const ConvRung r = kConvRungs[impl];
    if (p == Pass::forward)
      conv2d_forward_rung_gpu(r, s, t.dev_x.get(), t.dev_w.get(), b, t.dev_y.get(), st);
    else if (p == Pass::dgrad)
      conv2d_backward_data_rung_gpu(r, s, t.dev_dy.get(), t.dev_w.get(), t.dev_dx.get(), st);
    else
      conv2d_backward_filter_rung_gpu(r, s, t.dev_x.get(), t.dev_dy.get(), t.dev_dw.get(), db,
                                      st);
  } else if (L.conv) {  // cuDNN
    if (p == Pass::forward)
      conv2d_forward_gpu<half_t>(ConvImpl::cudnn, s, t.dev_x.get(), t.dev_w.get(), b,
                                 t.dev_y.get(), st);
    else if (p == Pass::dgrad)
      conv2d_backward_data_gpu<half_t>(ConvImpl::cudnn, s, t.dev_dy.get(), t.dev_w.get(),
                                       t.dev_dx.get(), st);
    else
      conv2d_backward_filter_gpu<half_t>(ConvImpl::cudnn, s, t.dev_x.get(), t.dev_dy.get(),
                                         t.dev_dw.get(), db, st);
  } else {
    const LinearImpl li = impl == kVendor ? LinearImpl::cublas
                          : impl == 1     ? LinearImpl::tc
                                          : LinearImpl::direct;
    if (p == Pass::forward)
      linear_forward_gpu<half_t>(li, s.N, s.C, s.K, t.dev_x.get(), t.dev_w.get(), b,
                                 t.dev_y.get(), st);
    else if (p == Pass::dgrad)
      linear_backward_gpu<half_t>(li, s.N, s.C, s.K, t.dev_x.get(), t.dev_w.get(),
                                  t.dev_dy.get(), t.dev_dx.get(), nullptr, nullptr, st);
    else
      linear_backward_gpu<half_t>(li, s.N, s.C, s.K, t.dev_x.get(), t.dev_w.get(),
                                  t.dev_dy.get(), nullptr, t.dev_dw.get(), db, st);
  }
}

inline std::vector<float> floats(const std::vector<half_t>& v) {
  return std::vector<float>(v.begin(), v.end());
}

// Runs the three passes of `impl` once at batch min(N, check_batch) and compares each with
// the CPU reference in fp32 on the same fp16 values. Tolerance: the outputs are fp16, rounded
// once (relative 2^-11 ~ 4.9e-4); sums run in fp32 in another order, and some cuDNN algorithms
// (Winograd, FFT) lose a little more. 5e-3 of the value plus 5e-3 of the largest output passes
// those and fails any indexing or tiling mistake, whose errors are of the output's size.
inline void validate_layer(const BenchLayer& L, int impl, int check_batch, cudaStream_t st,
                           Check out[3]) {
  Conv2dShape s = L.s;
  s.N = std::min(s.N, check_batch);
  GemmTensors t(s, st);
  for (Pass p : kPasses) run_pass(L, s, impl, p, t, st);
  const std::vector<float> x = floats(t.x), w = floats(t.w), b = floats(t.b), dy = floats(t.dy);
  std::vector<float> y(t.dy.size()), dx = floats(t.dx), dw = floats(t.dw), db = floats(t.db);
  const float* bias = L.bias ? b.data() : nullptr;
  float* dbias = L.bias ? db.data() : nullptr;
  if (L.conv) {
    conv2d_forward_cpu<float>(s, x.data(), w.data(), bias, y.data());
    conv2d_backward_data_cpu<float>(s, dy.data(), w.data(), dx.data());
    conv2d_backward_filter_cpu<float>(s, x.data(), dy.data(), dw.data(), dbias);
  } else {
    linear_forward_cpu<float>(s.N, s.C, s.K, x.data(), w.data(), bias, y.data());
    linear_backward_cpu<float>(s.N, s.C, s.K, x.data(), w.data(), dy.data(), dx.data(),
                               dw.data(), dbias);
  }
  const double tol = 5e-3;
  out[0] = compare("y", to_doubles(t.dev_y.download()), to_doubles(y), tol, tol);
  out[1] = compare("dx", to_doubles(t.dev_dx.download()), to_doubles(dx), tol, tol);
  out[2] = compare("dw", to_doubles(t.dev_dw.download()), to_doubles(dw), tol, tol);
  if (L.bias) out[2] = out[2] && compare("db", to_doubles(t.dev_db.download()), to_doubles(db),
                                         tol, tol);
}

inline std::string shape_text(const BenchLayer& L) {
  const Conv2dShape& s = L.s;
  char buf[160];
  if (L.conv)
    std::snprintf(buf, sizeof buf, "%dx%dx%dx%d, %d %dx%d /%d p%d%s", s.N, s.H, s.W, s.C, s.K,
                  s.R, s.S, s.stride_h, s.pad_h, L.bias ? " +b" : "");
  else
    std::snprintf(buf, sizeof buf, "%dx%d, %d%s", s.N, s.C, s.K, L.bias ? " +b" : "");
  return buf;
}

inline std::string names_text(const std::vector<std::string>& names) {
  std::string t = names[0];
  if (names.size() > 1) t += names.size() == 2 ? ", " + names[1]
                                               : " +" + std::to_string(names.size() - 1);
  return t;
}

// One row of the table (and of the JSON). ms = 0: not timed (the check failed).
inline void gemm_row(BenchContext& ctx, const LayerGroup& g, Pass p, int impl, double ms,
                     double vendor_ms, const Check& c) {
  const BenchLayer& L = g.layer;
  const double tflops = ms > 0 ? double(L.s.forward_flops()) / (ms * 1e9) : 0;
  const double of_peak = ctx.ceilings.gemm_tflops > 0 ? tflops / ctx.ceilings.gemm_tflops : 0;
  const double vs_vendor = ms > 0 && vendor_ms > 0 ? vendor_ms / ms : 0;
  char t[3][32] = {"", "", ""};
  if (ms > 0) {
    std::snprintf(t[0], sizeof t[0], "%.3f", ms);
    std::snprintf(t[1], sizeof t[1], "%.1f", tflops);
    if (of_peak > 0) std::snprintf(t[2], sizeof t[2], "%.0f%%", 100 * of_peak);
  }
  char vs[32] = "";
  if (vs_vendor > 0) std::snprintf(vs, sizeof vs, "%.2fx", vs_vendor);
  ctx.report.print("| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", names_text(g.names).c_str(),
                   shape_text(L).c_str(), pass_name(p), impl_label(L, impl), t[0], t[1], t[2],
                   vs, c.text.c_str());
  ctx.report.add({{"family", L.conv ? "conv" : "linear"}, {"layers", g.names},
                  {"shape", shape_text(L)}, {"pass", pass_name(p)},
                  {"impl", impl_label(L, impl)}, {"dtype", "f16"}, {"ms", ms},
                  {"flops", L.s.forward_flops()}, {"tflops", tflops},
                  {"of_gemm_ceiling", of_peak}, {"vs_vendor", vs_vendor}, {"check", c.text}});
  if (L.conv && p == Pass::forward && impl < kRungs && kConvRungs[impl] == ConvRung::tc &&
      vendor_ms > 0)
    ctx.tc_conv_vs_cudnn.push_back({names_text(g.names), vs_vendor});
}

inline void bench_gemm_layers(BenchContext& ctx, const std::vector<std::string>& models,
                              int batch, int check_batch) {
  Report& r = ctx.report;
  std::string model_list;
  for (const std::string& m : models) model_list += (model_list.empty() ? "" : ", ") + m;
  r.print("\n## Conv and linear layers (fp16, batch %d; %s)\n\n", batch, model_list.c_str());
  r.print("| layers | shape (NxHxWxC, K RxS /stride pad) | pass | impl | %s | TFLOP/s | "
          "of GEMM ceiling | speed vs vendor | check |\n"
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n", ms_heading());
  struct LadderRow {  // the ladder's summary: ms per impl (0: not timed)
    std::string layers;
    Pass pass;
    double ms[kImpls];
  };
  std::vector<LadderRow> ladder;
  for (const LayerGroup& g : distinct_layers(models, batch)) {
    const BenchLayer& L = g.layer;
    double times[3][kImpls] = {};  // per pass and impl
    const auto wanted = [&](Pass p, int impl) {
      std::string key = (L.conv ? "conv " : "linear ") + std::string(pass_name(p)) + " " +
                        impl_label(L, impl);
      for (const std::string& n : g.names) key += " " + n;
      return ctx.wanted(key);
    };
    double vendor_ms[3] = {0, 0, 0};  // per pass
    for (int impl : impls_of(L)) {
      if (!wanted(Pass::forward, impl) && !wanted(Pass::dgrad, impl) &&
          !wanted(Pass::wgrad, impl))
        continue;
      if (impl == kVendor && L.conv && !cudnn_built()) {
        r.print("| %s | %s | all | cudnn | | | | | not in this build (no cudnn.h) |\n",
                names_text(g.names).c_str(), shape_text(L).c_str());
        continue;
      }
      Check checks[3];
      validate_layer(L, impl, check_batch, ctx.stream, checks);
      GemmTensors t(L.s, ctx.stream);
      for (Pass p : kPasses) {
        if (!wanted(p, impl)) continue;
        const Check& c = checks[int(p)];
        double ms = 0;
        if (c.ok)
          ms = time_gpu(ctx.stream, ctx.timing, [&] { run_pass(L, L.s, impl, p, t, ctx.stream); });
        else
          r.failures++;
        if (impl == kVendor) vendor_ms[int(p)] = ms;
        times[int(p)][impl] = ms;
        gemm_row(ctx, g, p, impl, ms, vendor_ms[int(p)], c);
      }
    }
    if (L.conv)
      for (Pass p : kPasses) {  // the passes that timed anything (--only may leave none)
        LadderRow row{names_text(g.names), p, {}};
        bool timed = false;
        for (int i = 0; i < kImpls; i++) row.ms[i] = times[int(p)][i], timed |= row.ms[i] > 0;
        if (timed) ladder.push_back(row);
      }
  }
  // The ladder: the rungs in order, cuDNN; each rung's speed-up over the one below it (its
  // time / this time), and the top rung against cuDNN.
  std::string heads, rules;
  for (ConvRung rung : kConvRungs) heads += std::string(" ") + conv_rung_name(rung) + " |";
  for (int k = 0; k < kRungs + 4; k++) rules += " --- |";
  const char* top = conv_rung_name(kConvRungs[kRungs - 1]);
  r.print("\n### The conv ladder (kernels/ladder/README.md): %s, and the speed-up over the "
          "rung below\n\n| layers | pass |%s cuDNN | %s vs cuDNN |\n|%s\n",
          ms_heading(), heads.c_str(), top, rules.c_str());
  for (const LadderRow& row : ladder) {
    std::string cells;
    char buf[64];
    for (int k = 0; k < kRungs; k++) {
      const double ms = row.ms[k], below = k > 0 ? row.ms[k - 1] : 0;
      if (ms <= 0) std::snprintf(buf, sizeof buf, " |");
      else if (below > 0) std::snprintf(buf, sizeof buf, " %.3f (%.1fx) |", ms, below / ms);
      else std::snprintf(buf, sizeof buf, " %.3f |", ms);
      cells += buf;
    }
    const double cudnn = row.ms[kVendor], best = row.ms[kRungs - 1];
    char vendor[32] = "", ratio[32] = "";
    if (cudnn > 0) std::snprintf(vendor, sizeof vendor, "%.3f", cudnn);
    if (cudnn > 0 && best > 0) std::snprintf(ratio, sizeof ratio, "%.2fx", cudnn / best);
    r.print("| %s | %s |%s %s | %s |\n", row.layers.c_str(), pass_name(row.pass), cells.c_str(),
            vendor, ratio);
  }
}

}  // namespace cutrain
