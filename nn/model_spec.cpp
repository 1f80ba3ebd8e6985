// The model description parser and the built-in descriptions (see nn/model_spec.h).
#include "nn/model_spec.h"

#include <fstream>
#include <map>
#include <sstream>

#include "kernels/check.h"
#include "kernels/printable.h"

namespace cutrain {

// ---- the built-in models ----------------------------------------------------------------
namespace {

// A plain CNN for 28x28 grey images: two conv-conv-pool stages (28 -> 14 -> 7), a wider conv,
// global average pooling and the classifier. About 140k parameters. The target is about 93%
// test accuracy on Fashion-MNIST, what nets of this shape usually reach; not yet measured with
// cutrain (the trainer comes later).
const std::string kDefaultModel = R"(# default: a plain CNN for small images
conv 32 3x3 pad=1
bn
relu
conv 32 3x3 pad=1
bn
relu
maxpool 2x2
conv 64 3x3 pad=1
bn
relu
conv 64 3x3 pad=1
bn
relu
maxpool 2x2
conv 128 3x3 pad=1
bn
relu
gap
linear classes
)";

// A small ResNet (He et al. 2016, the CIFAR variant): a 3x3 stem, then three stages of two
// basic blocks at 32, 64 and 128 channels, each later stage halving the resolution
// (28x28 -> 28, 14, 7; 64x64 -> 64, 32, 16), global average pooling and the classifier.
const std::string kResnetModel = R"(# resnet: a small ResNet for 28x28 to 64x64 images
conv 32 3x3 pad=1   # stem
bn
relu
resblock 32
resblock 32
resblock 64 stride=2
resblock 64
resblock 128 stride=2
resblock 128
gap
linear classes
)";

const std::map<std::string, const std::string*>& builtins() {
  static const std::map<std::string, const std::string*> m = {
      {"default", &kDefaultModel}, {"resnet", &kResnetModel}};
  return m;
}

std::string builtin_list() {
  std::string s;
  for (const auto& name : builtin_model_names()) s += (s.empty() ? "" : ", ") + name;
  return s;
}

}  // namespace

std::vector<std::string> builtin_model_names() {
  std::vector<std::string> names;
  for (const auto& kv : builtins()) names.push_back(kv.first);
  return names;
}

const std::string& builtin_model_text(const std::string& name) {
  auto it = builtins().find(name);
  USER_CHECK(it != builtins().end(), "unknown built-in model '" << printable(name)
                                                                << "' (built-in: " << builtin_list()
                                                                << ")");
  return *it->second;
}

// ---- layer kinds ------------------------------------------------------------------------
namespace {

struct KindInfo {
  LayerKind kind;
  const char* name;
  const char* usage;
};
const KindInfo kKinds[] = {
    {LayerKind::conv, "conv", "conv K RxS [stride=N|NxM] [pad=N|NxM] [bias]"},
    {LayerKind::bn, "bn", "bn"},
    {LayerKind::relu, "relu", "relu"},
    {LayerKind::maxpool, "maxpool", "maxpool RxS [stride=N|NxM] [pad=N|NxM]"},
    {LayerKind::gap, "gap", "gap"},
    {LayerKind::flatten, "flatten", "flatten"},
    {LayerKind::linear, "linear", "linear K|classes [nobias]"},
    {LayerKind::resblock, "resblock", "resblock K [stride=N]"},
};

const KindInfo* find_kind(const std::string& name) {
  for (const KindInfo& k : kKinds)
    if (name == k.name) return &k;
  return nullptr;
}

// Sizes and counts are bounded so that shape arithmetic cannot overflow an int.
constexpr int kMaxValue = 1 << 16;

}  // namespace

const char* layer_kind_name(LayerKind k) {
  for (const KindInfo& info : kKinds)
    if (info.kind == k) return info.name;
  return "?";
}

