// defines: ModelOptions, FeatureShape, TableRow, Model (layers built from a ModelSpec: forward,
// parameters, BatchNorm state, the layer table) and build_model.
//
//   ModelSpec spec = load_model_spec("default");
//   auto model = build_model(spec, {28, 28, 1, 10});      // H, W, C, classes
//   std::puts(model->table().c_str());
//   Tape tape;
//   VarPtr logits = model->forward(tape, x, true);       // x (N,28,28,1) -> logits (N,10)
//
// The builder follows the description line by line, keeping the shape of one image's
// activations, so a layer that does not fit its input is reported with the line of the
// description and both shapes before any memory is spent.
//
// Parameters (requires_grad = true), in the order the layers create them:
//   conv:   "<conv>.w" (K,R,S,C) and, with 'bias', "<conv>.b" (K), in options.dtype
//   linear: "<linear>.w" (K,C) and, unless 'nobias', "<linear>.b" (K), in options.dtype
//   bn:     "<bn>.gamma", "<bn>.beta" (C), in acc_dtype(options.dtype) (the mixed-precision
//           rule: BN parameters and statistics stay in fp32 for fp16 activations)
// Layers are numbered per kind: conv1, conv2, bn1, linear1, ...; a resblock is "block<i>" and
// its parts "block<i>.conv1", "block<i>.bn1", "block<i>.conv2", "block<i>.bn2" and, when it has
// a projection shortcut, "block<i>.shortcut" and "block<i>.shortcut_bn".
//
// Initialisation (He et al. 2015): conv and linear weights normal with std sqrt(2 / fan_in),
// fan_in = R*S*C or C, element e of parameter number i drawn as rng_normal(seed, i, e), so a
// model is a pure function of (description, options); biases and BN beta 0, BN gamma 1,
// running mean 0, running variance 1.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/conv2d.h"
#include "kernels/impl.h"
#include "nn/model_spec.h"
#include "nn/ops.h"

namespace cutrain {

struct ModelOptions {
  int H = 28, W = 28, C = 1;  // input image size
  int classes = 10;           // what 'linear classes' means; the model must end with (classes)
  DType dtype = DType::f32;   // activations and conv/linear parameters
  uint64_t seed = 1;          // weight initialisation
  // Where the parameters and BatchNorm statistics live (on a GPU: made on the context's
  // stream, where the model's training runs). The model is always initialised on the CPU (the
  // same bits whatever the device) and then copied there.
  Context context;
  // Shapes only: the layers, their output shapes and parameter counts (rows(), table()), but
  // no parameter memory. For memory plans made before a run allocates anything
  // (train/setup/memory_plan.h); such a model cannot run forward().
  bool shapes_only = false;
};

// The shape of one image's activations: (H,W,C) while spatial, (C) after gap/flatten/linear.
struct FeatureShape {
  int H = 0, W = 0, C = 0;
  bool flat = false;

  static FeatureShape spatial(int H, int W, int C) { return {H, W, C, false}; }
  static FeatureShape vector(int C) { return {1, 1, C, true}; }
  std::string str() const;            // "(28,28,32)" or "(10)"
  Shape batch(int N) const;           // (N,H,W,C) or (N,C)
  bool operator==(const FeatureShape& o) const;
};

// One row of Model::table() and Model::rows().
struct TableRow {
  int depth = 0;            // 0: a line of the description; 1: a part of a resblock
  std::string name;         // "conv1", "block2.conv1"
  std::string text;         // "conv 32 3x3 pad=1"
  FeatureShape out;
  int64_t params = 0;
  int64_t flops = 0;        // forward, one image
};

class Layer;  // nn/layers.h

// A conv layer of a model, for choosing its kernels: its name ("conv2", "block3.conv1"), its
// shape for one image (N = 1), and where its choice goes (Model::set_kernel_plan).
struct ConvLayer {
  std::string name;
  Conv2dShape shape;
  ConvChoice* choice;
  bool* chosen;
};

// Which kernels each conv layer runs on a GPU, by layer name: a run's kernel plan (--conv auto
// times them at the start of a GPU run; --kernel-plan reuses a run's). As text, as config.json
// keeps it: "conv1=tc,tc,tc;conv2=tc,cudnn,cudnn" (forward, data, filter), "" for none.
using KernelPlan = std::map<std::string, ConvChoice>;
std::string kernel_plan_str(const KernelPlan& plan);
// Throws a UserError naming the entry and what it expects.
KernelPlan parse_kernel_plan(const std::string& text);

class Model {
 public:
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  // x (N,H,W,C) in options().dtype -> logits (N,classes). training selects the BatchNorm mode:
  // batch statistics (and running averages updated) or the running statistics.
  VarPtr forward(Tape& tape, const VarPtr& x, bool training);

  const std::vector<VarPtr>& parameters() const { return params_; }
  int64_t parameter_count() const;
  // The running statistics of every BatchNorm, named like its layer ("bn1", "block2.bn1"), in
  // the order of the layers. The pointers live as long as the model.
  const std::vector<std::pair<std::string, BatchNormState*>>& batchnorm_states() const {
    return bn_states_;
  }
  // The same statistics as named tensors, "<bn>.running_mean" then "<bn>.running_var" of each
  // BatchNorm in turn: the names checkpoints, the replicas' comparison and --ema's averages use.
  std::vector<std::pair<std::string, Tensor*>> batchnorm_tensors() const;

  // Forward FLOPs for one image: 2 per multiply-add of the convolutions and linear layers
  // (Conv2dShape::forward_flops). BN, ReLU, pooling and biases are memory-bound and not counted.
  int64_t forward_flops() const;

  // One row per layer (the parts of a resblock indented below it): the name, the description
  // line, the output shape of one image (H,W,C) or (C), the parameter count and the forward
  // MFLOPs per image; then a total row.
  std::string table() const;
  // The rows of that table (without the input and total rows), in the same order.
  std::vector<TableRow> rows() const;

  // Every conv layer, in the order of the layers (a block's parts in order).
  std::vector<ConvLayer> conv_layers();
  // Each named layer runs its plan's kernels from now on (the others the context's). Throws a
  // UserError for a name that is not a conv layer of this model.
  void set_kernel_plan(const KernelPlan& plan);

  const ModelSpec& spec() const { return spec_; }
  const ModelOptions& options() const { return options_; }

 private:
  friend std::unique_ptr<Model> build_model(const ModelSpec&, const ModelOptions&);
  Model(ModelSpec spec, ModelOptions options);

  ModelSpec spec_;
  ModelOptions options_;
  std::vector<std::unique_ptr<Layer>> layers_;
  // What forward() runs, in order: the layers, less each ReLU that the layer before it took in
  // (Layer::take_relu: a `bn` line followed by a `relu` line runs as one fused op).
  std::vector<Layer*> forward_;
  std::vector<VarPtr> params_;
  std::vector<std::pair<std::string, BatchNormState*>> bn_states_;
};

// Builds and initialises the model. Throws cutrain::Error "<source>:<line>: ..." when a layer
// does not fit its input, makes a feature map or a weight tensor of more than 2^31 - 1 values
// (or a side over 2^24: the shape arithmetic is in int), and when the model does not end with
// one score per class.
std::unique_ptr<Model> build_model(const ModelSpec& spec, const ModelOptions& options);

}  // namespace cutrain
