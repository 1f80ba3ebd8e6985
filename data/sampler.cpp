#include "data/sampler.h"

#include <algorithm>
#include <charconv>
#include <numeric>

#include "kernels/check.h"
#include "kernels/rng.h"

namespace cutrain {

namespace {

// Seeds derived from the user's seed, one per purpose, so the permutation's draws and the
// augmentation's draws are unrelated even where their counters coincide, and neither repeats
// what other code draws from rng_u64(seed, ...) (weight init, dropout).
// The constants spell "permute!", "augment!" and "balance!" in ASCII.
uint64_t permutation_seed(uint64_t seed) { return mix64(seed ^ 0x7065726d75746521ull); }
uint64_t augment_seed(uint64_t seed) { return mix64(seed ^ 0x6175676d656e7421ull); }
uint64_t balance_seed(uint64_t seed) { return mix64(seed ^ 0x62616c616e636521ull); }

// An integer in [0, n) from 64 random bits: the high word of r * n (Lemire). Its bias is at
// most n / 2^64, far below anything a training run could notice, and it needs no loop.
uint64_t below(uint64_t r, uint64_t n) {
  return uint64_t((static_cast<unsigned __int128>(r) * n) >> 64);
}

// Reads "<name>=<non-negative integer>" at text[*pos], advancing *pos. False when it is not.
bool read_field(const std::string& text, size_t* pos, const char* name, int64_t* value) {
  const std::string prefix = std::string(name) + "=";
  if (text.compare(*pos, prefix.size(), prefix) != 0) return false;
  const char* begin = text.data() + *pos + prefix.size();
  const char* end = text.data() + text.size();
  if (begin == end || *begin < '0' || *begin > '9') return false;  // no sign, no space
  const auto r = std::from_chars(begin, end, *value);
  if (r.ec != std::errc()) return false;
  *pos = size_t(r.ptr - text.data());
  return true;
}

}  // namespace

std::vector<int64_t> epoch_permutation(int64_t num_samples, uint64_t seed, int64_t epoch,
                                       bool shuffle) {
  CHECK(num_samples >= 0, "epoch_permutation: negative sample count " << num_samples);
  CHECK(epoch >= 0, "epoch_permutation: negative epoch " << epoch);
  std::vector<int64_t> perm(static_cast<size_t>(num_samples));
  std::iota(perm.begin(), perm.end(), int64_t(0));
  if (!shuffle) return perm;
  // Fisher-Yates from the back: position i swaps with a uniform j in [0, i], drawn at the key
  // (seed, epoch, i). Each of the N! orders is equally likely (up to the bias of below()).
  const uint64_t s = permutation_seed(seed);
  for (int64_t i = num_samples - 1; i > 0; i--) {
    const uint64_t j = below(rng_u64(s, uint64_t(epoch), uint64_t(i)), uint64_t(i) + 1);
    std::swap(perm[size_t(i)], perm[j]);
  }
  return perm;
}

uint64_t augment_key(uint64_t seed, int64_t epoch, int64_t sample_index) {
  return rng_u64(augment_seed(seed), uint64_t(epoch), uint64_t(sample_index));
}

std::vector<int64_t> balanced_class_draws(const std::vector<int64_t>& class_sizes,
                                          int64_t epoch) {
  CHECK(epoch >= 0, "balanced_class_draws: negative epoch " << epoch);
  int64_t N = 0, K = 0;
  for (int64_t n : class_sizes) {
    CHECK(n >= 0, "balanced_class_draws: negative class size " << n);
    N += n;
    K += n > 0;
  }
  std::vector<int64_t> d(class_sizes.size(), 0);
  if (K == 0) return d;
  const int64_t q = N / K, r = N % K;
  // The j-th class with samples takes one of the r extra draws when (j - e) mod K < r: the
  // extras move on by one class each epoch, so over K epochs every class gets r of them.
  for (size_t k = 0, j = 0; k < class_sizes.size(); k++) {
    if (class_sizes[k] == 0) continue;
    const int64_t turn = ((int64_t(j) - epoch % K) % K + K) % K;
    d[k] = q + (turn < r ? 1 : 0);
    j++;
  }
  return d;
}

std::vector<int64_t> balanced_epoch(const std::vector<int32_t>& labels, uint64_t seed,
                                    int64_t epoch) {
  CHECK(!labels.empty(), "balanced_epoch: no samples");
  CHECK(epoch >= 0, "balanced_epoch: negative epoch " << epoch);
  std::vector<std::vector<int64_t>> members;  // class k's sample indices, in list order
  for (size_t i = 0; i < labels.size(); i++) {
    const int32_t k = labels[i];
    CHECK(k >= 0, "balanced_epoch: sample " << i << " has the negative label " << k);
    if (size_t(k) >= members.size()) members.resize(size_t(k) + 1);
    members[size_t(k)].push_back(int64_t(i));
  }
  std::vector<int64_t> sizes;
  for (const auto& m : members) sizes.push_back(int64_t(m.size()));
  const std::vector<int64_t> d = balanced_class_draws(sizes, epoch);
  // Class by class: d_k draws from cycles through permutations of the class's members.
  std::vector<int64_t> draws;
  draws.reserve(labels.size());
  for (size_t k = 0; k < members.size(); k++) {
    const int64_t n = sizes[k];
    const uint64_t class_key = rng_u64(balance_seed(seed), uint64_t(epoch), uint64_t(k));
    for (int64_t c = 0, taken = 0; taken < d[k]; c++) {
      const std::vector<int64_t> perm = epoch_permutation(n, class_key, c, true);
      for (int64_t i = 0; i < n && taken < d[k]; i++, taken++)
        draws.push_back(members[k][size_t(perm[size_t(i)])]);
    }
  }
  CHECK(draws.size() == labels.size(), "balanced_epoch: " << draws.size() << " draws for "
                                                          << labels.size() << " samples");
  // ... then mixed: the epoch's order is the draws in the order of the epoch's permutation.
  const std::vector<int64_t> perm = epoch_permutation(int64_t(labels.size()), seed, epoch, true);
  std::vector<int64_t> order(labels.size());
  for (size_t i = 0; i < order.size(); i++) order[i] = draws[size_t(perm[i])];
  return order;
}

std::string cursor_to_string(const SamplerCursor& c) {
  return "epoch=" + std::to_string(c.epoch) + " batch=" + std::to_string(c.batch);
}

SamplerCursor parse_cursor(const std::string& text) {
  SamplerCursor c;
  size_t pos = 0;
  const bool ok = read_field(text, &pos, "epoch", &c.epoch) && pos < text.size() &&
                  text[pos++] == ' ' && read_field(text, &pos, "batch", &c.batch) &&
                  pos == text.size();
  CHECK(ok, "sampler cursor '" << text << "' is not of the form 'epoch=E batch=B'");
  return c;
}

Sampler::Sampler(const SamplerConfig& c) : config_(c) {
  const int64_t N = c.num_samples, B = c.batch_size;
  CHECK(N > 0, "sampler: no samples (N = " << N << ")");
  CHECK(B > 0, "sampler: batch size must be positive, got " << B);
  CHECK(c.replicas >= 1, "sampler: replicas must be at least 1, got " << c.replicas);
  CHECK(c.rank >= 0 && c.rank < c.replicas,
        "sampler: rank " << c.rank << " is outside [0, " << c.replicas << ")");
  CHECK(B >= c.replicas, "sampler: global batch size " << B << " is smaller than the "
        << c.replicas << " replicas; every replica needs at least one sample per batch");
  CHECK(c.last_batch != LastBatch::drop || B <= N,
        "sampler: batch size " << B << " is larger than the " << N << " samples, so dropping "
        << "the last partial batch would leave no batch at all (use a smaller batch or "
        << "LastBatch::partial)");
  CHECK(c.labels.empty() || int64_t(c.labels.size()) == N,
        "sampler: " << c.labels.size() << " labels for " << N << " samples");
  CHECK(c.labels.empty() || c.shuffle, "sampler: class-balanced epochs need shuffle");
  batches_ = c.last_batch == LastBatch::drop ? N / B : (N + B - 1) / B;
}

int64_t Sampler::global_batch_size(int64_t b) const {
  CHECK(b >= 0 && b < batches_,
        "sampler: batch " << b << " is outside [0, " << batches_ << ") of an epoch");
  return std::min(config_.batch_size, config_.num_samples - b * config_.batch_size);
}

std::shared_ptr<const std::vector<int64_t>> Sampler::permutation(int64_t epoch) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cached_epoch_[0] == epoch) return cached_[0];
    if (cached_epoch_[1] == epoch) {
      std::swap(cached_epoch_[0], cached_epoch_[1]);
      std::swap(cached_[0], cached_[1]);
      return cached_[0];
    }
  }
  // Computed outside the lock, so threads asking for a cached epoch never wait for it. Two
  // threads may both compute a new epoch; the results are equal, one is kept.
  auto p = std::make_shared<const std::vector<int64_t>>(
      config_.labels.empty()
          ? epoch_permutation(config_.num_samples, config_.seed, epoch, config_.shuffle)
          : balanced_epoch(config_.labels, config_.seed, epoch));
  std::lock_guard<std::mutex> lock(mu_);
  if (cached_epoch_[0] == epoch) return cached_[0];
  cached_epoch_[1] = cached_epoch_[0];
  cached_[1] = std::move(cached_[0]);
  cached_epoch_[0] = epoch;
  cached_[0] = p;
  return p;
}

