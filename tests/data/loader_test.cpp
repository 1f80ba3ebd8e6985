// The loader with real threads: exactly-once coverage, the same bytes whatever the thread
// count, a ring that never hands out a slot being rewritten, errors reaching the caller, and
// clean shutdown. The source here makes its bytes and its crop window from (index,
// augmentation key), so every byte and window of every batch can be checked;
// tests/data/loader_files_test.cpp runs real JPEG files.
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "data/loader.h"
#include "kernels/rng.h"
#include "tests/test_util.h"

using namespace cutrain;

namespace {
// Sample i is an uncut (S+2) x (S+2) x C image (a random crop with pad 1) whose bytes and
// window depend on i and its augmentation key; label i % 10. Optionally slow (a decode that
// takes time) and failing (a bad file at chosen indices).
class PatternSource : public SampleSource {
 public:
  PatternSource(int64_t n, int size, std::set<int64_t> bad = {}, int work_us = 0)
      : n_(n), bad_(std::move(bad)), work_us_(work_us) {
    spec_.size = size;
    spec_.channels = 3;
    spec_.random_crop = true;
    spec_.pad = 1;
  }
  int64_t size() const override { return n_; }
  int32_t label(int64_t i) const override { return int32_t(i % 10); }
  std::string name(int64_t i) const override { return "pattern[" + std::to_string(i) + "]"; }
  const ImageSpec& spec() const override { return spec_; }
  DecodeResult load(int64_t i, uint64_t key, uint8_t* out, InputCrop& window,
                    StageTimes&) const override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      loads_[i]++;
    }
    if (work_us_) std::this_thread::sleep_for(std::chrono::microseconds(work_us_));
    if (bad_.count(i)) {
      DecodeResult r;
      r.error = ImageError::corrupt;
      r.message = "made bad by the test";
      return r;
    }
    fill(i, key, out, sample_bytes());
    window = window_of(i, key);
    return DecodeResult();
  }
  // Anywhere in the (S+2)^2 image: top and left in [0, 2], flipped or not.
  static InputCrop window_of(int64_t i, uint64_t key) {
    const uint64_t r = rng_u64(key ^ uint64_t(i), 1u << 30);
    return InputCrop{int32_t(r % 3), int32_t((r >> 8) % 3), int32_t((r >> 16) & 1)};
  }
  static void fill(int64_t i, uint64_t key, uint8_t* out, size_t bytes) {
    for (size_t j = 0; j < bytes; j++) out[j] = uint8_t(rng_u64(key ^ uint64_t(i), j));
  }
  int loads_of(int64_t i) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = loads_.find(i);
    return it == loads_.end() ? 0 : it->second;
  }

 private:
  mutable std::mutex mu_;
  mutable std::map<int64_t, int> loads_;
  int64_t n_;
  ImageSpec spec_;
  std::set<int64_t> bad_;
  int work_us_;
};

SamplerConfig sampler_config(int64_t n, int64_t batch, int replicas = 1, int rank = 0) {
  SamplerConfig c;
  c.num_samples = n;
  c.batch_size = batch;
  c.seed = 42;
  c.replicas = replicas;
  c.rank = rank;
  c.last_batch = LastBatch::partial;
  return c;
}

LoaderConfig loader_config(int threads, int ring = 4) {
  LoaderConfig c;
  c.threads = threads;
  c.ring = ring;
  c.print_bad = 0;
  return c;
}

// Every byte, window and label of a batch equals what the source makes for those samples.
void require_batch_matches(const Batch& b, const PatternSource& src, uint64_t seed) {
  REQUIRE(b.size == src.spec().size);
  REQUIRE(b.side == src.spec().size + 2);  // uncut: the window and its margin of 1
  REQUIRE(b.channels == 3);
  std::vector<uint8_t> want(src.sample_bytes());
  REQUIRE(want.size() == size_t(b.side) * size_t(b.side) * 3);
  for (int k = 0; k < b.n; k++) {
    const int64_t i = b.indices[k];
    const uint64_t key = augment_key(seed, b.where.epoch, i);
    PatternSource::fill(i, key, want.data(), want.size());
    REQUIRE(std::memcmp(b.images + size_t(k) * want.size(), want.data(), want.size()) == 0);
    const InputCrop w = PatternSource::window_of(i, key);
    REQUIRE(b.crops[k].top == w.top);
    REQUIRE(b.crops[k].left == w.left);
    REQUIRE(b.crops[k].flip == w.flip);
    REQUIRE(b.labels[k] == src.label(i));
  }
}

