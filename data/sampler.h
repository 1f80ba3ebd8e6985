// defines: Sampler (which samples make up each batch of each epoch, for each replica),
// LastBatch, SamplerConfig, SamplerCursor (where a run is, saved for exact resume),
// epoch_permutation, augment_key, and the class-balanced epochs of --balance sampler
// (balanced_class_draws, balanced_epoch).
//
// Epoch e visits the samples in the order perm_e, a permutation of [0, N) that is a pure
// function of (seed, e): Fisher-Yates with the swap for position i drawn from the counter-based
// RNG at key (seed, e, i). Nothing else enters it (not the thread count, not the call order,
// not the replica count), so the batches are the same in any run with the same seed, N and B,
// and a resumed run continues exactly.
//
// Global batch b of an epoch is perm_e[b*B, b*B + G_b), with G_b = B except perhaps the last:
//   LastBatch::drop     only full batches: floor(N/B) of them; the last N mod B positions of
//                       the permutation are not used this epoch (others are, next epoch).
//   LastBatch::partial  ceil(N/B) batches; the last has N - (batches-1)*B samples.
// Replica r of R takes a contiguous shard of the global batch: with G = q*R + m, replicas
// 0..m-1 take q+1 samples and replicas m..R-1 take q, in rank order. Shard sizes differ by at
// most one, the shards are disjoint and together are the global batch, so every sample appears
// exactly once per epoch across all replicas (except the dropped remainder). B >= R is
// required, so every replica gets at least one sample of a full batch; with partial, a last
// batch smaller than R leaves replicas G..R-1 an empty shard (their gradient must then count
// for nothing: weight each replica's contribution by its shard size).
//
// Class-balanced epochs (SamplerConfig::labels given; `--balance sampler`). An epoch keeps its
// length N, so the batches per epoch, the schedule and the cursor mean what they mean without
// balancing, but its N positions hold draws balanced over the K classes that have samples:
//   - class k gets d_k = floor(N/K) draws, plus one for N mod K of the classes, taken in turn
//     as the epoch advances (the j-th class with samples gets one more when
//     (j - e) mod K < N mod K): balanced_class_draws;
//   - class k's n_k members are drawn in the order of permutations of them, cycle c using the
//     permutation keyed by (seed, e, k, c): a class with n_k < d_k repeats its samples (each
//     floor(d_k/n_k) or ceil(d_k/n_k) times), a larger one is subsampled (d_k of its members,
//     others in other epochs);
//   - the N draws, listed class by class, are put in the order of perm_e, the epoch's
//     permutation above: the epoch's order is draws[perm_e[0]], draws[perm_e[1]], ...
// A pure function of (labels, seed, e) (balanced_epoch), batched, sharded and resumed exactly
// like the unbalanced order. Augmentation: a sample drawn twice in one epoch would get the
// same crop from augment_key(seed, e, sample), so in balanced epochs each draw is keyed by its
// position in the epoch instead (draw_augment_key).
//
// Threads: batch() may be called from any number of threads at once. The permutations of the
// two most recently used epochs are cached behind a mutex (computing one is O(N); batch() is
// O(B)), so a producer that runs ahead into the next epoch does not recompute either.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace cutrain {

enum class LastBatch { drop, partial };

struct SamplerConfig {
  int64_t num_samples = 0;  // N
  int64_t batch_size = 0;   // B: the global batch, summed over all replicas
  uint64_t seed = 0;
  bool shuffle = true;      // false: every epoch visits 0, 1, ..., N-1 in order
  int replicas = 1;         // R >= 1
  int rank = 0;             // this replica, in [0, R)
  LastBatch last_batch = LastBatch::drop;
  // Class-balanced epochs (see the top of this file): labels[i] is sample i's class, >= 0, for
  // all N samples. Empty: every sample once per epoch. Balancing needs shuffle.
  std::vector<int32_t> labels;
};

// Every sample once, in list order, the last batch smaller: what evaluation, prediction and
// check-data read with.
SamplerConfig in_order(int64_t num_samples, int64_t batch_size);