void Sampler::shard(int64_t b, int64_t* begin, int64_t* size) const {
  const int64_t G = global_batch_size(b);
  const int64_t R = config_.replicas, r = config_.rank;
  // Shard r of G = q*R + m: the first m replicas take q+1 samples, the others q.
  const int64_t q = G / R, m = G % R;
  *begin = b * config_.batch_size + r * q + std::min(r, m);
  *size = q + (r < m ? 1 : 0);
}

std::vector<int64_t> Sampler::batch(int64_t epoch, int64_t b) const {
  CHECK(epoch >= 0, "sampler: negative epoch " << epoch);
  int64_t begin = 0, size = 0;
  shard(b, &begin, &size);
  const auto perm = permutation(epoch);
  return std::vector<int64_t>(perm->begin() + begin, perm->begin() + begin + size);
}

uint64_t Sampler::draw_augment_key(int64_t epoch, int64_t b, int64_t pos, int64_t sample) const {
  if (config_.labels.empty()) return augment_key(config_.seed, epoch, sample);
  int64_t begin = 0, size = 0;
  shard(b, &begin, &size);
  CHECK(pos >= 0 && pos < size,
        "sampler: position " << pos << " is outside the shard of " << size << " samples");
  return augment_key(config_.seed, epoch, begin + pos);
}

SamplerCursor Sampler::next(const SamplerCursor& c) const {
  CHECK(c.epoch >= 0 && c.batch >= 0 && c.batch < batches_,
        "sampler: cursor " << cursor_to_string(c) << " is outside an epoch of " << batches_
                           << " batches");
  if (c.batch + 1 < batches_) return {c.epoch, c.batch + 1};
  return {c.epoch + 1, 0};
}

SamplerConfig in_order(int64_t num_samples, int64_t batch_size) {
  SamplerConfig c;
  c.num_samples = num_samples;
  c.batch_size = batch_size;
  c.shuffle = false;
  c.last_batch = LastBatch::partial;
  return c;
}

}  // namespace cutrain
