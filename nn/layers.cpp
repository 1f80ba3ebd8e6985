// The layers of nn/layers.h: each constructor checks its input shape and creates its
// parameters; each forward() calls the ops of nn/ops.h.
#include "nn/layers.h"

#include <cmath>

#include "kernels/check.h"
#include "kernels/conv2d.h"
#include "kernels/rng.h"

namespace cutrain {

// ---- shapes, parameters -----------------------------------------------------------------

std::string FeatureShape::str() const {
  return flat ? shape_str({C}) : shape_str({H, W, C});
}

Shape FeatureShape::batch(int N) const { return flat ? Shape{N, C} : Shape{N, H, W, C}; }

bool FeatureShape::operator==(const FeatureShape& o) const {
  return flat == o.flat && C == o.C && (flat || (H == o.H && W == o.W));
}

VarPtr ParamFactory::kaiming(const std::string& name, const Shape& shape, int fan_in) {
  if (options_.shapes_only) return shapes_only(name);
  const uint64_t index = params_->size();
  const double std_dev = std::sqrt(2.0 / fan_in);
  std::vector<double> v(size_t(shape_numel(shape)));
  for (size_t e = 0; e < v.size(); e++) v[e] = std_dev * rng_normal(options_.seed, index, e);
  params_->push_back(make_var(Tensor::from_doubles(v, shape, options_.dtype), true, name));
  return params_->back();
}

VarPtr ParamFactory::constant(const std::string& name, const Shape& shape, DType dtype,
                              double value) {
  if (options_.shapes_only) return shapes_only(name);
  Tensor t = Tensor::empty(shape, dtype);
  t.fill_(value);
  params_->push_back(make_var(t, true, name));
  return params_->back();
}

VarPtr ParamFactory::shapes_only(const std::string& name) {
  params_->push_back(make_var(Tensor(), true, name));
  return params_->back();
}

void ParamFactory::add_batchnorm_state(const std::string& name, BatchNormState* state) {
  bn_states_->emplace_back(name, state);
}

std::string ParamFactory::next_name(const std::string& prefix) {
  for (auto& pc : counts_)
    if (pc.first == prefix) return prefix + std::to_string(++pc.second);
  counts_.emplace_back(prefix, 1);
  return prefix + "1";
}

void Layer::table_rows(std::vector<TableRow>& rows, int depth) const {
  rows.push_back(TableRow{depth, name_, text_, out_, params_, flops_});
}

// ---- the layers -------------------------------------------------------------------------
namespace {

[[noreturn]] void fail(const std::string& where, const std::string& msg) {
  throw UserError(where + ": " + msg);
}

// The shape arithmetic (FeatureShape, Conv2dShape, the FLOP counts) is in int and int64: a
// description's numbers (up to 65536 each) can ask for more than that holds, e.g. conv 65536
// 1x1 pad=65536 then flatten (found by the model_spec fuzz target: H*W*C overflowed). Each
// layer's output and weights are checked in double before anything is computed from them or
// allocated for them: at most 2^31 - 1 values an image (or a weight tensor), 2^24 a side.
constexpr double kMaxValues = 2147483647.0, kMaxSide = double(1 << 24);

FeatureShape checked_output(const std::string& where, const std::string& text, double H,
                            double W, double C, bool flat) {
  auto str = [](double v) { return std::to_string(int64_t(v)); };
  if (H * W * C > kMaxValues || H > kMaxSide || W > kMaxSide)
    fail(where, text + " makes " + (flat ? "(" + str(C) + ")" :
                                           "(" + str(H) + "," + str(W) + "," + str(C) + ")") +
                    ", more than cutrain's 2^31 - 1 values an image (and 2^24 a side)");
  return flat ? FeatureShape::vector(int(C)) : FeatureShape::spatial(int(H), int(W), int(C));
}

void check_weights(const std::string& where, const std::string& text, double count) {
  if (count > kMaxValues)
    fail(where, text + " needs " + std::to_string(int64_t(count)) +
                    " weights, more than cutrain's 2^31 - 1 in one tensor");
}

void require_spatial(const std::string& where, const LayerSpec& l, const FeatureShape& in) {
  if (in.flat)
    fail(where, std::string(layer_kind_name(l.kind)) + " needs a feature map (H,W,C), but its " +
                    "input is " + in.str() + ": it cannot follow gap, flatten or linear");
}

class Conv : public Layer {
 public:
  Conv(const LayerSpec& l, const std::string& name, const std::string& where,
       const FeatureShape& in, ParamFactory& pf) {
    name_ = name;
    text_ = layer_spec_str(l);
    require_spatial(where, l, in);
    s_.N = 1;
    s_.H = in.H, s_.W = in.W, s_.C = in.C;
    s_.K = l.out, s_.R = l.R, s_.S = l.S;
    s_.stride_h = l.stride_h, s_.stride_w = l.stride_w;
    s_.pad_h = l.pad_h, s_.pad_w = l.pad_w;
    if (in.H + 2 * l.pad_h < l.R || in.W + 2 * l.pad_w < l.S)
      fail(where, text_ + " does not fit its input " + in.str() + ": the " +
                      std::to_string(l.R) + "x" + std::to_string(l.S) +
                      " filter is larger than the padded input " +
                      std::to_string(in.H + 2 * l.pad_h) + "x" +
                      std::to_string(in.W + 2 * l.pad_w));
    out_ = checked_output(where, text_, s_.P(), s_.Q(), s_.K, false);  // sides <= 2^24 + 2^17
    check_weights(where, text_, double(l.out) * l.R * l.S * in.C);
    w_ = pf.kaiming(name + ".w", {s_.K, s_.R, s_.S, s_.C}, s_.R * s_.S * s_.C);
    if (l.bias) b_ = pf.constant(name + ".b", {s_.K}, pf.options().dtype, 0.0);
    params_ = int64_t(s_.K) * s_.R * s_.S * s_.C + (l.bias ? s_.K : 0);
    flops_ = s_.forward_flops();
  }
  VarPtr forward(Tape& tape, const VarPtr& x, bool) override {
    return conv2d(tape, x, w_, b_, s_.stride_h, s_.stride_w, s_.pad_h, s_.pad_w,
                  chosen_ ? &choice_ : nullptr);
  }
  void conv_layers(std::vector<ConvLayer>& out) override {
    out.push_back(ConvLayer{name_, s_, &choice_, &chosen_});
  }

