// defines: the trainer's view of its data: open_source (an image list, a folder of class
// folders or an HDF5 pack, as the loader's SampleSource, optionally only its first N
// samples), train_image_spec / eval_image_spec, and resolve_config, which fills the
// configuration's "to be worked out" fields (size, channels, classes, mean/std, pad, and the
// defaults of resolve_defaults) and reads the model description into model_text.
#pragma once
#include <functional>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/image.h"
#include "data/source.h"
#include "train/run/config.h"

namespace cutrain {

// Does the file start with the HDF5 signature? (A pack, whatever its name.)
bool is_hdf5_file(const std::string& path);

// The data at `path` as the loader reads it, with `spec`: a pack (PackSource) when the file is
// HDF5, else an image list, a CSV list or a folder with a folder per class (ListSource), read
// with `lists` (data/image_list.h; a pack ignores it). limit > 0 keeps only the first `limit`
// samples (in list or pack order): what --limit-train and --limit-val do, for quick runs.
std::shared_ptr<const SampleSource> open_source(const std::string& path, const ImageSpec& spec,
                                                int64_t limit = 0,
                                                const ListOptions& lists = {});

// --val-split F: the validation set carved from the training data. Stratified: each class
// gives round(F * n_k) of its n_k samples (at most n_k - 1, so every class keeps one training
// sample; a class of one sample gives none), chosen by a permutation of the class's samples
// that is a pure function of (seed, class): the same split on every run, every machine and
// every resume, a different one for another --seed. Labels are read from the source (no
// image is decoded). Both index lists are in source order.
struct HeldOutSplit {
  std::vector<int64_t> train, val;
};
HeldOutSplit held_out_split(const SampleSource& all, double fraction, uint64_t seed);

// The samples `indices` of another source, in that order.
std::shared_ptr<const SampleSource> subset_source(std::shared_ptr<const SampleSource> all,
                                                  std::vector<int64_t> indices);

// The training data and the validation data of a configuration, as the loader reads them
// with `spec`: --train (its first --limit-train samples), without the held-out part when
// --val-split is set; --val (its first --limit-val), or the held-out part of --train (its
// first --limit-val), or null when the run has no validation data.
std::shared_ptr<const SampleSource> open_train_source(const TrainConfig& c, const ImageSpec& spec);
std::shared_ptr<const SampleSource> open_val_source(const TrainConfig& c, const ImageSpec& spec);
bool has_validation(const TrainConfig& c);
// Where the validation data come from, for messages: "test.txt" or
// "10% of train.txt held out (--val-split 0.1, stratified, seed 1)".
std::string validation_name(const TrainConfig& c);

// Classes matched by name. A data set's labels index its own class names (classes.txt
// beside a list, the folders of a folder of class folders, a pack's class_names); a model's
// outputs index the model's (the training run's class_names, kept in every checkpoint). When
// both sides name their classes, a label means its name: class_mapping returns, for each
// data label, the model's class of the same name, and refuses (UserError, both lists shown)
// names the model lacks or a different set of names. When a side has no names, labels are
// indices, and must be below the model's class count. A model's names that are just "0",
// "1", ... (what a run whose training data named no classes gets) count as no names, unless
// the data's names are those very strings. Returns {} when labels are indices or when the
// names are in the same order (nothing to map).
std::vector<int32_t> class_mapping(const std::vector<std::string>& data_names,
                                   const std::vector<std::string>& model_names,
                                   const std::string& data_what, const std::string& model_what);
// `source` with each label k read as map[k] (an empty map: `source` itself).
std::shared_ptr<const SampleSource> relabel_source(std::shared_ptr<const SampleSource> source,
                                                   std::vector<int32_t> map);
// The data at `path` (open_source) with labels in the model's classes: by name when both name
// their classes, else as indices, checked against the model's class count.
std::shared_ptr<const SampleSource> open_source_for_model(
    const std::string& path, const ImageSpec& spec, int64_t limit,
    const std::vector<std::string>& model_names, const std::string& model_what,
    const ListOptions& lists = {});

// How a run reads its lists once its classes are known: --csv-columns, and class names in a
// list resolved against the run's classes (c.class_names, "the training classes") by name.
// So a validation list of names maps to the training classes, not to its own sorting, and
// eval and predict (given the checkpoint's configuration) map names as the run did.
ListOptions run_list_options(const TrainConfig& c);

// The class names stored with the data (classes.txt beside a list, a list's own sorted class
// names, the folder names of a folder of class folders, a pack's class_names), or empty.
std::vector<std::string> data_class_names(const std::string& path, const ListOptions& lists = {});

// Training batches: random crop (pad, resize) and flip with --augment. Evaluation: the same
// size and scale, centred, no flip. Both need a resolved configuration.
ImageSpec train_image_spec(const TrainConfig& c);
ImageSpec eval_image_spec(const TrainConfig& c);

// Fills the resolved fields of `c` (see train/run/config.h) from the training data and the
// validation labels, and reads the model description (model_text). Returns the lines worth
// printing about what was decided ("size 28, channels 1 (from ...)"). Idempotent.
// `before_measuring`, when given, sees the configuration with everything resolved but mean
// and std, before they are measured (which decodes up to 1,000 images): run_training refuses
// a run that cannot fit in memory there, at once.
std::vector<std::string> resolve_config(
    TrainConfig& c, const std::function<void(const TrainConfig&)>& before_measuring = nullptr);

// Per-channel mean and standard deviation of pixel values / 255 over up to max_samples
// samples spread evenly over the source (bad samples skipped).
void measure_mean_std(const SampleSource& source, int max_samples, std::vector<double>& mean,
                      std::vector<double>& std);

}  // namespace cutrain
