// onnx_model: the layers of a Model as ONNX nodes (onnx_export.h has the mapping).
#include "train/export/onnx_export.h"

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <set>

#include "kernels/check.h"
#include "nn/ops.h"

namespace cutrain {

const char* onnx_input_name(OnnxInput in) {
  return in == OnnxInput::uint8 ? "uint8" : "float";
}

OnnxInput parse_onnx_input(const std::string& s) {
  if (s == "uint8") return OnnxInput::uint8;
  if (s == "float") return OnnxInput::unit_float;
  throw UserError("--input must be uint8 (pixels 0..255) or float (pixels/255 in [0,1]), got '" +
                  s + "'");
}

namespace {

constexpr int kOpset = 13;      // onnx_export.h: why 13
constexpr int kIrVersion = 7;   // the IR version that goes with opset 13

// An activation as ONNX sees it: its tensor name and cutrain's shape of one image.
struct Value {
  std::string name;
  FeatureShape shape;
};

// Adds nodes, weights and shape declarations to one GraphProto. Names of nodes and tensors are
// cutrain's layer names ("conv1", "block2.bn1"), so a graph viewer reads like `cutrain describe`.
class GraphBuilder {
 public:
  explicit GraphBuilder(onnx::GraphProto* g) : g_(g) {}

  // A float initializer; returns its name.
  std::string weight(const std::string& name, const std::vector<int64_t>& dims,
                     const std::vector<float>& values) {
    onnx::TensorProto* t = g_->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    int64_t n = 1;
    for (int64_t d : dims) {
      t->add_dims(d);
      n *= d;
    }
    CHECK(n == int64_t(values.size()), "onnx: " << name << " has " << values.size()
                                                << " values for " << n << " elements");
    // raw_data, little-endian as ONNX specifies (x86-64 and arm64 are): one copy, compact
    t->set_raw_data(values.data(), values.size() * sizeof(float));
    parameters_ += n;
    return name;
  }
  // An int64 initializer (a Slice's indices, a Reshape's shape): not a parameter.
  std::string int64s(const std::string& name, const std::vector<int64_t>& values) {
    onnx::TensorProto* t = g_->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    t->add_dims(int64_t(values.size()));
    t->set_raw_data(values.data(), values.size() * sizeof(int64_t));
    return name;
  }

  // One node; its outputs take the names given. Attributes are added by the caller. Node
  // names must be unique in a graph (onnxruntime refuses a graph where they are not).
  onnx::NodeProto* node(const std::string& op, const std::string& name,
                        const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs) {
    CHECK(node_names_.insert(name).second, "onnx: two nodes named " << name);
    onnx::NodeProto* n = g_->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (const std::string& i : inputs) n->add_input(i);
    for (const std::string& o : outputs) n->add_output(o);
    return n;
  }

  // The shape cutrain's builder gave this activation, NCHW or (N,C), the batch symbolic
  // (batch_param: "N", or "2N" inside a graph of test-time flips).
  void declare(const Value& v) { set_type(g_->add_value_info(), v); }
  std::string batch_param = "N";
  void set_type(onnx::ValueInfoProto* vi, const Value& v, int elem = onnx::TensorProto::FLOAT) {
    vi->set_name(v.name);
    onnx::TypeProto_Tensor* t = vi->mutable_type()->mutable_tensor_type();
    t->set_elem_type(elem);
    onnx::TensorShapeProto* s = t->mutable_shape();
    s->add_dim()->set_dim_param(batch_param);
    if (v.shape.flat) {
      s->add_dim()->set_dim_value(v.shape.C);
    } else {
      s->add_dim()->set_dim_value(v.shape.C);
      s->add_dim()->set_dim_value(v.shape.H);
      s->add_dim()->set_dim_value(v.shape.W);
    }
  }

  int64_t parameters() const { return parameters_; }

