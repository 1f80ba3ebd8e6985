#include "train/run/dataset.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "data/pack.h"
#include "data/sampler.h"
#include "kernels/check.h"
#include "kernels/rng.h"
#include "nn/model_spec.h"

namespace cutrain {

namespace {

// Another source seen through a wrapper: every sample as it is, unless a subclass overrides
// (FirstN the size, Relabeled the labels).
class Wrapped : public SampleSource {
 public:
  explicit Wrapped(std::shared_ptr<const SampleSource> all) : all_(std::move(all)) {}
  int64_t size() const override { return all_->size(); }
  int32_t label(int64_t i) const override { return all_->label(i); }
  std::string name(int64_t i) const override { return all_->name(i); }
  const ImageSpec& spec() const override { return all_->spec(); }
  DecodeResult load(int64_t i, uint64_t key, uint8_t* out, InputCrop& window,
                    StageTimes& t) const override {
    return all_->load(i, key, out, window, t);
  }

 protected:
  std::shared_ptr<const SampleSource> all_;
};

// The first `limit` samples of another source: --limit-train / --limit-val.
class FirstN : public Wrapped {
 public:
  FirstN(std::shared_ptr<const SampleSource> all, int64_t n) : Wrapped(std::move(all)), n_(n) {}
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
};

// The samples `indices` of another source: --val-split's two parts.
class Subset : public SampleSource {
 public:
  Subset(std::shared_ptr<const SampleSource> all, std::vector<int64_t> indices)
      : all_(std::move(all)), indices_(std::move(indices)) {}
  int64_t size() const override { return int64_t(indices_.size()); }
  int32_t label(int64_t i) const override { return all_->label(at(i)); }
  std::string name(int64_t i) const override { return all_->name(at(i)); }
  const ImageSpec& spec() const override { return all_->spec(); }
  DecodeResult load(int64_t i, uint64_t key, uint8_t* out, InputCrop& window,
                    StageTimes& t) const override {
    return all_->load(at(i), key, out, window, t);
  }

