// build_model and the Model: the layers of nn/layers.h in the order of the description.
#include "nn/model.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <sstream>

#include "kernels/check.h"
#include "kernels/printable.h"
#include "nn/layers.h"

namespace cutrain {

Model::Model(ModelSpec spec, ModelOptions options)
    : spec_(std::move(spec)), options_(options) {}

Model::~Model() = default;

std::unique_ptr<Model> build_model(const ModelSpec& spec, const ModelOptions& options) {
  CHECK(options.H >= 1 && options.W >= 1 && options.C >= 1,
        "model input must be at least 1x1x1, got " << options.H << "x" << options.W << "x"
                                                   << options.C);
  CHECK(double(options.H) * options.W * options.C <= 2147483647.0 &&
            std::max(options.H, options.W) <= (1 << 24),
        "model input " << options.H << "x" << options.W << "x" << options.C
                       << " is more than cutrain's 2^31 - 1 values an image (and 2^24 a side)");
  CHECK(options.classes >= 1, "model: need at least one class, got " << options.classes);
  CHECK(options.dtype != DType::i32, "model: dtype must be floating point, got i32");
  CHECK(!spec.layers.empty(), printable(spec.source) << ": the description has no layers");

  std::unique_ptr<Model> m(new Model(spec, options));
  ParamFactory pf(m->options_, &m->params_, &m->bn_states_);
  FeatureShape shape = FeatureShape::spatial(options.H, options.W, options.C);
  for (const LayerSpec& l : spec.layers) {
    m->layers_.push_back(
        make_layer(l, pf.next_name(layer_name_prefix(l.kind)), spec.where(l), shape, pf));
    shape = m->layers_.back()->out();
  }
  for (size_t i = 0; i < m->layers_.size(); i++) {  // each `bn` + `relu` as one op
    m->forward_.push_back(m->layers_[i].get());
    if (i + 1 < m->layers_.size() && spec.layers[i + 1].kind == LayerKind::relu &&
        m->layers_[i]->take_relu())
      i++;
  }
  // The loss reads one score per class: catch a missing or mis-sized classifier here, not as
  // a shape error deep inside the first training step.
  if (!(shape == FeatureShape::vector(options.classes)))
    throw UserError(spec.where(spec.layers.back()) + ": the model ends with " + shape.str() +
                ", but it must end with one score per class, (" +
                std::to_string(options.classes) + "): end it with 'linear classes'");
  // The tensors into the model's context: copied to a GPU; on the CPU made again in a context
  // that carries a LaunchPlan, so that their own work (a gradient zeroed) is noted there too.
  // The layers hold the VarPtrs: swap what they point to.
  const Context& in = options.context;
  if ((in.device != Device::cpu || in.plan) && !options.shapes_only) {
    auto into = [&](Tensor& t) {
      if (t.device() != in.device) return void(t = t.to(in));
      Tensor made = Tensor::empty(t.shape(), t.dtype(), in);
      made.copy_from(t);
      t = made;
    };
    for (VarPtr& p : m->params_) into(p->value);
    for (auto& [name, bn] : m->bn_states_) {
      into(bn->running_mean);
      into(bn->running_var);
    }
  }
  return m;
}

VarPtr Model::forward(Tape& tape, const VarPtr& x, bool training) {
  const Tensor& X = x->value;
  CHECK(X.rank() == 4 && X.dim(1) == options_.H && X.dim(2) == options_.W && X.dim(3) == options_.C,
        "model " << printable(spec_.source) << ": input must be (N," << options_.H << ","
                 << options_.W << "," << options_.C << "), got " << X.str());
  CHECK(X.dtype() == options_.dtype, "model " << printable(spec_.source) << ": input must be "
                                              << dtype_name(options_.dtype) << ", got " << X.str());
  VarPtr y = x;
  for (Layer* layer : forward_) y = layer->forward(tape, y, training);
  return y;
}

std::vector<std::pair<std::string, Tensor*>> Model::batchnorm_tensors() const {
  std::vector<std::pair<std::string, Tensor*>> out;
  for (const auto& [name, bn] : bn_states_) {
    out.emplace_back(name + ".running_mean", &bn->running_mean);
    out.emplace_back(name + ".running_var", &bn->running_var);
  }
  return out;
}

int64_t Model::parameter_count() const {
  int64_t n = 0;
  for (const auto& l : layers_) n += l->params();  // from the shapes: also when shapes_only
  return n;
}

int64_t Model::forward_flops() const {
  int64_t n = 0;
  for (const auto& layer : layers_) n += layer->flops();
  return n;
}

namespace {
std::string mflops_str(int64_t flops) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", double(flops) * 1e-6);
  return buf;
}
}  // namespace

