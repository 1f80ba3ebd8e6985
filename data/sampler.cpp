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
// The constants spell "permute!" and "augment!" in ASCII.
uint64_t permutation_seed(uint64_t seed) { return mix64(seed ^ 0x7065726d75746521ull); }
uint64_t augment_seed(uint64_t seed) { return mix64(seed ^ 0x6175676d656e7421ull); }

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
      epoch_permutation(config_.num_samples, config_.seed, epoch, config_.shuffle));
  std::lock_guard<std::mutex> lock(mu_);
  if (cached_epoch_[0] == epoch) return cached_[0];
  cached_epoch_[1] = cached_epoch_[0];
  cached_[1] = std::move(cached_[0]);
  cached_epoch_[0] = epoch;
  cached_[0] = p;
  return p;
}

std::vector<int64_t> Sampler::batch(int64_t epoch, int64_t b) const {
  CHECK(epoch >= 0, "sampler: negative epoch " << epoch);
  const int64_t G = global_batch_size(b);
  const int64_t R = config_.replicas, r = config_.rank;
  // Shard r of G = q*R + m: the first m replicas take q+1 samples, the others q.
  const int64_t q = G / R, m = G % R;
  const int64_t begin = b * config_.batch_size + r * q + std::min(r, m);
  const int64_t size = q + (r < m ? 1 : 0);
  const auto perm = permutation(epoch);
  return std::vector<int64_t>(perm->begin() + begin, perm->begin() + begin + size);
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
