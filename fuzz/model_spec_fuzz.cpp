// Fuzz target: model descriptions (nn/model_spec.h), as `--model FILE` and `cutrain describe
// FILE` read them, and the builder that checks them against an input (nn/model.h).
//
// Each input is parsed; every layer it accepted must print (layer_spec_str) to a line that
// parses back to the same layer, as the header promises. Then the model is built for an 8x8x3
// input and 10 classes, and its table printed: the builder's shape checks and shape
// arithmetic (output sizes, flatten's H*W*C, parameter and FLOP counts) are reached through
// the description's numbers (up to 65536 each). The build runs only when a crude upper bound
// of the parameter count, worked out here from the description alone, is at most 2^20: a
// description may legitimately ask for billions of weights, and allocating them would only
// measure the machine. Everything that cutrain checks before allocating stays reachable.
#include <algorithm>
#include <string>

#include "fuzz/feed.h"
#include "nn/model.h"
#include "nn/model_spec.h"

namespace cutrain_fuzz {

namespace {

constexpr double kMaxBuildParams = double(1 << 20);

// An upper bound of the parameters build_model would make for an H x W x C input: spatial
// sizes only grow by the padding, channel counts are the layers' own, flatten multiplies them.
double params_bound(const cutrain::ModelSpec& spec, double H, double W, double C,
                    double classes) {
  using cutrain::LayerKind;
  double total = 0;
  for (const cutrain::LayerSpec& l : spec.layers) {
    const double K = l.out_is_classes ? classes : l.out;
    switch (l.kind) {
      case LayerKind::conv:
        total += K * l.R * l.S * C + K;
        H += 2 * l.pad_h, W += 2 * l.pad_w, C = K;
        break;
      case LayerKind::maxpool: H += 2 * l.pad_h, W += 2 * l.pad_w; break;
      case LayerKind::bn: total += 2 * C; break;
      case LayerKind::resblock: total += 9 * K * C + 9 * K * K + K * C + 6 * K, H += 2, W += 2, C = K; break;
      case LayerKind::flatten: C *= H * W, H = W = 1; break;
      case LayerKind::gap: H = W = 1; break;
      case LayerKind::linear: total += K * C + K, H = W = 1, C = K; break;
      case LayerKind::relu: break;
    }
  }
  return total;
}

}  // namespace

Outcome feed_model_spec(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  return refuse_errors([&] {
    const cutrain::ModelSpec spec = cutrain::parse_model_spec(text, "fuzz.model");
    fuzz_require(!spec.layers.empty(), "an accepted description has layers");
    for (const cutrain::LayerSpec& l : spec.layers) {
      const std::string line = cutrain::layer_spec_str(l);
      cutrain::ModelSpec again;
      try {
        again = cutrain::parse_model_spec(line, "printed");
      } catch (const cutrain::Error& e) {
        fuzz_require(false, "the printed layer '" + line + "' parses: " + e.what());
      }
      fuzz_require(again.layers.size() == 1 && again.layers[0] == l,
                   "the printed layer '" + line + "' parses back to the same layer");
    }
    cutrain::ModelOptions mo;
    mo.H = mo.W = 8;
    mo.C = 3;
    mo.classes = 10;
    if (params_bound(spec, mo.H, mo.W, mo.C, mo.classes) > kMaxBuildParams) return;
    const auto model = cutrain::build_model(spec, mo);
    (void)model->table();
  });
}

}  // namespace cutrain_fuzz

CUTRAIN_FUZZ_TARGET(cutrain_fuzz::feed_model_spec)