 private:
  Conv2dShape s_;  // for one image (N = 1): the shapes and the FLOPs of the table
  VarPtr w_, b_;   // w (K,R,S,C), b (K) or null
  ConvChoice choice_;    // its kernels on a GPU, when chosen (Model::set_kernel_plan)
  bool chosen_ = false;  //   (else the context's)
};

class BatchNorm : public Layer {
 public:
  BatchNorm(const LayerSpec& l, const std::string& name, const FeatureShape& in,
            ParamFactory& pf) {
    name_ = name;
    text_ = layer_spec_str(l);
    out_ = in;
    const DType acc = acc_dtype(pf.options().dtype);
    gamma_ = pf.constant(name + ".gamma", {in.C}, acc, 1.0);
    beta_ = pf.constant(name + ".beta", {in.C}, acc, 0.0);
    state_.running_mean = Tensor::zeros({in.C}, acc);
    state_.running_var = Tensor::empty({in.C}, acc);
    state_.running_var.fill_(1.0);
    pf.add_batchnorm_state(name, &state_);  // `this` is heap-allocated: the pointer is stable
    params_ = 2LL * in.C;
  }
  VarPtr forward(Tape& tape, const VarPtr& x, bool training) override {
    return batchnorm2d(tape, x, gamma_, beta_, state_, training, relu_);
  }
  bool take_relu() override { return relu_ = true; }

