// defines: ClassBalance and class_balance(), what `--balance none|sampler|loss` needs of the
// training data: the label of every sample, the count of each class, the inverse-frequency
// weights; balance_description(), the line the run prints about it.
//
// Two answers to a training set whose classes are of very different sizes (what
// `cutrain check-data` reports as "imbalance"):
//   sampler  class-balanced epochs (data/sampler.h): an epoch still has N draws, so the steps
//            per epoch, the schedule and resume are unchanged, but each class with samples
//            gets N / K of them (K: the classes that have samples; the N mod K left over go one
//            each to classes taken in turn). A small class repeats its samples (each draw
//            augmented on its own key), a large one is subsampled, differently each epoch.
//   loss     inverse-frequency class weights in the loss: w_k = N / (K n_k), n_k the training
//            samples of class k (0 for a class without samples), so that sum_k n_k w_k = N:
//            the mean weight over the training samples is 1, and the loss of a batch of B is
//            (1/B) sum_i w_{y_i} l_i (kernels/softmax_xent.h). That is PyTorch's
//            CrossEntropyLoss(weight=w, reduction='sum') / B, not reduction='mean' (which
//            divides by the batch's sum of weights), so a micro-batch's or a replica's share
//            of a batch stays n / B. With label smoothing the whole smoothed row is weighted by
//            its label's w (PyTorch weights the smoothing term's classes by their own w).
// Evaluation always reports the plain, unweighted loss of every validation image once.
// The counts are of the listed samples: a file that turns out bad is still counted (it is
// known bad only once read).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/source.h"

namespace cutrain {

struct ClassBalance {
  std::string mode = "none";    // none | sampler | loss (--balance)
  std::vector<int32_t> labels;  // sampler: every training sample's label, for SamplerConfig
  std::vector<int64_t> counts;  // sampler, loss: training samples per class (K of them)
  std::vector<double> weights;  // loss: w_k = N / (K n_k) with K the classes that have samples
};

// What `mode` needs of `train` (labels in [0, classes)). mode "none" reads nothing.
ClassBalance class_balance(const std::string& mode, const SampleSource& train, int classes);

// w_k = N / (K n_k) for the K classes with n_k > 0, 0 for the others.
std::vector<double> inverse_frequency_weights(const std::vector<int64_t>& counts);

// The run's line about it ("" for none), e.g.
//   --balance sampler: each epoch draws 60000 samples, 6000 per class of 10 (classes under 6000
//   repeat samples, larger ones are subsampled)
//   --balance loss: class weights N / (10 n_k) (mean 1 over the training samples): ...
// The weights are listed with the class names up to 12 classes, else their range.
std::string balance_description(const ClassBalance& b, const std::vector<std::string>& names);

}  // namespace cutrain
