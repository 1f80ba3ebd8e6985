// defines: predict(), the k most likely classes of every sample of a data set, with their
// probabilities (softmax of the logits), as `cutrain predict` prints them; and
// resolve_checkpoint_arg, what --checkpoint FILE|DIR means.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/source.h"
#include "nn/model.h"
#include "train/engine/evaluate.h"

namespace cutrain {

struct Prediction {
  int64_t index = 0;            // the sample, in the source
  std::vector<int> classes;     // the k best, best first (ties: lower class first)
  std::vector<double> probs;    // their probabilities
  std::vector<double> all;      // every class's probability, when predict() was asked for them
};

// In source order; samples that fail to load are left out (and reported by the loader).
// all_probs: fill Prediction::all too (K doubles an image).
std::vector<Prediction> predict(Model& model, std::shared_ptr<const SampleSource> data,
                                const EvalOptions& opt, int k, bool all_probs = false);

// --checkpoint: a file is taken as it is; a run folder means its best.h5 when there is one
// (the best validation top-1), else its newest complete checkpoint.
std::string resolve_checkpoint_arg(const std::string& file_or_dir);

}  // namespace cutrain
