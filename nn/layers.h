// defines: the layers a Model is made of (Conv, BatchNorm, Relu, MaxPool, Gap, Flatten, Linear,
// ResBlock) and make_layer, which builds one layer from a line of a ModelSpec.
//
// A layer is built knowing the shape of its input, so its constructor checks that it fits,
// creates its parameters, and knows its output shape, parameter count and FLOPs before any
// data flows. forward() is then one call into nn/ops.h (ResBlock: a few).
// Internal to nn/: the rest of cutrain sees only nn/model.h.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nn/model.h"
#include "nn/model_spec.h"
#include "nn/ops.h"

namespace cutrain {

// Creates the parameters and registers the BatchNorm states of a model under construction.
class ParamFactory {
 public:
  ParamFactory(const ModelOptions& options, std::vector<VarPtr>* params,
               std::vector<std::pair<std::string, BatchNormState*>>* bn_states)
      : options_(options), params_(params), bn_states_(bn_states) {}

  const ModelOptions& options() const { return options_; }
  // Kaiming-normal weights in options.dtype: element e of parameter number i is
  // sqrt(2 / fan_in) * rng_normal(seed, i, e).
  VarPtr kaiming(const std::string& name, const Shape& shape, int fan_in);
  // A parameter filled with `value`.
  VarPtr constant(const std::string& name, const Shape& shape, DType dtype, double value);
  void add_batchnorm_state(const std::string& name, BatchNormState* state);
  // options.shapes_only: a parameter without memory (an undefined tensor), for counting.
  // "conv" -> "conv1", then "conv2", ...: the names of the model's layers, numbered per prefix.
  std::string next_name(const std::string& prefix);

 private:
  VarPtr shapes_only(const std::string& name);
  const ModelOptions& options_;
  std::vector<VarPtr>* params_;
  std::vector<std::pair<std::string, BatchNormState*>>* bn_states_;
  std::vector<std::pair<std::string, int>> counts_;
};

class Layer {
 public:
  virtual ~Layer() = default;
  virtual VarPtr forward(Tape& tape, const VarPtr& x, bool training) = 0;
  // Can this layer take in the ReLU that follows it (BatchNorm: batchnorm2d's relu)? If so it
  // does from now on, and returns true: its forward is relu(its output), and the caller no
  // longer runs the ReLU (Model::build_model, ResBlock).
  virtual bool take_relu() { return false; }
  // Appends this layer's conv layers (a block: its parts') to `out` (Model::conv_layers).
  virtual void conv_layers(std::vector<ConvLayer>& out) { (void)out; }
  // Appends this layer's row; a block also appends its parts, one level deeper.
  virtual void table_rows(std::vector<TableRow>& rows, int depth) const;

  const FeatureShape& out() const { return out_; }
  int64_t params() const { return params_; }
  int64_t flops() const { return flops_; }

 protected:
  std::string name_, text_;  // set by the constructors: the table's first two columns
  FeatureShape out_;
  int64_t params_ = 0, flops_ = 0;
};

// The name prefix of a kind's layers: "conv", "bn", "relu", "pool", "gap", "flatten",
// "linear", "block".
const char* layer_name_prefix(LayerKind k);

// Builds the layer described by `l`, named `name`, on an input of shape `in`. `where`
// ("file:line") prefixes every error.
std::unique_ptr<Layer> make_layer(const LayerSpec& l, const std::string& name,
                                  const std::string& where, const FeatureShape& in,
                                  ParamFactory& pf);

}  // namespace cutrain
