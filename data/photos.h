// defines: make_photo(), a synthetic photo-like RGB image that is a pure function of (seed,
// split, index), and write_photo_set(), a folder of them as JPEG files in data/image_set.h's
// layout: the decode-heavy workload of the benchmarks. Decoding weighs in a training step only
// when the images are large and full of detail, which Fashion-MNIST's 28x28 never are.
//
// One image (photo_shape draws its size, quality and label without drawing its pixels):
//   sides      height and width each drawn in [min_side, max_side], so the aspect ratio varies
//              (up to 3:2 for 400..600)
//   quality    JPEG quality drawn in [min_quality, max_quality]
//   label      drawn uniformly from the classes
//   content    what a photo has: a smooth background between two colours; a grating whose
//              angle is the class's (label k of K: k x 90/K degrees, so that a left-right flip
//              maps no class onto another) at a drawn frequency, phase and strength (what a
//              model can learn); 6 to 14 soft-edged ellipses and boxes in colours of their own
//              over it; and grain, noise of +-14 on every sample, the fine detail that makes a
//              decoder do its entropy decoding in earnest
// At these qualities the files average 2 to 4 bits per pixel; write_photo_set measures the
// set's mean and refuses one below min_bits_per_pixel (1.5).
//
//   PhotoSetSpec spec;                   // 5,000 + 1,000 images, 10 classes, 400..600 px
//   PhotoSetSummary s = write_photo_set("data-cache/photos", spec);
//   std::printf("%.2f bits per pixel\n", s.bits_per_pixel);
#pragma once
#include <cstdint>
#include <string>

#include "data/image.h"
#include "data/image_set.h"

namespace cutrain {

struct PhotoSetSpec {
  int64_t train = 5000, test = 1000;  // images of each split
  int classes = 10;
  int min_side = 400, max_side = 600;
  int min_quality = 75, max_quality = 95;
  uint64_t seed = 1;
  double min_bits_per_pixel = 1.5;  // write_photo_set refuses a set whose mean is below
};

// What image `index` of split `split` (0 train, 1 test) will be, without its pixels.
struct PhotoShape {
  int h = 0, w = 0, quality = 0, label = 0;
};
PhotoShape photo_shape(const PhotoSetSpec& spec, int split, int64_t index);

// Its pixels, (h, w, 3) uint8.
Image make_photo(const PhotoSetSpec& spec, int split, int64_t index);

// The spec, as write_photo_set records it in recipe.txt (a set is kept only when it matches).
std::string photo_recipe(const PhotoSetSpec& spec);

struct PhotoSetSummary {
  ImageSetSummary files;
  int64_t images = 0;         // in both splits
  int64_t pixels = 0;         // their sum of h x w
  int64_t bytes = 0;          // of JPEG, read off the files (a reused set too)
  double bits_per_pixel = 0;  // 8 x bytes / pixels
};

// Checks the spec (a user error names the bad setting), writes the set (or keeps a complete one,
// data/image_set.h) and measures its bits per pixel; a set below spec.min_bits_per_pixel is a
// user error that says so.
PhotoSetSummary write_photo_set(const std::string& out_dir, const PhotoSetSpec& spec,
                                const ImageSetOptions& opt = {});

}  // namespace cutrain
