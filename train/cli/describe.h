// defines: model_json, the machine-readable form of `cutrain describe --json`: the layer table
// of nn/model.h with each row's description fields spelled out, and every parameter with its
// name and shape in the order the optimizer sees them.
//
// It exists so that another program can rebuild exactly this model: bench/torch_reference.py
// builds its PyTorch twin from this JSON and checks every layer's output shape and parameter
// count against it, so the two models cannot drift apart.
//
//   {"model": "default", "input": [28, 28, 1], "classes": 10, "dtype": "f32",
//    "params": 140458, "flops": 43806208, "model_text": "conv 32 3x3 pad=1\n...",
//    "layers": [{"name": "conv1", "text": "conv 32 3x3 pad=1", "kind": "conv", "out": 32,
//                "R": 3, "S": 3, "stride": [1, 1], "pad": [1, 1], "bias": false,
//                "shape": [28, 28, 32], "params": 288, "flops": 451584},
//               ...
//               {"name": "block3", "kind": "resblock", ..., "parts": [{"name": "block3.conv1",
//                ...}, ...]}],
//    "parameters": [{"name": "conv1.w", "shape": [32, 3, 3, 1]}, ...]}
//
// "shape" is one image's output, (H,W,C) or (C) after gap/flatten/linear; "out" is the layer's
// K with 'linear classes' resolved to the class count. Conv weights are (K,R,S,C), linear
// weights (K,C): cutrain's NHWC layouts, not PyTorch's.
#pragma once
#include <string>

#include "nn/model.h"

namespace cutrain {

// The JSON above, pretty-printed, ending with "\n".
std::string model_json(const Model& m);

}  // namespace cutrain