 private:
  int64_t at(int64_t i) const { return indices_[size_t(i)]; }
  std::shared_ptr<const SampleSource> all_;
  std::vector<int64_t> indices_;
};

// Largest label + 1 of a source: the class count when no names are stored.
int label_count(const SampleSource& s) {
  int32_t top = -1;
  for (int64_t i = 0; i < s.size(); i++) top = std::max(top, s.label(i));
  return int(top) + 1;
}

// A list's size and channels, from the first image that decodes: its shorter side (at most
// 64: larger images need a --size chosen by the user, not guessed), and 1 channel when every
// pixel is grey (R = G = B), else 3.
std::string probe_list_images(const ImageList& list, int& size, int& channels) {
  for (size_t i = 0; i < list.samples.size() && i < 16; i++) {
    Image img;
    if (!load_image_file(list.samples[i].path, 3, 0, 64LL << 20, img).ok()) continue;
    bool grey = true;
    for (size_t p = 0; grey && p + 2 < img.pixels.size(); p += 3)
      grey = img.pixels[p] == img.pixels[p + 1] && img.pixels[p] == img.pixels[p + 2];
    const int shorter = std::min(img.h, img.w);
    const std::string from = " (from " + list.samples[i].path + ", " + std::to_string(img.w) +
                             "x" + std::to_string(img.h) + (grey ? " grey" : " colour") + ")";
    if (size == 0) size = std::min(shorter, 64);
    if (channels == 0) channels = grey ? 1 : 3;
    return from + (shorter > 64 ? "; pass --size to train on larger images" : "");
  }
  USER_CHECK(false, list.source << ": none of the first 16 images decodes; run `cutrain check-data "
                           << list.source << "` to see what is wrong with them");
}

std::string join(const std::vector<double>& v) {
  std::ostringstream os;
  for (size_t i = 0; i < v.size(); i++) os << (i ? "," : "") << v[i];
  return os.str();
}

}  // namespace

bool is_hdf5_file(const std::string& path) {
  static const char kSignature[8] = {'\x89', 'H', 'D', 'F', '\r', '\n', '\x1a', '\n'};
  char head[8] = {};
  std::ifstream f(path, std::ios::binary);
  return f.read(head, 8) && std::memcmp(head, kSignature, 8) == 0;
}

std::shared_ptr<const SampleSource> open_source(const std::string& path, const ImageSpec& spec,
                                                int64_t limit, const ListOptions& lists) {
  CHECK(limit >= 0, "open_source: limit must be >= 0, got " << limit);
  std::shared_ptr<const SampleSource> s;
  if (is_hdf5_file(path))
    s = std::make_shared<PackSource>(path, spec);
  else
    s = std::make_shared<ListSource>(read_images(path, lists), spec);
  if (limit > 0 && limit < s->size()) s = std::make_shared<FirstN>(s, limit);
  return s;
}

HeldOutSplit held_out_split(const SampleSource& all, double fraction, uint64_t seed) {
  CHECK(fraction >= 0 && fraction < 1, "held_out_split: fraction " << fraction);
  std::vector<std::vector<int64_t>> by_class;
  for (int64_t i = 0; i < all.size(); i++) {
    const int32_t k = all.label(i);
    CHECK(k >= 0, "held_out_split: negative label " << k);
    if (size_t(k) >= by_class.size()) by_class.resize(size_t(k) + 1);
    by_class[size_t(k)].push_back(i);
  }
  std::vector<char> held(size_t(all.size()), 0);
  for (size_t k = 0; k < by_class.size(); k++) {
    const auto& members = by_class[k];  // in source order
    const int64_t n = int64_t(members.size());
    const int64_t take =
        n < 2 ? 0 : std::min<int64_t>(n - 1, std::llround(fraction * double(n)));
    // A permutation of the class's members that depends on (seed, class) only; its first
    // `take` are held out. The seed is mixed with a constant so the split's draws are not the
    // first epoch's batch order.
    const uint64_t class_seed = rng_u64(seed ^ 0x76616c2d73706c74ULL, k);  // "val-splt"
    const std::vector<int64_t> perm = epoch_permutation(n, class_seed, 0, true);
    for (int64_t j = 0; j < take; j++) held[size_t(members[size_t(perm[size_t(j)])])] = 1;
  }
  HeldOutSplit split;
  for (int64_t i = 0; i < all.size(); i++) (held[size_t(i)] ? split.val : split.train).push_back(i);
  return split;
}

std::shared_ptr<const SampleSource> subset_source(std::shared_ptr<const SampleSource> all,
                                                  std::vector<int64_t> indices) {
  return std::make_shared<Subset>(std::move(all), std::move(indices));
}

namespace {
// --train as the split sees it: its first --limit-train samples.
std::shared_ptr<const SampleSource> split_base(const TrainConfig& c, const ImageSpec& spec,
                                               HeldOutSplit& split) {
  auto all = open_source(c.train, spec, c.limit_train, run_list_options(c));
  split = held_out_split(*all, c.val_split, c.seed);
  return all;
}
}  // namespace

std::shared_ptr<const SampleSource> open_train_source(const TrainConfig& c, const ImageSpec& spec) {
  if (c.val_split <= 0) return open_source(c.train, spec, c.limit_train, run_list_options(c));
  HeldOutSplit split;
  auto all = split_base(c, spec, split);
  USER_CHECK(!split.train.empty(), c.train << ": no training samples left after --val-split "
                                           << c.val_split);
  return subset_source(std::move(all), std::move(split.train));
}

std::shared_ptr<const SampleSource> open_val_source(const TrainConfig& c, const ImageSpec& spec) {
  if (c.val_split <= 0)
    return c.val.empty() ? nullptr
                         : open_source_for_model(c.val, spec, c.limit_val, c.class_names,
                                                 "the training data (" + c.train + ")",
                                                 run_list_options(c));
  HeldOutSplit split;
  auto all = split_base(c, spec, split);
  USER_CHECK(!split.val.empty(),
             c.train << ": --val-split " << c.val_split << " holds out no sample (every class "
                     << "has fewer than 2 samples, or the fraction is too small for them); "
                     << "raise it or give --val");
  if (c.limit_val > 0 && c.limit_val < int64_t(split.val.size())) split.val.resize(size_t(c.limit_val));
  return subset_source(std::move(all), std::move(split.val));
}

namespace {

// Relabelled: --val, eval and predict data whose classes are named in another order.
class Relabeled : public Wrapped {
 public:
  Relabeled(std::shared_ptr<const SampleSource> all, std::vector<int32_t> map)
      : Wrapped(std::move(all)), map_(std::move(map)) {}
  int32_t label(int64_t i) const override {
    const int32_t k = all_->label(i);
    return k >= 0 && size_t(k) < map_.size() ? map_[size_t(k)] : k;
  }

