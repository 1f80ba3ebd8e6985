// defines: BenchLayer and gemm_layers(), the conv and linear layers of a model at batch N, as
// the kernel benchmarks (bench/cpu_kernels.cpp, bench/kernels_gpu.cpp) time them.
//
// It follows the description, tracking one image's (H,W,C), and spells out a resblock's parts
// the way nn/layers.cpp builds them: conv1 3x3 with the block's stride, conv2 3x3, and a 1x1
// projection shortcut with the stride when the shape changes. A linear layer is kept as the
// 1x1 convolution of a 1x1 image with the same N, C, K: that gives its flops and buffer sizes.
#pragma once
#include <string>
#include <vector>

#include "kernels/check.h"
#include "kernels/conv2d.h"
#include "kernels/pool.h"
#include "nn/model.h"

namespace cutrain {

struct BenchLayer {
  std::string name, text;  // "block3.shortcut", "conv 64 1x1 stride=2"
  bool conv = true;        // false: linear (s.H = s.W = s.R = s.S = 1)
  bool bias = false;
  Conv2dShape s;
};

inline std::vector<BenchLayer> gemm_layers(const ModelSpec& spec, const ModelOptions& o,
                                           int batch) {
  std::vector<BenchLayer> out;
  int H = o.H, W = o.W, C = o.C, convs = 0, linears = 0, blocks = 0;
  // Appends the conv `l` reading an (h,w,c) input; returns its output shape.
  const auto add_conv = [&](const std::string& name, const LayerSpec& l, int h, int w, int c) {
    BenchLayer b{name, layer_spec_str(l), true, l.bias, {}};
    b.s.N = batch, b.s.H = h, b.s.W = w, b.s.C = c, b.s.K = l.out, b.s.R = l.R, b.s.S = l.S;
    b.s.stride_h = l.stride_h, b.s.stride_w = l.stride_w;
    b.s.pad_h = l.pad_h, b.s.pad_w = l.pad_w;
    conv2d_check_shape(b.s);
    out.push_back(b);
    return b.s;
  };
  for (const LayerSpec& l : spec.layers) {
    switch (l.kind) {
      case LayerKind::conv: {
        const Conv2dShape s = add_conv("conv" + std::to_string(++convs), l, H, W, C);
        H = s.P(), W = s.Q(), C = s.K;
        break;
      }
      case LayerKind::resblock: {
        const std::string name = "block" + std::to_string(++blocks);
        LayerSpec c;  // as nn/layers.cpp's ResBlock: no bias, a BN follows every conv
        c.kind = LayerKind::conv, c.out = l.out, c.R = c.S = 3, c.pad_h = c.pad_w = 1;
        c.stride_h = c.stride_w = l.stride_h;
        const Conv2dShape s1 = add_conv(name + ".conv1", c, H, W, C);
        if (l.stride_h != 1 || l.out != C) {
          LayerSpec p = c;
          p.R = p.S = 1, p.pad_h = p.pad_w = 0;
          add_conv(name + ".shortcut", p, H, W, C);
        }
        c.stride_h = c.stride_w = 1;
        const Conv2dShape s2 = add_conv(name + ".conv2", c, s1.P(), s1.Q(), s1.K);
        H = s2.P(), W = s2.Q(), C = s2.K;
        break;
      }
      case LayerKind::maxpool: {
        Pool2dShape p;
        p.N = batch, p.H = H, p.W = W, p.C = C, p.R = l.R, p.S = l.S;
        p.stride_h = l.stride_h, p.stride_w = l.stride_w, p.pad_h = l.pad_h, p.pad_w = l.pad_w;
        H = p.P(), W = p.Q();
        break;
      }
      case LayerKind::gap: H = W = 1; break;
      case LayerKind::flatten: C *= H * W, H = W = 1; break;
      case LayerKind::linear: {
        BenchLayer b{"linear" + std::to_string(++linears), layer_spec_str(l), false, l.bias, {}};
        b.s.N = batch, b.s.H = b.s.W = b.s.R = b.s.S = 1;
        b.s.C = C * H * W, b.s.K = l.out_is_classes ? o.classes : l.out;
        C = b.s.K, H = W = 1;
        out.push_back(b);
        break;
      }
      default: break;  // bn, relu: shape unchanged, no GEMM
    }
  }
  return out;
}

}  // namespace cutrain
