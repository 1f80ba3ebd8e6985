#include "data/source.h"

#include "kernels/check.h"

namespace cutrain {

ListSource::ListSource(ImageList list, ImageSpec spec)
    : list_(std::move(list)), spec_(spec) {
  check_image_spec(spec_);
  USER_CHECK(!list_.samples.empty(), "image list " << list_.source << " has no samples");
}

DecodeResult ListSource::load(int64_t i, uint64_t aug_key, uint8_t* out, StageTimes& t) const {
  return load_sample(list_.samples[size_t(i)].path, spec_, aug_key, out, &t);
}

}  // namespace cutrain
