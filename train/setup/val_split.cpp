// The run's training and validation data, and --val-split (see val_split.h).
#include "train/setup/val_split.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "data/sampler.h"
#include "kernels/check.h"
#include "kernels/rng.h"
#include "train/setup/classes.h"
#include "train/setup/sources.h"

namespace cutrain {

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

bool has_validation(const TrainConfig& c) { return c.val_split > 0 || !c.val.empty(); }

std::string validation_name(const TrainConfig& c) {
  if (c.val_split <= 0) return c.val;
  std::ostringstream os;
  os << c.val_split * 100 << "% of " << c.train << " held out (--val-split " << c.val_split
     << ", stratified, seed " << c.seed << ")";
  return os.str();
}

}  // namespace cutrain
