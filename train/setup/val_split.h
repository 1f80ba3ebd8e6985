// defines: the run's training and validation data: open_train_source, open_val_source (--val,
// or --val-split's held-out part of --train: held_out_split), has_validation, validation_name.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/image.h"
#include "data/source.h"
#include "train/setup/config.h"

namespace cutrain {

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

}  // namespace cutrain
