// defines: SampleSource (where the loader's samples come from), StageTimes, and ListSource:
// the samples of an image list, read and decoded from their files every time.
// The other source, PackSource (data/pack.h), reads already decoded pixels from an HDF5 pack.
//
// A source is shared by all the loader's worker threads: load() must be thread-safe. It never
// throws for a bad sample (a missing, truncated or corrupt file): the result says what was
// wrong, and the loader decides whether to skip it or to stop (--strict).
#pragma once
#include <cstdint>
#include <string>

#include "data/image.h"
#include "data/image_list.h"

namespace cutrain {

// A sample that could not be loaded, as the loader, check-data and the packer report it.
struct BadFile {
  int64_t index;        // in the source (the list line for a list)
  std::string name;     // its path
  ImageError kind;
  std::string message;
};

class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual int64_t size() const = 0;
  virtual int32_t label(int64_t i) const = 0;
  virtual std::string name(int64_t i) const = 0;  // for messages: a path, or "pack.h5[17]"
  // The samples' size, channels and augmentation: load() writes the uncut sample
  // (data/image.h), uncut_side(spec())^2 * spec().channels bytes, HWC.
  virtual const ImageSpec& spec() const = 0;
  // Sample i, augmented with aug_key (crop position, flip): uncut into out, and the crop
  // window's place in it into window (load_sample_uncut). Adds the time spent reading,
  // decoding and augmenting to t.
  virtual DecodeResult load(int64_t i, uint64_t aug_key, uint8_t* out, InputCrop& window,
                            StageTimes& t) const = 0;

  size_t sample_bytes() const {
    const size_t side = size_t(uncut_side(spec()));
    return side * side * size_t(spec().channels);
  }

  // Sample i as the model sees it, cut on the host: load(), then cut_window (data/image.h),
  // spec().size^2 * spec().channels bytes into out. For statistics, tools and tests; the
  // loader delivers load()'s uncut form.
  DecodeResult load_cut(int64_t i, uint64_t aug_key, uint8_t* out, StageTimes& t) const;
};

class ListSource : public SampleSource {
 public:
  ListSource(ImageList list, ImageSpec spec);
  int64_t size() const override { return int64_t(list_.samples.size()); }
  int32_t label(int64_t i) const override { return list_.samples[size_t(i)].label; }
  std::string name(int64_t i) const override { return list_.samples[size_t(i)].path; }
  const ImageSpec& spec() const override { return spec_; }
  DecodeResult load(int64_t i, uint64_t aug_key, uint8_t* out, InputCrop& window,
                    StageTimes& t) const override;
  const ImageList& list() const { return list_; }

 private:
  ImageList list_;
  ImageSpec spec_;
};

}  // namespace cutrain