 private:
  VarPtr gamma_, beta_;  // (C) in the acc dtype
  BatchNormState state_;
  bool relu_ = false;    // the ReLU after it fused in (take_relu)
};

class Relu : public Layer {
 public:
  Relu(const LayerSpec& l, const std::string& name, const FeatureShape& in) {
    name_ = name;
    text_ = layer_spec_str(l);
    out_ = in;
  }
  VarPtr forward(Tape& tape, const VarPtr& x, bool) override { return relu(tape, x); }
};

class MaxPool : public Layer {
 public:
  MaxPool(const LayerSpec& l, const std::string& name, const std::string& where,
          const FeatureShape& in)
      : l_(l) {
    name_ = name;
    text_ = layer_spec_str(l);
    require_spatial(where, l, in);
    if (in.H + 2 * l.pad_h < l.R || in.W + 2 * l.pad_w < l.S)
      fail(where, text_ + " does not fit its input " + in.str() + ": the " +
                      std::to_string(l.R) + "x" + std::to_string(l.S) +
                      " window is larger than the (padded) feature map");
    // As PyTorch: more padding than half the window would let a window see only padding.
    if (2 * l.pad_h > l.R || 2 * l.pad_w > l.S)
      fail(where, text_ + ": the padding must be at most half the window");
    out_ = checked_output(where, text_, (in.H + 2 * l.pad_h - l.R) / l.stride_h + 1,
                          (in.W + 2 * l.pad_w - l.S) / l.stride_w + 1, in.C, false);
  }
  VarPtr forward(Tape& tape, const VarPtr& x, bool) override {
    return maxpool2d(tape, x, l_.R, l_.S, l_.stride_h, l_.stride_w, l_.pad_h, l_.pad_w);
  }

 private:
  LayerSpec l_;
};

class Gap : public Layer {
 public:
  Gap(const LayerSpec& l, const std::string& name, const std::string& where,
      const FeatureShape& in) {
    name_ = name;
    text_ = layer_spec_str(l);
    require_spatial(where, l, in);
    out_ = FeatureShape::vector(in.C);
  }
  VarPtr forward(Tape& tape, const VarPtr& x, bool) override { return global_avgpool(tape, x); }
};

class Flatten : public Layer {
 public:
  Flatten(const LayerSpec& l, const std::string& name, const std::string& where,
          const FeatureShape& in) {
    name_ = name;
    text_ = layer_spec_str(l);
    out_ = in.flat ? in : checked_output(where, text_, 1, 1, double(in.H) * in.W * in.C, true);
  }
  VarPtr forward(Tape& tape, const VarPtr& x, bool) override { return flatten(tape, x); }
};

class Linear : public Layer {
 public:
  Linear(const LayerSpec& l, const std::string& name, const std::string& where,
         const FeatureShape& in, ParamFactory& pf) {
    name_ = name;
    text_ = layer_spec_str(l);
    if (!in.flat)
      fail(where, "linear needs a vector (C), but its input is the feature map " + in.str() +
                      ": put gap or flatten before it");
    const int K = l.out_is_classes ? pf.options().classes : l.out;
    out_ = FeatureShape::vector(K);
    check_weights(where, text_, double(K) * in.C);
    w_ = pf.kaiming(name + ".w", {K, in.C}, in.C);
    if (l.bias) b_ = pf.constant(name + ".b", {K}, pf.options().dtype, 0.0);
    params_ = int64_t(K) * in.C + (l.bias ? K : 0);
    flops_ = 2LL * in.C * K;
  }
  VarPtr forward(Tape& tape, const VarPtr& x, bool) override { return linear(tape, x, w_, b_); }