uint64_t batch_hash(const Batch& b, size_t sample_bytes) {
  uint64_t h = 1469598103934665603ull;
  auto add = [&](const void* p, size_t n) {
    const uint8_t* c = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
  };
  add(b.images, size_t(b.n) * sample_bytes);
  add(b.crops, size_t(b.n) * sizeof(InputCrop));
  add(b.labels, size_t(b.n) * 4);
  add(b.indices, size_t(b.n) * 8);
  return h;
}
}  // namespace

TEST_CASE("loader: every sample exactly once per epoch, with 1, 4 and 16 threads") {
  auto src = std::make_shared<PatternSource>(1003, 4);  // 1003 = 15 * 64 + 43: a partial batch
  for (int threads : {1, 4, 16}) {
    Loader loader(src, sampler_config(1003, 64), loader_config(threads));
    REQUIRE(loader.sampler().batches_per_epoch() == 16);
    for (int epoch = 0; epoch < 2; epoch++) {
      std::map<int64_t, int> seen;
      for (int b = 0; b < 16; b++) {
        Batch batch = loader.next();
        REQUIRE(batch.where.epoch == epoch);
        REQUIRE(batch.n == (b < 15 ? 64 : 43));
        require_batch_matches(batch, *src, 42);
        for (int k = 0; k < batch.n; k++) seen[batch.indices[k]]++;
        loader.release(batch);
      }
      REQUIRE(seen.size() == 1003);
      for (auto& kv : seen) REQUIRE(kv.second == 1);
    }
  }
}

TEST_CASE("loader: three replicas together cover an epoch exactly once") {
  auto src = std::make_shared<PatternSource>(500, 4);
  std::map<int64_t, int> seen;
  for (int rank = 0; rank < 3; rank++) {
    Loader loader(src, sampler_config(500, 48, 3, rank), loader_config(4));
    for (int64_t b = 0; b < loader.sampler().batches_per_epoch(); b++) {
      Batch batch = loader.next();
      REQUIRE((batch.n == 16 || b == loader.sampler().batches_per_epoch() - 1));
      for (int k = 0; k < batch.n; k++) seen[batch.indices[k]]++;
      loader.release(batch);
    }
  }
  REQUIRE(seen.size() == 500);
  for (auto& kv : seen) REQUIRE(kv.second == 1);
}

TEST_CASE("loader: a balanced epoch augments each draw of a repeated sample differently") {
  // Class 0 has 2 samples, class 1 has 38: a balanced epoch of 40 draws takes 20 of each,
  // so each sample of class 0 is drawn 10 times, and each draw must look different.
  class TwoClasses : public PatternSource {
   public:
    TwoClasses() : PatternSource(40, 3) {}
    int32_t label(int64_t i) const override { return i < 2 ? 0 : 1; }
  };
  auto src = std::make_shared<TwoClasses>();
  SamplerConfig sc = sampler_config(40, 8);
  for (int64_t i = 0; i < 40; i++) sc.labels.push_back(src->label(i));
  sc.last_batch = LastBatch::drop;
  Loader loader(src, sc, loader_config(4));
  std::vector<uint8_t> want(src->sample_bytes());
  std::set<std::vector<uint8_t>> class0_images;
  int class0_draws = 0;
  for (int b = 0; b < 5; b++) {  // one epoch
    Batch batch = loader.next();
    for (int k = 0; k < batch.n; k++) {
      const int64_t i = batch.indices[k];
      // Every byte as the source makes it with the draw's own key.
      PatternSource::fill(i, loader.sampler().draw_augment_key(0, b, k, i), want.data(),
                          want.size());
      REQUIRE(std::memcmp(batch.images + size_t(k) * want.size(), want.data(), want.size()) == 0);
      if (batch.labels[k] == 0) {
        class0_draws++;
        class0_images.insert(want);
      }
    }
    loader.release(batch);
  }
  REQUIRE(class0_draws == 20);           // 2 samples, 10 draws each
  REQUIRE(class0_images.size() == 20);   // 20 different augmentations of them
}