 private:
  onnx::GraphProto* g_;
  int64_t parameters_ = 0;
  std::set<std::string> node_names_;
};

void set_ints(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}
void set_int(onnx::NodeProto* n, const std::string& name, int64_t v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}
void set_float(onnx::NodeProto* n, const std::string& name, float v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}

// The model's parameters and BatchNorm statistics by name, as fp32 on the host.
class Weights {
 public:
  explicit Weights(const Model& m) {
    for (const VarPtr& p : m.parameters()) tensors_[p->name] = &p->value;
    for (const auto& [name, t] : m.batchnorm_tensors()) tensors_[name] = t;
    for (const auto& [name, bn] : m.batchnorm_states()) bn_eps_[name] = bn->eps;
  }
  double bn_eps(const std::string& name) const {
    auto it = bn_eps_.find(name);
    CHECK(it != bn_eps_.end(), "onnx: the model has no BatchNorm " << name);
    return it->second;
  }
  bool has(const std::string& name) const { return tensors_.count(name) > 0; }
  const Tensor& tensor(const std::string& name) const {
    auto it = tensors_.find(name);
    CHECK(it != tensors_.end(), "onnx: the model has no tensor " << name);
    return *it->second;
  }
  std::vector<float> floats(const std::string& name) const { return tensor(name).to_floats(); }

 private:
  std::map<std::string, const Tensor*> tensors_;
  std::map<std::string, double> bn_eps_;
};

// conv (K,R,S,C) KRSC -> OIHW (K,C,R,S).
std::vector<float> krsc_to_kcrs(const Tensor& w) {
  const int K = w.dim(0), R = w.dim(1), S = w.dim(2), C = w.dim(3);
  const std::vector<float> v = w.to_floats();
  std::vector<float> out(v.size());
  for (int k = 0; k < K; k++)
    for (int r = 0; r < R; r++)
      for (int s = 0; s < S; s++)
        for (int c = 0; c < C; c++)
          out[((size_t(k) * C + c) * R + r) * S + s] = v[((size_t(k) * R + r) * S + s) * C + c];
  return out;
}

// Emits the nodes of the model's layers. Shapes are tracked as the model builder tracks them,
// and every output is declared with its shape for the shape inference to check.
class Emitter {
 public:
  Emitter(GraphBuilder& b, const Weights& w) : b_(b), w_(w) {}

  Value conv(const std::string& name, const LayerSpec& l, const Value& x,
             const FeatureShape& out) {
    const Tensor& w = w_.tensor(name + ".w");
    const int K = w.dim(0), R = w.dim(1), S = w.dim(2), C = w.dim(3);
    std::vector<std::string> in = {x.name, b_.weight(name + ".w", {K, C, R, S}, krsc_to_kcrs(w))};
    if (w_.has(name + ".b")) in.push_back(b_.weight(name + ".b", {K}, w_.floats(name + ".b")));
    onnx::NodeProto* n = b_.node("Conv", name, in, {name});
    set_ints(n, "kernel_shape", {R, S});
    set_ints(n, "strides", {l.stride_h, l.stride_w});
    set_ints(n, "pads", {l.pad_h, l.pad_w, l.pad_h, l.pad_w});  // top, left, bottom, right
    return out_value(name, out);
  }

  Value batchnorm(const std::string& name, const Value& x) {
    const int C = x.shape.C;
    onnx::NodeProto* n = b_.node(
        "BatchNormalization", name,
        {x.name, b_.weight(name + ".gamma", {C}, w_.floats(name + ".gamma")),
         b_.weight(name + ".beta", {C}, w_.floats(name + ".beta")),
         b_.weight(name + ".running_mean", {C}, w_.floats(name + ".running_mean")),
         b_.weight(name + ".running_var", {C}, w_.floats(name + ".running_var"))},
        {name});
    set_float(n, "epsilon", float(w_.bn_eps(name)));
    return out_value(name, x.shape);
  }

  Value relu(const std::string& name, const Value& x) {
    b_.node("Relu", name, {x.name}, {name});
    return out_value(name, x.shape);
  }

  Value maxpool(const std::string& name, const LayerSpec& l, const Value& x,
                const FeatureShape& out) {
    onnx::NodeProto* n = b_.node("MaxPool", name, {x.name}, {name});
    set_ints(n, "kernel_shape", {l.R, l.S});
    set_ints(n, "strides", {l.stride_h, l.stride_w});
    set_ints(n, "pads", {l.pad_h, l.pad_w, l.pad_h, l.pad_w});
    return out_value(name, out);
  }

