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
#include "train/config.h"

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

// Fills the resolved fields of `c` (see train/config.h) from the training data and the
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
