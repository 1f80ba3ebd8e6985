// defines: resolve_config, which fills the configuration's "to be worked out" fields (size,
// channels, classes, mean/std, pad, and the defaults of resolve_defaults) from the data and
// reads the model description into model_text; measure_mean_std; train_image_spec and
// eval_image_spec, how the loader reads images for training and for evaluation.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "data/image.h"
#include "data/source.h"
#include "train/setup/config.h"

namespace cutrain {

// Training batches: random crop (pad, resize) and flip with --augment. Evaluation: the same
// size and scale, centred, no flip. Both need a resolved configuration.
ImageSpec train_image_spec(const TrainConfig& c);
ImageSpec eval_image_spec(const TrainConfig& c);

// Fills the resolved fields of `c` (see train/setup/config.h) from the training data and the
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