  Value gap(const std::string& name, const Value& x) {
    b_.node("GlobalAveragePool", name + ".pool", {x.name}, {name + ".nc11"});
    return flatten_node(name, name + ".nc11", FeatureShape::vector(x.shape.C));
  }

  Value flatten(const std::string& name, const Value& x, const FeatureShape& out) {
    if (x.shape.flat) {  // already a vector: nothing to do, as in cutrain
      b_.node("Identity", name, {x.name}, {name});
      return out_value(name, out);
    }
    // back to NHWC, so the features come in cutrain's (H,W,C) order
    onnx::NodeProto* t = b_.node("Transpose", name + ".nhwc", {x.name}, {name + ".nhwc"});
    set_ints(t, "perm", {0, 2, 3, 1});
    return flatten_node(name, name + ".nhwc", out);
  }

  Value linear(const std::string& name, const Value& x, const FeatureShape& out) {
    const Tensor& w = w_.tensor(name + ".w");
    const int K = w.dim(0), C = w.dim(1);
    std::vector<std::string> in = {x.name, b_.weight(name + ".w", {K, C}, w.to_floats())};
    if (w_.has(name + ".b")) in.push_back(b_.weight(name + ".b", {K}, w_.floats(name + ".b")));
    onnx::NodeProto* n = b_.node("Gemm", name, in, {name});
    set_int(n, "transB", 1);  // y = x W^T + b: W is (K,C)
    return out_value(name, out);
  }

  // One line of the description. No default case: a LayerKind added to nn/ and not here is
  // a compiler warning (-Wswitch), and refused at run time should one get through.
  Value layer(const LayerSpec& l, const std::string& where, const std::string& name,
              const Value& v, const FeatureShape& out) {
    switch (l.kind) {
      case LayerKind::conv: return conv(name, l, v, out);
      case LayerKind::bn: return batchnorm(name, v);
      case LayerKind::relu: return relu(name, v);
      case LayerKind::maxpool: return maxpool(name, l, v, out);
      case LayerKind::gap: return gap(name, v);
      case LayerKind::flatten: return flatten(name, v, out);
      case LayerKind::linear: return linear(name, v, out);
      case LayerKind::resblock: return resblock(name, l, v, out);
    }
    throw UserError(where + ": " + layer_kind_name(l.kind) +
                    " layers cannot be exported to ONNX yet");
  }

  // nn/layers.h's ResBlock: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)).
  Value resblock(const std::string& name, const LayerSpec& l, const Value& x,
                 const FeatureShape& out) {
    LayerSpec c3;  // the block's 3x3 convolutions
    c3.kind = LayerKind::conv;
    c3.R = c3.S = 3;
    c3.pad_h = c3.pad_w = 1;
    c3.stride_h = c3.stride_w = l.stride_h;
    Value y = conv(name + ".conv1", c3, x, out);
    y = relu(name + ".relu1", batchnorm(name + ".bn1", y));
    c3.stride_h = c3.stride_w = 1;
    y = batchnorm(name + ".bn2", conv(name + ".conv2", c3, y, out));
    Value s = x;
    if (w_.has(name + ".shortcut.w")) {
      LayerSpec c1;
      c1.kind = LayerKind::conv;
      c1.R = c1.S = 1;
      c1.stride_h = c1.stride_w = l.stride_h;
      s = batchnorm(name + ".shortcut_bn", conv(name + ".shortcut", c1, x, out));
    }
    b_.node("Add", name + ".add", {y.name, s.name}, {name + ".add"});
    b_.declare({name + ".add", out});
    return relu(name, {name + ".add", out});
  }

 private:
  Value flatten_node(const std::string& name, const std::string& input, const FeatureShape& out) {
    onnx::NodeProto* n = b_.node("Flatten", name, {input}, {name});
    set_int(n, "axis", 1);
    return out_value(name, out);
  }
  Value out_value(const std::string& name, const FeatureShape& shape) {
    const Value v{name, shape};
    b_.declare(v);
    return v;
  }

