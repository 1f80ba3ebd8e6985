#include "data/source.h"

#include "kernels/check.h"

namespace cutrain {

DecodeResult SampleSource::load_cut(int64_t i, uint64_t aug_key, uint8_t* out,
                                    StageTimes& t) const {
  std::vector<uint8_t> uncut(sample_bytes());
  InputCrop window;
  const DecodeResult r = load(i, aug_key, uncut.data(), window, t);
  if (r.ok())
    cut_window(uncut.data(), uncut_side(spec()), spec().channels, spec().size, window, out);
  return r;
}

ListSource::ListSource(ImageList list, ImageSpec spec)
    : list_(std::move(list)), spec_(spec) {
  check_image_spec(spec_);
  USER_CHECK(!list_.samples.empty(), "image list " << list_.source << " has no samples");
}

DecodeResult ListSource::load(int64_t i, uint64_t aug_key, uint8_t* out, InputCrop& window,
                              StageTimes& t) const {
  return load_sample_uncut(list_.samples[size_t(i)].path, spec_, aug_key, out, window, &t);
}

}  // namespace cutrain