// The next batch a run will train on. Save it after a step has finished (and after the
// checkpoint's weights were taken), restore it, and the run continues with the very batch it
// would have trained on next. A cursor means the same batch for any replica count, but only
// with the same N, B, seed, shuffle and last-batch policy.
struct SamplerCursor {
  int64_t epoch = 0;
  int64_t batch = 0;
  bool operator==(const SamplerCursor& o) const { return epoch == o.epoch && batch == o.batch; }
  bool operator!=(const SamplerCursor& o) const { return !(*this == o); }
};

// "epoch=3 batch=17", and back. parse_cursor accepts exactly that form (non-negative values).
std::string cursor_to_string(const SamplerCursor& c);
SamplerCursor parse_cursor(const std::string& text);

// The visiting order of epoch `epoch`: a permutation of [0, num_samples), the identity when
// shuffle is false. Pure; O(N).
std::vector<int64_t> epoch_permutation(int64_t num_samples, uint64_t seed, int64_t epoch,
                                       bool shuffle);

// The key that seeds one sample's augmentation (random crop offsets, flip) in one epoch: a pure
// function of its arguments, so a sample is augmented the same way whichever thread decodes
// it. Use it as the seed of rng_u64(key, i) draws. Independent of the permutation's draws.
uint64_t augment_key(uint64_t seed, int64_t epoch, int64_t sample_index);

// The draws of each class in a balanced epoch: d[k] for class sizes n[k] (0 for a class
// without samples), summing to sum(n). Pure; see the top of this file.
std::vector<int64_t> balanced_class_draws(const std::vector<int64_t>& class_sizes,
                                          int64_t epoch);

// The visiting order of class-balanced epoch `epoch`: N sample indices (N = labels.size()),
// balanced_class_draws(...)[k] of them of class k, in the order of the epoch's permutation.
// Pure; O(N + the draws' cycles).
std::vector<int64_t> balanced_epoch(const std::vector<int32_t>& labels, uint64_t seed,
                                    int64_t epoch);

class Sampler {
 public:
  // Checks the configuration; every problem is a cutrain::Error saying what to change.
  explicit Sampler(const SamplerConfig& config);
  Sampler(const Sampler&) = delete;  // owns a mutex and a cache; share it by reference
  Sampler& operator=(const Sampler&) = delete;

  const SamplerConfig& config() const { return config_; }
  int64_t batches_per_epoch() const { return batches_; }
  // G_b: the size of global batch b, summed over replicas (B except perhaps the last).
  int64_t global_batch_size(int64_t b) const;

  // This replica's sample indices (into the image list) of global batch b of `epoch`, in
  // permutation order. Thread-safe. 0 <= b < batches_per_epoch(), epoch >= 0.
  std::vector<int64_t> batch(int64_t epoch, int64_t b) const;

  // The augmentation key of batch(epoch, b)[pos], which is `sample`: augment_key(seed, epoch,
  // sample), or in a balanced epoch augment_key(seed, epoch, the draw's position in the
  // epoch), so that the repeats of a sample are augmented differently.
  uint64_t draw_augment_key(int64_t epoch, int64_t b, int64_t pos, int64_t sample) const;

  // The cursor after c: the next batch, or batch 0 of the next epoch after the last one.
  SamplerCursor next(const SamplerCursor& c) const;

 private:
  // The epoch's order: its permutation, or its balanced draws.
  std::shared_ptr<const std::vector<int64_t>> permutation(int64_t epoch) const;
  // This replica's shard of global batch b: positions [*begin, *begin + *size) of the epoch.
  void shard(int64_t b, int64_t* begin, int64_t* size) const;

  SamplerConfig config_;
  int64_t batches_ = 0;
  // The two most recently used epochs' orders; [0] is the most recent.
  mutable std::mutex mu_;
  mutable int64_t cached_epoch_[2] = {-1, -1};
  mutable std::shared_ptr<const std::vector<int64_t>> cached_[2];
};

}  // namespace cutrain
