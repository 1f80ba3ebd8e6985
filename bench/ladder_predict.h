// defines: ladder_predictions(), the tables of kernels/ladder/README.md that set each rung's
// predicted cost beside what a GPU measured: for every rung of the conv ladder (and cuDNN) on
// default's conv2 (three passes) and conv4 (weight gradient), and every rung of the BatchNorm
// ladder on bench_kernels_gpu's memory-bound size and default's bn2, the launches, the bytes
// and flops its cost function counts (conv2d_*_rung_gpu_cost, batchnorm_*_train_rung_gpu_cost,
// conv2d_*_gpu_cost for cuDNN), the roofline time they give on a GPU's data-sheet peaks
// (ideal_seconds, kernels/launch_plan.h), the time measured (kMeasured, quoted from a results
// file) and how far above its roofline it ran.
//
// Host code, every build: `bench_kernels_gpu --predict` prints it (bench/kernels_gpu.cpp),
// and tests/kernels/kernel_ladder_test.cpp checks that the chapter quotes it as printed, so
// the page cannot drift from the cost functions.
#pragma once
#include <cstdio>
#include <string>
#include <vector>

#include "bench/model_layers.h"
#include "kernels/ladder/batchnorm_ladder.h"
#include "kernels/ladder/conv_ladder.h"
#include "kernels/launch_plan.h"
#include "nn/model.h"