 private:
  std::vector<int32_t> map_;
};

bool numbered(const std::vector<std::string>& names) {  // "0", "1", ..., "K-1"
  for (size_t k = 0; k < names.size(); k++)
    if (names[k] != std::to_string(k)) return false;
  return true;
}

std::string name_list(const std::vector<std::string>& names) {
  std::string s;
  for (size_t k = 0; k < names.size(); k++) s += (k ? ", " : "") + names[k];
  return s;
}

}  // namespace

std::vector<int32_t> class_mapping(const std::vector<std::string>& data_names,
                                   const std::vector<std::string>& model_names,
                                   const std::string& data_what, const std::string& model_what) {
  if (data_names.empty() || model_names.empty()) return {};
  if (numbered(model_names) &&
      std::set<std::string>(data_names.begin(), data_names.end()) !=
          std::set<std::string>(model_names.begin(), model_names.end()))
    return {};  // the model's names are only numbers: labels are indices
  std::map<std::string, int32_t> model_index;
  for (size_t k = 0; k < model_names.size(); k++) model_index[model_names[k]] = int32_t(k);
  std::vector<int32_t> map(data_names.size());
  std::vector<std::string> unknown;
  for (size_t k = 0; k < data_names.size(); k++) {
    const auto it = model_index.find(data_names[k]);
    if (it == model_index.end()) unknown.push_back(data_names[k]);
    else map[k] = it->second;
  }
  USER_CHECK(unknown.empty() && data_names.size() == model_names.size(),
             data_what << " names other classes than " << model_what << ": "
                       << (unknown.empty() ? "" : "the model has no class " + name_list(unknown) + "; ")
                       << data_names.size() << " in the data (" << name_list(data_names) << "), "
                       << model_names.size() << " in the model (" << name_list(model_names)
                       << "). Classes are matched by name: give data with the model's classes");
  bool identity = true;
  for (size_t k = 0; k < map.size(); k++) identity = identity && map[k] == int32_t(k);
  return identity ? std::vector<int32_t>{} : map;
}

std::shared_ptr<const SampleSource> relabel_source(std::shared_ptr<const SampleSource> source,
                                                   std::vector<int32_t> map) {
  if (map.empty()) return source;
  return std::make_shared<Relabeled>(std::move(source), std::move(map));
}

std::shared_ptr<const SampleSource> open_source_for_model(
    const std::string& path, const ImageSpec& spec, int64_t limit,
    const std::vector<std::string>& model_names, const std::string& model_what,
    const ListOptions& lists) {
  auto s = open_source(path, spec, limit, lists);
  std::vector<int32_t> map =
      class_mapping(data_class_names(path, lists), model_names, path, model_what);
  if (map.empty()) {  // labels are indices (or already in the model's order)
    const int top = label_count(*s) - 1;
    USER_CHECK(model_names.empty() || top < int(model_names.size()),
               path << ": labels go up to " << top << " but " << model_what << " has "
                    << model_names.size() << " classes");
  }
  return relabel_source(std::move(s), std::move(map));
}

bool has_validation(const TrainConfig& c) { return c.val_split > 0 || !c.val.empty(); }

std::string validation_name(const TrainConfig& c) {
  if (c.val_split <= 0) return c.val;
  std::ostringstream os;
  os << c.val_split * 100 << "% of " << c.train << " held out (--val-split " << c.val_split
     << ", stratified, seed " << c.seed << ")";
  return os.str();
}

std::vector<std::string> data_class_names(const std::string& path, const ListOptions& lists) {
  if (is_hdf5_file(path)) return read_pack_info(path).class_names;
  return read_images(path, lists).class_names;
}

ListOptions run_list_options(const TrainConfig& c) {
  ListOptions o;
  o.csv_columns = c.csv_columns;
  o.classes = c.class_names;
  o.classes_source = "the training classes";
  return o;
}

ImageSpec eval_image_spec(const TrainConfig& c) {
  CHECK(c.size > 0 && c.channels > 0, "image spec: the configuration is not resolved yet");
  ImageSpec s;
  s.size = c.size;
  s.channels = c.channels;
  s.resize = c.resize;
  return s;
}

ImageSpec train_image_spec(const TrainConfig& c) {
  ImageSpec s = eval_image_spec(c);
  s.random_crop = s.random_flip = c.augment;
  s.pad = c.augment ? std::max(0, c.pad) : 0;
  return s;
}

void measure_mean_std(const SampleSource& source, int max_samples, std::vector<double>& mean,
                      std::vector<double>& std) {
  const int C = source.spec().channels;
  const int64_t N = source.size();
  const int64_t take = std::min<int64_t>(N, max_samples);
  std::vector<double> sum(size_t(C), 0), sq(size_t(C), 0);
  const int S = source.spec().size;
  std::vector<uint8_t> px(size_t(S) * size_t(S) * size_t(C));
  int64_t count = 0;  // pixels per channel
  StageTimes t;
  for (int64_t k = 0; k < take; k++) {
    const int64_t i = k * N / take;  // evenly spread: lists are often sorted by class
    if (!source.load_cut(i, 0, px.data(), t).ok()) continue;
    for (size_t p = 0; p < px.size(); p++) {
      const double v = px[p] / 255.0;
      sum[p % size_t(C)] += v;
      sq[p % size_t(C)] += v * v;
    }
    count += int64_t(px.size()) / C;
  }
  USER_CHECK(count > 0, "cannot measure the pixel mean: none of " << take << " samples loads");
  mean.assign(size_t(C), 0);
  std.assign(size_t(C), 0);
  for (int c = 0; c < C; c++) {
    const double m = sum[size_t(c)] / double(count);
    const double var = std::max(0.0, sq[size_t(c)] / double(count) - m * m);
    // Rounded to 4 digits: the saved configuration stays readable, and exactness needs only
    // that every run of this configuration uses the same numbers, which it then does.
    mean[size_t(c)] = std::round(m * 1e4) / 1e4;
    std[size_t(c)] = std::max(1e-3, std::round(std::sqrt(var) * 1e4) / 1e4);
  }
}

std::vector<std::string> resolve_config(
    TrainConfig& c, const std::function<void(const TrainConfig&)>& before_measuring) {
  validate_config(c);
  std::vector<std::string> notes;
  const bool pack = is_hdf5_file(c.train);
  if (pack) {
    const PackInfo info = read_pack_info(c.train);
    if (c.size == 0) c.size = c.resize ? std::min(c.resize, info.size) : info.size;
    if (c.channels == 0) c.channels = info.channels;
    if (c.class_names.empty()) c.class_names = info.class_names;
  } else if (c.size == 0 || c.channels == 0 || c.class_names.empty()) {
    // The training list on its own: its classes.txt, or its own sorted class names.
    ListOptions own;
    own.csv_columns = c.csv_columns;
    if (!c.class_names.empty()) own = run_list_options(c);
    const ImageList list = read_images(c.train, own);
    if (c.size == 0 || c.channels == 0) {
      const std::string from = probe_list_images(list, c.size, c.channels);
      notes.push_back("size " + std::to_string(c.size) + ", channels " +
                      std::to_string(c.channels) + from);
    }
    if (c.class_names.empty()) c.class_names = list.class_names;
  }
  if (c.augment && c.pad < 0) c.pad = c.resize ? 0 : c.size / 8;
  if (c.pad < 0) c.pad = 0;
  resolve_defaults(c);
  validate_config(c);  // again, now that size and channels are known

  // Classes: the stored names, else the largest label + 1 of the training and validation data.
  const auto train = open_train_source(c, eval_image_spec(c));
  const auto val = open_val_source(c, eval_image_spec(c));
  const int train_labels = label_count(*train);
  const int val_labels = val ? label_count(*val) : 0;
  if (c.classes == 0)
    c.classes = c.class_names.empty() ? std::max(train_labels, val_labels)
                                      : int(c.class_names.size());
  if (c.class_names.empty())
    for (int k = 0; k < c.classes; k++) c.class_names.push_back(std::to_string(k));
  USER_CHECK(int(c.class_names.size()) == c.classes,
        "the data names " << c.class_names.size() << " classes but the configuration says "
                          << c.classes);
  USER_CHECK(train_labels <= c.classes && val_labels <= c.classes,
        "labels go up to " << std::max(train_labels, val_labels) - 1 << " but there are only "
                           << c.classes << " classes (" << c.train << (c.val.empty() ? "" : ", ")
                           << c.val << ")");
  if (c.val_split > 0)
    notes.push_back("validation: " + std::to_string(val->size()) + " images, " +
                    validation_name(c) + "; training on the other " +
                    std::to_string(train->size()));

  if (c.model_text.empty()) {
    const auto names = builtin_model_names();
    if (std::find(names.begin(), names.end(), c.model) != names.end()) {
      c.model_text = builtin_model_text(c.model);
    } else {
      std::ifstream f(c.model);
      USER_CHECK(f.good(), "--model " << c.model << ": no such built-in model or file");
      std::stringstream ss;
      ss << f.rdbuf();
      c.model_text = ss.str();
    }
  }
  parse_model_spec(c.model_text, c.model);  // a syntax error now, not after loading data
  if (before_measuring) before_measuring(c);
  if (c.mean.empty()) {
    measure_mean_std(*train, 1000, c.mean, c.std);
    notes.push_back("input normalisation: mean " + join(c.mean) + ", std " + join(c.std) +
                    " (measured on " + std::to_string(std::min<int64_t>(1000, train->size())) +
                    " training images; --mean/--std to set)");
  }
  return notes;
}

}  // namespace cutrain
