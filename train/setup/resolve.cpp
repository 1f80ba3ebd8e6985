// Resolving a configuration from its data (see resolve.h).
#include "train/setup/resolve.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/image_list.h"
#include "data/pack.h"
#include "kernels/check.h"
#include "nn/model.h"
#include "nn/model_spec.h"
#include "train/setup/classes.h"
#include "train/setup/sources.h"
#include "train/setup/val_split.h"

namespace cutrain {

namespace {

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
  if (!c.kernel_plan.empty() && std::filesystem::is_directory(c.kernel_plan)) {
    // --kernel-plan RUN: that run's choices, so that this one runs the very same kernels
    const std::string from = c.kernel_plan, path = from + "/config.json";
    std::ifstream f(path);
    USER_CHECK(f.good(), "--kernel-plan " << from << ": no config.json there (a run folder of "
                                          << "cutrain train is meant)");
    std::stringstream text;
    text << f.rdbuf();
    c.kernel_plan = config_from_json_text(text.str(), path).kernel_plan;
    USER_CHECK(!c.kernel_plan.empty(), "--kernel-plan " << from << ": that run has no kernel "
                                                        << "plan (it chose no kernels per layer)");
    notes.push_back("kernel plan from " + from + ": " + c.kernel_plan);
  }
  if (!c.kernel_plan.empty()) {  // a name that is not a conv layer: now, not after the data
    ModelOptions shapes;
    shapes.H = shapes.W = c.size > 0 ? c.size : 32;
    shapes.C = c.channels > 0 ? c.channels : 1;
    shapes.classes = c.classes;
    shapes.shapes_only = true;
    build_model(parse_model_spec(c.model_text, c.model), shapes)
        ->set_kernel_plan(parse_kernel_plan(c.kernel_plan));
  }
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