  GraphBuilder& b_;
  const Weights& w_;
};

std::string shape_text(const std::vector<int64_t>& dims) {
  std::string s = "(N";
  for (int64_t d : dims) s += "," + std::to_string(d);
  return s + ")";
}

}  // namespace

OnnxGraph onnx_model(const Model& model, const OnnxOptions& o) {
  const ModelOptions& mo = model.options();
  const ModelSpec& spec = model.spec();
  const int C = mo.C;
  USER_CHECK(int(o.mean.size()) == C && int(o.std.size()) == C,
             "onnx: the normalisation needs one mean and one std per channel (" << C << "), got "
                                                                                << o.mean.size()
                                                                                << " and "
                                                                                << o.std.size());
  for (int c = 0; c < C; c++)
    USER_CHECK(std::isfinite(o.mean[size_t(c)]) && std::isfinite(o.std[size_t(c)]) &&
                   o.std[size_t(c)] > 0,
               "onnx: channel " << c << " has mean " << o.mean[size_t(c)] << " and std "
                                << o.std[size_t(c)] << ": a std must be finite and > 0");
  USER_CHECK(o.class_names.empty() || int(o.class_names.size()) == mo.classes,
             "onnx: " << o.class_names.size() << " class names for " << mo.classes
                      << " classes");

  onnx::ModelProto m;
  m.set_ir_version(kIrVersion);
  m.set_producer_name("cutrain");
  m.set_model_version(1);
  onnx::OperatorSetIdProto* opset = m.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOpset);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name(o.graph_name);
  GraphBuilder b(g);
  const Weights weights(model);

  // The input and its normalisation (kernels/input.h's formula, step by step in fp32).
  const std::vector<int64_t> image_dims = {mo.H, mo.W, C};
  {
    onnx::ValueInfoProto* in = g->add_input();
    in->set_name("image");
    onnx::TypeProto_Tensor* t = in->mutable_type()->mutable_tensor_type();
    t->set_elem_type(o.input == OnnxInput::uint8 ? onnx::TensorProto::UINT8
                                                 : onnx::TensorProto::FLOAT);
    t->mutable_shape()->add_dim()->set_dim_param("N");
    for (int64_t d : image_dims) t->mutable_shape()->add_dim()->set_dim_value(d);
  }
  std::vector<float> mean(static_cast<size_t>(C)), stddev(static_cast<size_t>(C));
  for (int c = 0; c < C; c++) {
    mean[size_t(c)] = float(o.mean[size_t(c)]);  // as the trainer rounds them (InputNorm)
    stddev[size_t(c)] = float(o.std[size_t(c)]);
  }
  std::string x = "image";
  if (o.input == OnnxInput::uint8) {
    onnx::NodeProto* cast = b.node("Cast", "image.float", {x}, {"image.float"});
    set_int(cast, "to", onnx::TensorProto::FLOAT);
    b.node("Div", "image.unit", {"image.float", b.weight("255", {}, {255.0f})}, {"image.unit"});
    x = "image.unit";
  }
  b.node("Sub", "image.centred", {x, b.weight("mean", {1, 1, 1, C}, mean)}, {"image.centred"});
  b.node("Div", "image.normalised", {"image.centred", b.weight("std", {1, 1, 1, C}, stddev)},
         {"image.normalised"});
  onnx::NodeProto* nchw = b.node("Transpose", "image.nchw", {"image.normalised"}, {"image.nchw"});
  set_ints(nchw, "perm", {0, 3, 1, 2});
  Value v{"image.nchw", FeatureShape::spatial(mo.H, mo.W, C)};
  b.declare(v);
  if (o.tta_flip) {  // the images and their mirrors, one batch of 2N (the layers are per image)
    b.node("Slice", "image.mirror",
           {v.name, b.int64s("mirror.starts", {-1}),
            b.int64s("mirror.ends", {std::numeric_limits<int64_t>::min()}),
            b.int64s("mirror.axes", {3}), b.int64s("mirror.steps", {-1})},
           {"image.mirror"});
    b.declare({"image.mirror", v.shape});
    onnx::NodeProto* both = b.node("Concat", "image.both", {v.name, "image.mirror"},
                                   {"image.both"});
    set_int(both, "axis", 0);
    b.batch_param = "2N";
    v.name = "image.both";
    b.declare(v);
  }