 private:
  VarPtr w_, b_;  // w (K,C), b (K) or null
};

// The basic block of He et al. 2016 (Fig. 2 left, with BN after each conv):
//   y = relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x))
// conv1 is 3x3 with the block's stride, conv2 3x3; shortcut(x) = x when the shape is kept,
// else bn(conv1x1 with the stride) (option B of the paper: a projection).
class ResBlock : public Layer {
 public:
  ResBlock(const LayerSpec& l, const std::string& name, const std::string& where,
           const FeatureShape& in, ParamFactory& pf) {
    name_ = name;
    text_ = layer_spec_str(l);
    require_spatial(where, l, in);
    LayerSpec conv;  // no bias: a BN follows every conv
    conv.kind = LayerKind::conv;
    conv.out = l.out;
    conv.R = conv.S = 3;
    conv.stride_h = conv.stride_w = l.stride_h;
    conv.pad_h = conv.pad_w = 1;
    LayerSpec bn, relu_spec;
    bn.kind = LayerKind::bn;
    relu_spec.kind = LayerKind::relu;

    conv1_ = std::make_unique<Conv>(conv, name + ".conv1", where, in, pf);
    bn1_ = std::make_unique<BatchNorm>(bn, name + ".bn1", conv1_->out(), pf);
    relu1_ = std::make_unique<Relu>(relu_spec, name + ".relu1", bn1_->out());
    bn1_->take_relu();  // bn1 runs relu1, fused; relu1 stays for the table
    conv.stride_h = conv.stride_w = 1;
    conv2_ = std::make_unique<Conv>(conv, name + ".conv2", where, relu1_->out(), pf);
    bn2_ = std::make_unique<BatchNorm>(bn, name + ".bn2", conv2_->out(), pf);
    if (l.stride_h != 1 || l.out != in.C) {
      conv.R = conv.S = 1;
      conv.pad_h = conv.pad_w = 0;
      conv.stride_h = conv.stride_w = l.stride_h;
      shortcut_ = std::make_unique<Conv>(conv, name + ".shortcut", where, in, pf);
      shortcut_bn_ = std::make_unique<BatchNorm>(bn, name + ".shortcut_bn", shortcut_->out(), pf);
    }
    out_ = bn2_->out();
    for (const Layer* part : parts()) {
      params_ += part->params();
      flops_ += part->flops();
    }
  }

  VarPtr forward(Tape& tape, const VarPtr& x, bool training) override {
    VarPtr y = bn1_->forward(tape, conv1_->forward(tape, x, training), training);  // + relu1
    y = bn2_->forward(tape, conv2_->forward(tape, y, training), training);
    VarPtr s = x;
    if (shortcut_) s = shortcut_bn_->forward(tape, shortcut_->forward(tape, x, training), training);
    return relu(tape, add(tape, y, s));
  }

  void table_rows(std::vector<TableRow>& rows, int depth) const override {
    Layer::table_rows(rows, depth);
    for (const Layer* part : parts()) part->table_rows(rows, depth + 1);
  }
  void conv_layers(std::vector<ConvLayer>& out) override {
    for (Layer* part : {conv1_.get(), conv2_.get(), shortcut_.get()})
      if (part) part->conv_layers(out);
  }

 private:
  std::vector<const Layer*> parts() const {
    std::vector<const Layer*> p = {conv1_.get(), bn1_.get(), relu1_.get(), conv2_.get(),
                                   bn2_.get()};
    if (shortcut_) p.insert(p.end(), {shortcut_.get(), shortcut_bn_.get()});
    return p;
  }

  std::unique_ptr<Layer> conv1_, bn1_, relu1_, conv2_, bn2_, shortcut_, shortcut_bn_;
};

}  // namespace

const char* layer_name_prefix(LayerKind k) {
  switch (k) {
    case LayerKind::conv: return "conv";
    case LayerKind::bn: return "bn";
    case LayerKind::relu: return "relu";
    case LayerKind::maxpool: return "pool";
    case LayerKind::gap: return "gap";
    case LayerKind::flatten: return "flatten";
    case LayerKind::linear: return "linear";
    case LayerKind::resblock: return "block";
  }
  return "layer";
}

std::unique_ptr<Layer> make_layer(const LayerSpec& l, const std::string& name,
                                  const std::string& where, const FeatureShape& in,
                                  ParamFactory& pf) {
  switch (l.kind) {
    case LayerKind::conv: return std::make_unique<Conv>(l, name, where, in, pf);
    case LayerKind::bn: return std::make_unique<BatchNorm>(l, name, in, pf);
    case LayerKind::relu: return std::make_unique<Relu>(l, name, in);
    case LayerKind::maxpool: return std::make_unique<MaxPool>(l, name, where, in);
    case LayerKind::gap: return std::make_unique<Gap>(l, name, where, in);
    case LayerKind::flatten: return std::make_unique<Flatten>(l, name, where, in);
    case LayerKind::linear: return std::make_unique<Linear>(l, name, where, in, pf);
    case LayerKind::resblock: return std::make_unique<ResBlock>(l, name, where, in, pf);
  }
  fail(where, "unknown layer kind");
}

}  // namespace cutrain
