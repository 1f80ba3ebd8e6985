// defines: onnx_model, a trained Model as an ONNX graph (the bytes of an .onnx file), built
// with the ONNX library's own protobuf classes (Debian's libonnx-dev) and checked by its checker
// and strict shape inference before it is returned; OnnxOptions, what goes into the graph
// besides the layers.
//
//   OnnxOptions o;
//   o.mean = cfg.mean; o.std = cfg.std; o.class_names = cfg.class_names;
//   const OnnxGraph g = onnx_model(*model, o);   // g.bytes: write them to model.onnx
//
// The graph takes what the trainer's loader delivers, images NHWC, and does the rest itself:
//
//   image (N,H,W,C) uint8          or, with OnnxInput::unit_float, float pixels/255 in [0,1]
//     Cast to float, Div 255         (the Cast and the Div left out for unit_float)
//     Sub mean, Div std              per channel: kernels/input.h's formula, in the same order
//     Transpose to NCHW              ONNX's Conv and pools are NCHW; cutrain is NHWC
//   the layers, one or a few nodes each:
//     conv       Conv (weights KRSC -> OIHW, pads, strides, bias when the layer has one)
//     bn         BatchNormalization in inference mode (the running statistics, eps 1e-5);
//                onnxruntime folds it into the Conv before it when it loads the graph
//     relu       Relu
//     maxpool    MaxPool (ONNX pads with -inf, as cutrain's maxpool leaves padding out)
//     gap        GlobalAveragePool, Flatten
//     flatten    Transpose back to NHWC, Flatten: cutrain flattens (H,W,C) in that order, so
//                the linear layer after it sees its features in the order it was trained on
//     linear     Gemm with transB (weights (K,C), as cutrain stores them)
//     resblock   Conv, BatchNormalization, Relu, Conv, BatchNormalization, the shortcut (the
//                input, or Conv + BatchNormalization), Add, Relu
//   with tta_flip (--tta flip), around the layers:
//     Slice (steps -1 along W) the mirror images, Concat them after the images: a batch of 2N;
//     after the layers Reshape (2,N,classes), ReduceMean over the first axis: each image's
//     logits averaged with its mirror image's, as `cutrain eval --tta flip` does
//   logits (N,classes) float       or, with softmax, "probabilities": Softmax over the classes
//
// The batch size N is free (a symbolic dimension). Every layer's output is declared with the
// shape the model builder gave it (value_info), so the strict shape inference run here checks
// each node against cutrain's own arithmetic, and tools such as Netron show the shapes.
// Metadata (metadata_props): "class_names" (a JSON array), "input" (what the image must be),
// "mean", "std", and the caller's own entries (the checkpoint, its step and epoch, ...).
//
// Opset 13 (IR version 7): every operator used has had its present meaning since then, so
// older runtimes (onnxruntime >= 1.6, TensorRT 8, onnxruntime-web) load the file too.
// Numbers: the weights are the model's fp32 values (a model trained in fp16 is exported from
// its fp32 master weights, as `cutrain predict` on the CPU runs it). A runtime computes the
// convolutions in its own order of additions, so its logits differ from cutrain's by rounding
// (tests/train/export/onnx_test.cpp: probabilities within 1e-5, the same top-1).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "nn/model.h"

namespace cutrain {

enum class OnnxInput {
  uint8,       // pixels 0..255, as decoded: what an image library gives
  unit_float,  // float32 pixels / 255, in [0, 1] (torchvision's ToTensor scale), NHWC
};
// "uint8" / "float"
const char* onnx_input_name(OnnxInput in);
// "uint8" or "float" -> the enum; a UserError naming both for anything else.
OnnxInput parse_onnx_input(const std::string& s);

struct OnnxOptions {
  OnnxInput input = OnnxInput::uint8;
  bool softmax = false;             // output probabilities instead of logits
  bool tta_flip = false;            // average each image's logits with its mirror's
  std::vector<double> mean, std;    // per channel, of pixels/255: the run's normalisation
  std::vector<std::string> class_names;  // empty: the classes are numbered
  std::string graph_name = "cutrain";
  // More metadata_props, in this order (keys must differ from the ones this file writes).
  std::vector<std::pair<std::string, std::string>> metadata;
};

struct OnnxGraph {
  std::string bytes;       // the serialised ModelProto: the contents of the .onnx file
  int nodes = 0;           // in the graph
  int64_t parameters = 0;  // values in the initializers (weights, biases, BN statistics)
  std::string input;       // "image uint8 (N,28,28,1)"
  std::string output;      // "logits float (N,10)"
};

// The model (any device, any dtype: its values are read as fp32) as an ONNX graph. Throws
// cutrain::UserError when the options do not fit the model (mean/std not one per channel, a
// std <= 0, class names not one per class) and cutrain::Error if the ONNX checker or the shape
// inference rejects the graph (a bug here, reported with the checker's message).
OnnxGraph onnx_model(const Model& model, const OnnxOptions& options);

}  // namespace cutrain