namespace cutrain {

// The one window measured so far, fp16, batch 256 (BatchNorm: 2^20 x 64), in ms:
// bench/results/kernels-gpu-h100-2026-11-26.md. Its `direct` and `tc` rows are the rungs
// "v1 direct" and "v4 tc"; the other rungs had not run.
struct LadderMeasurement {
  const char* layer;  // "default:conv2", "bench"
  const char* pass;   // "forward", "dgrad", "wgrad"; BatchNorm: "forward", "backward"
  const char* impl;   // a rung's name, or "cuDNN"
  double ms;
};
inline const std::vector<LadderMeasurement>& ladder_measurements() {
  static const std::vector<LadderMeasurement> m = {
      {"default:conv2", "forward", "v1 direct", 3.922},
      {"default:conv2", "forward", "v4 tc", 0.090},
      {"default:conv2", "forward", "cuDNN", 0.059},
      {"default:conv2", "dgrad", "v1 direct", 0.725},
      {"default:conv2", "dgrad", "v4 tc", 0.129},
      {"default:conv2", "dgrad", "cuDNN", 0.048},
      {"default:conv2", "wgrad", "v1 direct", 55.846},
      {"default:conv2", "wgrad", "v4 tc", 0.166},
      {"default:conv2", "wgrad", "cuDNN", 0.069},
      {"default:conv4", "wgrad", "v1 direct", 11.920},
      {"default:conv4", "wgrad", "v4 tc", 0.102},
      {"default:conv4", "wgrad", "cuDNN", 0.065},
      {"bench", "forward", "v2 blocked", 0.411},
      {"bench", "backward", "v2 blocked", 0.664},
  };
  return m;
}

// One row: the cost's launches, MB, GFLOP, where the flops run, the roofline time on `gpu`,
// and the measurement of (layer, pass, impl) if there is one.
inline std::string ladder_row(const std::string& label, const char* layer, const char* pass,
                              const char* impl, const LaunchCost& c, const Roofline& gpu) {
  const double us = 1e6 * ideal_seconds(c, gpu);
  char measured[64] = "|";
  for (const LadderMeasurement& m : ladder_measurements())
    if (std::string(m.layer) == layer && std::string(m.pass) == pass &&
        std::string(m.impl) == impl)
      std::snprintf(measured, sizeof measured, "%.0f | %.1fx", 1e3 * m.ms, 1e3 * m.ms / us);
  char row[512];
  std::snprintf(row, sizeof row, "| %s | %s | %s | %d | %.1f | %.2f | %s | %.1f | %s |\n",
                label.c_str(), pass, impl, c.launches, c.bytes / 1e6, c.flops / 1e9,
                c.tensor ? "tensor" : "CUDA cores", us, measured);
  return row;
}

// The chapter's two tables, on `gpu` (a known_gpus() entry), markdown.
inline std::string ladder_predictions(const Roofline& gpu) {
  const int batch = 256;
  ModelOptions o;  // 28x28x1: the Fashion-MNIST shape bench_kernels_gpu uses
  const std::vector<BenchLayer> layers = gemm_layers(load_model_spec("default"), o, batch);
  const auto layer = [&](const std::string& name) {
    for (const BenchLayer& L : layers)
      if (L.name == name) return L;
    CHECK(false, "the default model has no layer " << name);
    return layers[0];
  };
  const auto label = [](const BenchLayer& L) {
    const Conv2dShape& s = L.s;
    char t[128];
    std::snprintf(t, sizeof t, "default:%s (%dx%dx%dx%d, %d %dx%d)", L.name.c_str(), s.N, s.H,
                  s.W, s.C, s.K, s.R, s.S);
    return std::string(t);
  };
  std::string out = "| layer | pass | rung | launches | MB | GFLOP | flops on | roofline us | "
                    "measured us | measured / roofline |\n"
                    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
  struct ConvPass {
    const char* layer;
    const char* pass;
  };
  for (const ConvPass& cp : {ConvPass{"conv2", "forward"}, ConvPass{"conv2", "dgrad"},
                             ConvPass{"conv2", "wgrad"}, ConvPass{"conv4", "wgrad"}}) {
    const BenchLayer L = layer(cp.layer);
    const std::string key = "default:" + L.name, pass = cp.pass;
    const auto cost = [&](ConvRung r) {
      return pass == "forward" ? conv2d_forward_rung_gpu_cost(r, L.s, L.bias)
             : pass == "dgrad" ? conv2d_backward_data_rung_gpu_cost(r, L.s)
                               : conv2d_backward_filter_rung_gpu_cost(r, L.s, true, L.bias);
    };
    for (ConvRung r : kConvRungs)
      out += ladder_row(label(L), key.c_str(), cp.pass, conv_rung_name(r), cost(r), gpu);
    const LaunchCost vendor =
        pass == "forward" ? conv2d_forward_gpu_cost(ConvImpl::cudnn, L.s, 2, L.bias)
        : pass == "dgrad" ? conv2d_backward_data_gpu_cost(ConvImpl::cudnn, L.s, 2)
                          : conv2d_backward_filter_gpu_cost(ConvImpl::cudnn, L.s, 2, true, L.bias);
    out += ladder_row(label(L), key.c_str(), cp.pass, "cuDNN", vendor, gpu);
  }

  // BatchNorm + ReLU, fp16, training: bench_kernels_gpu's size (2^26 elements as 2^20 pixels
  // of 64 channels, bench/gpu_memory_bound.h) and the default model's bn2 (conv2's output).
  out += "\n| layer | pass | rung | launches | MB | GFLOP | flops on | roofline us | "
         "measured us | measured / roofline |\n"
         "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
  const BenchLayer conv2 = layer("conv2");
  struct BnLayer {
    const char* key;
    std::string label;
    int64_t M;
    int C;
  };
  const int64_t conv2_pixels = int64_t(batch) * conv2.s.P() * conv2.s.Q();
  for (const BnLayer& b :
       {BnLayer{"bench", "bench_kernels_gpu (2^20 x 64)", int64_t(1) << 20, 64},
        BnLayer{"default:bn2", "default:bn2 (" + std::to_string(conv2_pixels) + " x " +
                                   std::to_string(conv2.s.K) + ")",
                conv2_pixels, conv2.s.K}})
    for (const char* pass : {"forward", "backward"})
      for (BnRung r : kBnRungs) {
        const LaunchCost c = std::string(pass) == "forward"
                                 ? batchnorm_forward_train_rung_gpu_cost(r, b.M, b.C, 2, true)
                                 : batchnorm_backward_train_rung_gpu_cost(r, b.M, b.C, 2, true,
                                                                          true);
        out += ladder_row(b.label, b.key, pass, bn_rung_name(r), c, gpu);
      }
  return out;
}

}  // namespace cutrain
