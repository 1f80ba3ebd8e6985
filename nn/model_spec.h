// defines: ModelSpec, the text description of a model, its parser, and the built-in models.
//
// A model is written one layer per line; '#' starts a comment, blank lines are ignored:
//
//   conv K RxS [stride=N|NxM] [pad=N|NxM] [bias]   K output channels, RxS filter; no bias
//                                                   unless 'bias' (a BN usually follows)
//   bn                                              batch normalisation over the channels
//   relu
//   maxpool RxS [stride=N|NxM] [pad=N|NxM]          stride defaults to the window
//   gap                                             global average pool: (H,W,C) -> (C)
//   flatten                                         (H,W,C) -> (H*W*C)
//   linear K|classes [nobias]                       'classes': the class count given at build
//   resblock K [stride=N]                           basic ResNet block (see nn/layers.h)
//
// The parser checks the syntax only; whether a layer fits its input is checked when the model
// is built (nn/model.h), since that depends on the input size. Errors are cutrain::Error with
// the message "<source>:<line>: <what is wrong>", e.g. "my.model:3: unknown layer 'convv'".
#pragma once
#include <string>
#include <vector>

namespace cutrain {

enum class LayerKind { conv, bn, relu, maxpool, gap, flatten, linear, resblock };
const char* layer_kind_name(LayerKind k);  // "conv", "bn", ...

// One line of a description. Fields a kind does not use keep their defaults.
struct LayerSpec {
  LayerKind kind = LayerKind::relu;
  int out = 0;                  // conv, linear, resblock: output channels K (linear: 0 when
  bool out_is_classes = false;  //   out_is_classes, resolved at build time)
  int R = 0, S = 0;             // conv, maxpool: window height and width
  int stride_h = 1, stride_w = 1;
  int pad_h = 0, pad_w = 0;
  bool bias = false;            // conv: 'bias' given; linear: true unless 'nobias'
  int line = 0;                 // 1-based line in the source, for messages

  bool operator==(const LayerSpec& o) const;  // every field but `line`
};

// The canonical one-line form of a layer, e.g. "conv 64 3x3 stride=2 pad=1"; parsing it
// gives the same LayerSpec back. Options at their defaults are left out.
std::string layer_spec_str(const LayerSpec& l);

struct ModelSpec {
  std::string source;  // the built-in name or the file path: the prefix of every message
  std::vector<LayerSpec> layers;

  std::string where(const LayerSpec& l) const;  // "<source>:<line>"
};

// Parses a description. `source` names it in error messages.
ModelSpec parse_model_spec(const std::string& text, const std::string& source);

// The built-in descriptions, by name ("default", "resnet").
std::vector<std::string> builtin_model_names();
// The text of a built-in description; throws, listing the names, for an unknown one.
const std::string& builtin_model_text(const std::string& name);

// A built-in name, else the path of a description file. A name that is neither gives an error
// listing the built-in names.
ModelSpec load_model_spec(const std::string& name_or_path);

}  // namespace cutrain