  // The layers. Their names and output shapes come from the model's own table: its rows of
  // depth 0 are the description's lines, in order.
  std::vector<TableRow> rows;
  for (const TableRow& r : model.rows())
    if (r.depth == 0) rows.push_back(r);
  CHECK(rows.size() == spec.layers.size(),
        "onnx: " << rows.size() << " rows for " << spec.layers.size() << " layers");
  Emitter e(b, weights);
  for (size_t i = 0; i < rows.size(); i++) {
    const std::string& name = rows[i].name;
    const FeatureShape& out = rows[i].out;
    v = e.layer(spec.layers[i], spec.where(spec.layers[i]), name, v, out);
    CHECK(v.shape == out, "onnx: " << name << " gives " << v.shape.str() << ", the model "
                                   << out.str());
  }

  if (o.tta_flip) {  // (2N,K) -> (2,N,K) -> the mean of each image's two rows, (N,K)
    b.node("Reshape", "mirror.pairs",
           {v.name, b.int64s("mirror.pairs.shape", {2, -1, mo.classes})}, {"mirror.pairs"});
    onnx::NodeProto* mean =
        b.node("ReduceMean", "mirror.mean", {"mirror.pairs"}, {"mirror.mean"});
    set_ints(mean, "axes", {0});
    set_int(mean, "keepdims", 0);
    b.batch_param = "N";
    v = {"mirror.mean", v.shape};
    b.declare(v);
  }

  // The output: the logits, or their softmax.
  std::string out_name = "logits";
  if (o.softmax) {
    onnx::NodeProto* n = b.node("Softmax", "probabilities", {v.name}, {"probabilities"});
    set_int(n, "axis", 1);
    out_name = "probabilities";
  } else {
    b.node("Identity", "logits", {v.name}, {"logits"});
  }
  b.set_type(g->add_output(), {out_name, FeatureShape::vector(mo.classes)});

  // Metadata: what a user of the file needs to feed it and read its output.
  auto meta = [&](const std::string& key, const std::string& value) {
    onnx::StringStringEntryProto* p = m.add_metadata_props();
    p->set_key(key);
    p->set_value(value);
  };
  nlohmann::json names = nlohmann::json::array();
  for (int k = 0; k < mo.classes; k++)
    names.push_back(o.class_names.empty() ? std::to_string(k) : o.class_names[size_t(k)]);
  meta("class_names", names.dump());
  const std::string input_text =
      std::string(o.input == OnnxInput::uint8 ? "uint8 pixels 0..255"
                                              : "float pixels/255 in [0,1]") +
      ", NHWC " + shape_text(image_dims) + ", normalised in the graph";
  meta("input", input_text);
  meta("output", std::string(o.softmax ? "probabilities (N,classes), softmax"
                                       : "logits (N,classes)") +
                     (o.tta_flip ? " of the logits averaged over each image and its mirror "
                                   "image (test-time flips)"
                                 : ""));
  meta("mean", nlohmann::json(o.mean).dump());
  meta("std", nlohmann::json(o.std).dump());
  for (const auto& [k, val] : o.metadata) meta(k, val);
  g->set_doc_string("cutrain model " + std::filesystem::path(spec.source).filename().string() +
                    ": image " + input_text + " -> " +
                    (o.softmax ? "probabilities" : "logits") + " over " +
                    std::to_string(mo.classes) + " classes");

  // The library's own checks: the checker (the graph is valid ONNX) and strict shape inference
  // on a copy (every node's output has the shape declared above: cutrain's shapes).
  try {
    onnx::checker::check_model(m);
    onnx::ModelProto inferred = m;
    onnx::shape_inference::InferShapes(inferred, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions(true, 1, false));
  } catch (const std::exception& ex) {
    throw Error(std::string("onnx: the graph does not pass ONNX's checks (a bug in cutrain's "
                            "exporter): ") + ex.what());
  }

  OnnxGraph out;
  CHECK(m.SerializeToString(&out.bytes), "onnx: could not serialise the graph");
  out.nodes = g->node_size();
  out.parameters = b.parameters();
  out.input = std::string("image ") + onnx_input_name(o.input) + " " + shape_text(image_dims);
  out.output = out_name + " float " + shape_text({mo.classes});
  return out;
}

}  // namespace cutrain