std::vector<TableRow> Model::rows() const {
  std::vector<TableRow> rows;
  for (const auto& layer : layers_) layer->table_rows(rows, 0);
  return rows;
}

std::string Model::table() const {

  // Cells first, then columns padded to their widest cell: names and text left-aligned,
  // numbers right-aligned.
  using Cells = std::array<std::string, 5>;
  std::vector<Cells> cells = {{"layer", "description", "output", "params", "MFLOP"}};
  cells.push_back({"input", "", FeatureShape::spatial(options_.H, options_.W, options_.C).str(),
                   "", ""});
  for (const TableRow& r : rows())
    cells.push_back({std::string(2 * size_t(r.depth), ' ') + r.name, r.text, r.out.str(),
                     std::to_string(r.params), mflops_str(r.flops)});
  cells.push_back({"total", "", "", std::to_string(parameter_count()),
                   mflops_str(forward_flops())});

  std::array<size_t, 5> width{};
  for (const Cells& c : cells)
    for (size_t i = 0; i < c.size(); i++) width[i] = std::max(width[i], c[i].size());
  std::ostringstream os;
  os << "model " << printable(spec_.source) << ": input " << options_.H << "x" << options_.W << "x"
     << options_.C << ", " << options_.classes << " classes, " << dtype_name(options_.dtype)
     << "\n";
  for (const Cells& c : cells) {
    std::string line;
    for (size_t i = 0; i < c.size(); i++) {
      const std::string pad(width[i] - c[i].size(), ' ');
      line += i < 3 ? c[i] + pad : pad + c[i];
      if (i + 1 < c.size()) line += "  ";
    }
    line.erase(line.find_last_not_of(' ') + 1);
    os << line << "\n";
  }
  return os.str();
}

std::vector<ConvLayer> Model::conv_layers() {
  std::vector<ConvLayer> out;
  for (auto& layer : layers_) layer->conv_layers(out);
  return out;
}

void Model::set_kernel_plan(const KernelPlan& plan) {
  std::vector<ConvLayer> convs = conv_layers();
  for (const auto& entry : plan) {
    const std::string& name = entry.first;
    const ConvChoice& choice = entry.second;
    auto it = std::find_if(convs.begin(), convs.end(),
                           [&](const ConvLayer& c) { return c.name == name; });
    if (it == convs.end()) {
      std::string names;
      for (const ConvLayer& c : convs) names += (names.empty() ? "" : ", ") + c.name;
      throw UserError("the kernel plan names '" + printable(name) +
                      "', which is not a conv layer of model " + printable(spec_.source) + " (" +
                      names + ")");
    }
    *it->choice = choice;
    *it->chosen = true;
  }
}

std::string kernel_plan_str(const KernelPlan& plan) {
  std::string s;
  for (const auto& [name, choice] : plan)
    s += (s.empty() ? "" : ";") + name + "=" + conv_choice_str(choice);
  return s;
}

KernelPlan parse_kernel_plan(const std::string& text) {
  KernelPlan plan;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find(';', at);
    if (end == std::string::npos) end = text.size();
    const std::string entry = text.substr(at, end - at);
    const size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0)
      throw UserError("kernel plan '" + text + "': '" + entry + "' is not LAYER=FORWARD,DATA," +
                      "FILTER (such as conv2=tc,cudnn,cudnn)");
    try {
      plan[entry.substr(0, eq)] = parse_conv_choice(entry.substr(eq + 1));
    } catch (const Error& e) {
      throw UserError("kernel plan, layer " + entry.substr(0, eq) + ": " + e.what());
    }
    at = end + 1;
  }
  return plan;
}

}  // namespace cutrain
