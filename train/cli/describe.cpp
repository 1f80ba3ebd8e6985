#include "train/cli/describe.h"

#include <nlohmann/json.hpp>

namespace cutrain {

namespace {

nlohmann::json shape_json(const FeatureShape& s) {
  return s.flat ? nlohmann::json::array({s.C}) : nlohmann::json::array({s.H, s.W, s.C});
}

// A row's description fields, read back from its canonical text (layer_spec_str parses to the
// same LayerSpec): one path for the lines of the description and for the parts of a resblock.
nlohmann::json row_json(const TableRow& r, int classes) {
  const LayerSpec l = parse_model_spec(r.text, r.name).layers.at(0);
  nlohmann::json j = {{"name", r.name}, {"text", r.text}, {"kind", layer_kind_name(l.kind)}};
  switch (l.kind) {
    case LayerKind::conv:
    case LayerKind::maxpool:
      if (l.kind == LayerKind::conv) j["out"] = l.out;
      j["R"] = l.R;
      j["S"] = l.S;
      j["stride"] = {l.stride_h, l.stride_w};
      j["pad"] = {l.pad_h, l.pad_w};
      if (l.kind == LayerKind::conv) j["bias"] = l.bias;
      break;
    case LayerKind::linear:
      j["out"] = l.out_is_classes ? classes : l.out;
      j["bias"] = l.bias;
      break;
    case LayerKind::resblock:
      j["out"] = l.out;
      j["stride"] = {l.stride_h, l.stride_w};
      break;
    default:
      break;
  }
  j["shape"] = shape_json(r.out);
  j["params"] = r.params;
  j["flops"] = r.flops;
  return j;
}

}  // namespace

std::string model_json(const Model& m) {
  const ModelOptions& o = m.options();
  nlohmann::json layers = nlohmann::json::array();
  for (const TableRow& r : m.rows()) {
    if (r.depth == 0)
      layers.push_back(row_json(r, o.classes));
    else
      layers.back()["parts"].push_back(row_json(r, o.classes));  // a resblock's part
  }
  nlohmann::json params = nlohmann::json::array();
  for (const VarPtr& p : m.parameters())
    params.push_back({{"name", p->name}, {"shape", p->value.shape()}});

  std::string text;  // the description as parsed: one canonical line per layer
  for (const LayerSpec& l : m.spec().layers) text += layer_spec_str(l) + "\n";
  const nlohmann::json j = {{"model", m.spec().source},
                            {"input", {o.H, o.W, o.C}},
                            {"classes", o.classes},
                            {"dtype", dtype_name(o.dtype)},
                            {"params", m.parameter_count()},
                            {"flops", m.forward_flops()},
                            {"model_text", text},
                            {"layers", layers},
                            {"parameters", params}};
  return j.dump(2) + "\n";
}

}  // namespace cutrain