TEST_CASE("loader: the same batches, byte for byte, with 1, 4 and 16 threads") {
  auto src = std::make_shared<PatternSource>(300, 6);
  std::vector<std::vector<uint64_t>> runs;
  for (int threads : {1, 4, 16}) {
    Loader loader(src, sampler_config(300, 32), loader_config(threads, 3));
    std::vector<uint64_t> hashes;
    for (int b = 0; b < 30; b++) {  // three epochs of 10 batches
      Batch batch = loader.next();
      hashes.push_back(batch_hash(batch, src->sample_bytes()));
      loader.release(batch);
    }
    runs.push_back(hashes);
  }
  REQUIRE(runs[0] == runs[1]);
  REQUIRE(runs[0] == runs[2]);
  // and a different seed gives different batches
  SamplerConfig other = sampler_config(300, 32);
  other.seed = 43;
  Loader loader(src, other, loader_config(4));
  Batch batch = loader.next();
  REQUIRE(batch_hash(batch, src->sample_bytes()) != runs[0][0]);
  loader.release(batch);
}

TEST_CASE("loader: a slow consumer never sees its batch rewritten (ring of 1, 2 and 3)") {
  // The consumer reads a batch, waits, and reads it again: a worker that refilled the slot
  // before release() would change the bytes in between. Thousands of batches in all.
  auto src = std::make_shared<PatternSource>(97, 3);
  for (int ring : {1, 2, 3}) {
    Loader loader(src, sampler_config(97, 8), loader_config(4, ring));
    for (int b = 0; b < 1200; b++) {
      Batch batch = loader.next();
      const uint64_t before = batch_hash(batch, src->sample_bytes());
      if (b % 8 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
      std::this_thread::yield();
      require_batch_matches(batch, *src, 42);
      REQUIRE(batch_hash(batch, src->sample_bytes()) == before);
      loader.release(batch);
    }
  }
}

TEST_CASE("loader: bad samples are skipped, counted once, and skipped again next epoch") {
  auto src = std::make_shared<PatternSource>(40, 2, std::set<int64_t>{3, 17, 39});
  Loader loader(src, sampler_config(40, 10), loader_config(4));
  for (int epoch = 0; epoch < 3; epoch++) {
    int total = 0;
    for (int b = 0; b < 4; b++) {
      Batch batch = loader.next();
      for (int k = 0; k < batch.n; k++) REQUIRE((batch.indices[k] != 3 && batch.indices[k] != 17 &&
                                                 batch.indices[k] != 39));
      require_batch_matches(batch, *src, 42);
      total += batch.n;
      loader.release(batch);
    }
    REQUIRE(total == 37);
  }
  const std::vector<BadFile> bad = loader.bad_files();
  REQUIRE(bad.size() == 3);
  REQUIRE(loader.stats().bad_files == 3);
  // each bad file was tried once, not once an epoch; the good ones once an epoch (or more:
  // the ring may have prefetched part of the next epoch)
  for (int64_t i : {3, 17, 39}) REQUIRE(src->loads_of(i) == 1);
  REQUIRE(src->loads_of(0) >= 3);
}

TEST_CASE("loader: strict mode and worker errors stop the run with the reason") {
  auto src = std::make_shared<PatternSource>(40, 2, std::set<int64_t>{5});
  LoaderConfig strict = loader_config(2);
  strict.strict = true;
  Loader loader(src, sampler_config(40, 40), strict);  // one batch holds sample 5
  REQUIRE_ERROR(loader.next(), "bad file (corrupt): pattern[5]");
}

TEST_CASE("loader: a crop window outside its image is an error, found before the batch goes") {
  // The GPU's input kernel reads the windows without checking them (kernels/input.h): the
  // loader checks each one on the host as it is loaded (input_check_crops).
  struct OffTheEdge : PatternSource {
    OffTheEdge() : PatternSource(40, 4) {}
    DecodeResult load(int64_t i, uint64_t key, uint8_t* out, InputCrop& window,
                      StageTimes& t) const override {
      const DecodeResult r = PatternSource::load(i, key, out, window, t);
      if (i == 11) window.left = 3;  // 3 + 4 > the uncut side, 6
      return r;
    }
  };
  Loader loader(std::make_shared<OffTheEdge>(), sampler_config(40, 40), loader_config(2));
  REQUIRE_ERROR(loader.next(), "does not lie inside the 6x6 image");
}

TEST_CASE("loader: destroying it mid-epoch with busy workers returns promptly") {
  auto src = std::make_shared<PatternSource>(10000, 8, std::set<int64_t>{}, 200);
  const auto t0 = std::chrono::steady_clock::now();
  {
    Loader loader(src, sampler_config(10000, 256), loader_config(8, 4));
    Batch b = loader.next();
    REQUIRE(b.n == 256);
    // no release: the destructor must not wait for anything the consumer holds
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(s < 5.0);
}

TEST_CASE("loader: the cursor names the next batch, and a loader started there continues") {
  auto src = std::make_shared<PatternSource>(100, 2);
  std::vector<uint64_t> straight;
  SamplerCursor mid;
  {
    Loader loader(src, sampler_config(100, 16), loader_config(3));
    for (int b = 0; b < 12; b++) {
      if (b == 5) mid = loader.cursor();
      Batch batch = loader.next();
      straight.push_back(batch_hash(batch, src->sample_bytes()));
      loader.release(batch);
    }
  }
  REQUIRE(mid == SamplerCursor{0, 5});
  Loader resumed(src, sampler_config(100, 16), loader_config(2), mid);
  for (int b = 5; b < 12; b++) {
    Batch batch = resumed.next();
    REQUIRE(batch_hash(batch, src->sample_bytes()) == straight[size_t(b)]);
    resumed.release(batch);
  }
}

TEST_CASE("loader: bad configurations are refused") {
  auto src = std::make_shared<PatternSource>(100, 2);
  REQUIRE_ERROR(Loader(src, sampler_config(99, 16), loader_config(2)),
                "the sampler is for 99 samples but the source has 100");
  REQUIRE_ERROR(Loader(src, sampler_config(100, 16), loader_config(2, 0)), "at least 1 slot");
  LoaderConfig gpu = loader_config(2);
  gpu.gpu = 0;
  if (!gpu_usable()) REQUIRE_ERROR(Loader(src, sampler_config(100, 16), gpu), "cannot copy batches");
}

TEST_CASE("loader [gpu]: batches reach the device on the copy stream, ordered by events") {
  REQUIRE_GPU();
  auto src = std::make_shared<PatternSource>(300, 8);
  LoaderConfig cfg = loader_config(4, 3);
  cfg.gpu = 0;
  Stream compute;
  Loader loader(src, sampler_config(300, 32), cfg);
  std::vector<uint8_t> images;
  std::vector<InputCrop> crops;
  std::vector<int32_t> labels;
  for (int b = 0; b < 40; b++) {
    Batch batch = loader.next(compute.get());
    images.assign(size_t(batch.n) * src->sample_bytes(), 0);
    crops.assign(size_t(batch.n), InputCrop{-1, -1, -1});
    labels.assign(size_t(batch.n), -1);
    // queued on the compute stream, after the wait next() put there: no host sync needed
    copy_async(images.data(), batch.d_images, images.size(), compute.get());
    copy_async(crops.data(), batch.d_crops, crops.size() * sizeof(InputCrop), compute.get());
    copy_async(labels.data(), batch.d_labels, labels.size() * 4, compute.get());
    compute.synchronize();
    Batch view = batch;  // the device's copies, checked as the host's are
    view.images = images.data();
    view.crops = crops.data();
    view.labels = labels.data();
    require_batch_matches(view, *src, 42);
    loader.release(batch, compute.get());  // refilled after the work queued on compute
  }
  REQUIRE(loader.stats().copy_ms > 0);
}