// ---- parsing one line -------------------------------------------------------------------
namespace {

// The message quotes the description's words as they are; made printable here, once, as a
// file's text may hold escape sequences (a token never holds a space or a line break).
[[noreturn]] void fail(const std::string& where, const std::string& msg) {
  throw UserError(printable(where + ": " + msg));
}

// A plain decimal integer in [lo, kMaxValue]: no sign, no spaces, nothing after it.
bool parse_int(const std::string& s, int lo, int* out) {
  if (s.empty() || s.size() > 6) return false;
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  if (v < lo || v > kMaxValue) return false;
  *out = v;
  return true;
}

// "3x2" -> (3, 2); with allow_single, "2" -> (2, 2).
bool parse_pair(const std::string& s, bool allow_single, int lo, int* a, int* b) {
  const size_t x = s.find('x');
  if (x == std::string::npos) {
    if (!allow_single || !parse_int(s, lo, a)) return false;
    *b = *a;
    return true;
  }
  return parse_int(s.substr(0, x), lo, a) && parse_int(s.substr(x + 1), lo, b);
}

bool starts_with_digit(const std::string& s) { return !s.empty() && s[0] >= '0' && s[0] <= '9'; }

// The arguments of one line, sorted into positional values ("32", "3x3", "classes"), flags
// ("bias") and key=value options, then taken by the kind's parser; finish() rejects whatever
// was not taken.
class Args {
 public:
  // `flags`: the bare words this kind takes as switches ("bias"); `names`: the bare words it
  // takes as positional values ("classes").
  Args(std::string where, const KindInfo& kind, const std::vector<std::string>& tokens,
       const std::vector<std::string>& flags, const std::vector<std::string>& names)
      : where_(std::move(where)), kind_(kind) {
    auto among = [](const std::string& t, const std::vector<std::string>& v) {
      for (const std::string& w : v)
        if (t == w) return true;
      return false;
    };
    for (const std::string& t : tokens) {
      const size_t eq = t.find('=');
      if (eq != std::string::npos) {
        const std::string key = t.substr(0, eq);
        if (options_.count(key)) fail(where_, "option '" + key + "' given twice");
        options_[key] = t.substr(eq + 1);
      } else if (starts_with_digit(t) || among(t, names)) {
        positional_.push_back(t);
      } else if (among(t, flags)) {
        if (flags_.count(t)) fail(where_, "'" + t + "' given twice");
        flags_[t] = false;  // not yet taken
      } else {
        unknown_option(t);
      }
    }
  }

  const std::string& where() const { return where_; }
  std::string name() const { return kind_.name; }

  // The next positional value, or "" when there is none; peek() leaves it there.
  std::string peek() const { return taken_ < positional_.size() ? positional_[taken_] : ""; }
  std::string next() { return taken_ < positional_.size() ? positional_[taken_++] : ""; }

  bool flag(const std::string& w) {
    auto it = flags_.find(w);
    if (it == flags_.end()) return false;
    it->second = true;
    return true;
  }

  // key=N or key=NxM (allow_pair), each at least lo. Leaves *a, *b alone when absent.
  bool option(const std::string& key, bool allow_pair, int lo, int* a, int* b) {
    auto it = options_.find(key);
    if (it == options_.end()) return false;
    const std::string v = it->second;
    options_.erase(it);
    bool ok = false;
    if (allow_pair) {
      ok = parse_pair(v, true, lo, a, b);
    } else if (parse_int(v, lo, a)) {
      *b = *a;
      ok = true;
    }
    if (!ok)
      fail(where_, name() + ": bad value " + key + "='" + v + "': want " +
                       (lo > 0 ? "a positive integer" : "a non-negative integer") +
                       (allow_pair ? " N or a pair NxM" : "") + " up to " +
                       std::to_string(kMaxValue));
    return true;
  }

  void finish() {
    if (taken_ < positional_.size())
      fail(where_, "unexpected argument '" + positional_[taken_] + "' for " + name() +
                       " (usage: " + kind_.usage + ")");
    if (!options_.empty()) unknown_option(options_.begin()->first + "=" + options_.begin()->second);
    for (const auto& kv : flags_)
      if (!kv.second) unknown_option(kv.first);
  }

 private:
  [[noreturn]] void unknown_option(const std::string& t) {
    fail(where_, "unknown option '" + t + "' for " + name() + " (usage: " + kind_.usage + ")");
  }

