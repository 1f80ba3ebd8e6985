// defines: what the model_input tests (batch_input_test.cpp, batch_input_gpu_test.cpp) share:
// input_spec(), an ImageSpec in one line; for_each_batch(), two epochs of a source through
// the loader, on the host or copied to the device, each batch handed to a check; and the
// normalisations they use.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>

#include "data/loader.h"
#include "nn/context.h"
#include "train/engine/batch_input.h"

namespace cutrain_test {

inline const cutrain::Normalization kRgbNorm{{0.485, 0.456, 0.406}, {0.229, 0.224, 0.225}};
inline const cutrain::Normalization kGrayNorm{{0.3}, {0.25}};
inline const cutrain::Normalization kFashionNorm{{0.286}, {0.353}};

// size x size x channels from the shorter side `resize` (0: size); with `augment`, random
// crops with `pad` pixels of zeros around and random flips, else the centred window.
inline cutrain::ImageSpec input_spec(int size, int channels, int resize, bool augment,
                                     int pad) {
  cutrain::ImageSpec s;
  s.size = size, s.channels = channels, s.resize = resize;
  s.random_crop = s.random_flip = augment;
  s.pad = pad;
  return s;
}

constexpr uint64_t kBatchSeed = 29;  // for_each_batch's: augment_key(kBatchSeed, epoch, i)

// Two epochs of `src` in batches of 16 (a short last one), seed kBatchSeed, 2 threads; in a
// GPU context `in`, copied to the current device and waited for on in's stream. Each batch goes
// to `check`, then back to the loader. Returns the images seen.
inline int64_t for_each_batch(const std::shared_ptr<const cutrain::SampleSource>& src,
                              const cutrain::Context& in,
                              const std::function<void(const cutrain::Batch&)>& check) {
  const bool gpu = in.device == cutrain::Device::cuda;
  cutrain::SamplerConfig sc;
  sc.num_samples = src->size(), sc.batch_size = 16, sc.seed = kBatchSeed;
  sc.last_batch = cutrain::LastBatch::partial;
  cutrain::LoaderConfig lc;
  lc.threads = 2, lc.print_bad = 0;
  if (gpu) lc.gpu = cutrain::current_device();
  const cudaStream_t stream = in.stream;
  cutrain::Loader loader(src, sc, lc);
  int64_t images = 0;
  for (int64_t b = 0; b < 2 * loader.sampler().batches_per_epoch(); b++) {
    const cutrain::Batch batch = loader.next(stream);  // on a GPU: the stream waits for the copy
    check(batch);
    images += batch.n;
    loader.release(batch, stream);  // refilled after the work queued on the stream
  }
  return images;
}

}  // namespace cutrain_test