  std::string where_;
  const KindInfo& kind_;
  std::vector<std::string> positional_;
  size_t taken_ = 0;
  std::map<std::string, bool> flags_;          // word -> taken
  std::map<std::string, std::string> options_;  // key -> value, erased when taken
};

// K, the output channel count, as the first positional value.
int parse_channels(Args& a, const char* example) {
  const std::string t = a.next();
  int k = 0;
  if (t.empty())
    fail(a.where(), a.name() + " needs an output channel count like '" + example + "'");
  if (!parse_int(t, 1, &k))
    fail(a.where(), a.name() + ": bad channel count '" + t + "': want a positive integer up to " +
                        std::to_string(kMaxValue) + ", like '" + example + "'");
  return k;
}

void parse_window(Args& a, int* r, int* s) {
  const std::string t = a.next();
  if (t.empty()) fail(a.where(), a.name() + " needs a filter size like 3x3");
  if (!parse_pair(t, false, 1, r, s))
    fail(a.where(), a.name() + ": bad filter size '" + t + "': want RxS, like 3x3");
}

LayerSpec parse_line(const std::string& where, const std::vector<std::string>& tokens) {
  const KindInfo* kind = find_kind(tokens[0]);
  if (!kind) {
    std::string names;
    for (const KindInfo& k : kKinds) names += std::string(names.empty() ? "" : ", ") + k.name;
    fail(where, "unknown layer '" + tokens[0] + "' (layers: " + names + ")");
  }
  const std::vector<std::string> rest(tokens.begin() + 1, tokens.end());
  std::vector<std::string> flags, names;
  if (kind->kind == LayerKind::conv) flags = {"bias"};
  if (kind->kind == LayerKind::linear) flags = {"nobias"}, names = {"classes"};
  Args a(where, *kind, rest, flags, names);

  LayerSpec l;
  l.kind = kind->kind;
  switch (l.kind) {
    case LayerKind::conv:
      l.out = parse_channels(a, "conv 32 3x3");
      parse_window(a, &l.R, &l.S);
      a.option("stride", true, 1, &l.stride_h, &l.stride_w);
      a.option("pad", true, 0, &l.pad_h, &l.pad_w);
      l.bias = a.flag("bias");
      break;
    case LayerKind::maxpool:
      parse_window(a, &l.R, &l.S);
      l.stride_h = l.R;  // the default: windows side by side
      l.stride_w = l.S;
      a.option("stride", true, 1, &l.stride_h, &l.stride_w);
      a.option("pad", true, 0, &l.pad_h, &l.pad_w);
      break;
    case LayerKind::linear:
      if (a.peek() == "classes") {
        a.next();
        l.out_is_classes = true;
      } else {
        l.out = parse_channels(a, "linear 10' or 'linear classes");
      }
      l.bias = !a.flag("nobias");
      break;
    case LayerKind::resblock:
      l.out = parse_channels(a, "resblock 64");
      a.option("stride", false, 1, &l.stride_h, &l.stride_w);
      break;
    case LayerKind::bn:
    case LayerKind::relu:
    case LayerKind::gap:
    case LayerKind::flatten:
      break;
  }
  a.finish();
  return l;
}

}  // namespace

ModelSpec parse_model_spec(const std::string& text, const std::string& source) {
  ModelSpec spec;
  spec.source = source;
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); n++) {
    const size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::vector<std::string> tokens;
    for (std::string t; words >> t;) tokens.push_back(t);
    if (tokens.empty()) continue;
    LayerSpec l = parse_line(source + ":" + std::to_string(n), tokens);
    l.line = n;
    spec.layers.push_back(l);
  }
  if (spec.layers.empty()) throw UserError(printable(source) + ": the description has no layers");
  return spec;
}

ModelSpec load_model_spec(const std::string& name_or_path) {
  auto it = builtins().find(name_or_path);
  if (it != builtins().end()) return parse_model_spec(*it->second, name_or_path);
  std::ifstream f(name_or_path);
  if (!f)
    throw UserError("unknown model '" + printable(name_or_path) + "': not a built-in model (" +
                    builtin_list() + ") and not a readable file");
  std::ostringstream text;
  text << f.rdbuf();
  return parse_model_spec(text.str(), name_or_path);
}

// ---- printing ---------------------------------------------------------------------------

bool LayerSpec::operator==(const LayerSpec& o) const {
  return kind == o.kind && out == o.out && out_is_classes == o.out_is_classes && R == o.R &&
         S == o.S && stride_h == o.stride_h && stride_w == o.stride_w && pad_h == o.pad_h &&
         pad_w == o.pad_w && bias == o.bias;
}

namespace {
std::string pair_str(int a, int b) {
  return a == b ? std::to_string(a) : std::to_string(a) + "x" + std::to_string(b);
}
}  // namespace

std::string layer_spec_str(const LayerSpec& l) {
  std::ostringstream os;
  os << layer_kind_name(l.kind);
  switch (l.kind) {
    case LayerKind::conv:
    case LayerKind::maxpool: {
      if (l.kind == LayerKind::conv) os << " " << l.out;
      os << " " << l.R << "x" << l.S;
      const bool default_stride = l.kind == LayerKind::conv
                                      ? l.stride_h == 1 && l.stride_w == 1
                                      : l.stride_h == l.R && l.stride_w == l.S;
      if (!default_stride) os << " stride=" << pair_str(l.stride_h, l.stride_w);
      if (l.pad_h || l.pad_w) os << " pad=" << pair_str(l.pad_h, l.pad_w);
      if (l.kind == LayerKind::conv && l.bias) os << " bias";
      break;
    }
    case LayerKind::linear:
      if (l.out_is_classes)
        os << " classes";
      else
        os << " " << l.out;
      if (!l.bias) os << " nobias";
      break;
    case LayerKind::resblock:
      os << " " << l.out;
      if (l.stride_h != 1) os << " stride=" << l.stride_h;
      break;
    default:
      break;
  }
  return os.str();
}

std::string ModelSpec::where(const LayerSpec& l) const {  // printable: it leads messages
  return printable(source) + ":" + std::to_string(l.line);
}

}  // namespace cutrain
