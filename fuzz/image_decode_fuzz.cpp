// Fuzz target: image files (data/image.h): the format sniffing and structure walks of
// data/image_format.cpp, JPEG through libjpeg-turbo with its EXIF orientation (the TIFF walk
// of jpeg_orientation, then orient_image), WebP through libwebp, PGM/PPM read by hand, PNG,
// GIF, BMP, TGA & co. through stb_image (16-bit, palettes, alpha), the channel conversions
// and alpha compositing, then the loader's per-sample path.
//
// Each input is
//  1. decoded from memory (decode_image) to RGB at full size, and the result checked against
//     the contract: accepted, an image of the size it says with 3 channels; refused, an empty
//     image, a named kind of damage and a message;
//  2. written to a file and loaded as a loader worker loads a sample (load_sample: read, decode
//     to gray at a DCT scale no smaller than the target, resize the shorter side to 20, a
//     random 16x16 crop with 2 pixels of padding, a random flip).
// The pixel cap is 2^20 (a 1024x1024 image): a header claiming more is refused before any
// decoding, as it would be in training with the default cap, only sooner, so that each input
// stays fast. decode_image never throws for a bad file, so a refusal here is a DecodeResult,
// not a cutrain::Error; an Error would be a finding unless the arguments were wrong (they are
// fixed here).
#include <string>
#include <vector>

#include "data/image.h"
#include "fuzz/feed.h"

namespace cutrain_fuzz {

namespace {

constexpr int64_t kMaxPixels = int64_t(1) << 20;

void check_result(const cutrain::DecodeResult& r, const cutrain::Image& img, int channels,
                  const char* what) {
  const std::string w = what;
  if (r.ok()) {
    fuzz_require(img.h >= 1 && img.w >= 1 && img.c == channels, w + ": a decoded image has a size");
    fuzz_require(int64_t(img.h) * img.w <= kMaxPixels, w + ": the pixel cap holds");
    fuzz_require(img.pixels.size() == size_t(img.h) * img.w * img.c,
                 w + ": the pixels fill the image");
    return;
  }
  fuzz_require(!r.message.empty(), w + ": a refusal says why");
  fuzz_require(img.h == 0 && img.w == 0 && img.c == 0 && img.pixels.empty(),
               w + ": a refused image is left empty");
}

}  // namespace

Outcome feed_image_decode(const uint8_t* data, size_t size) {
  cutrain::Image img;
  const cutrain::DecodeResult r = cutrain::decode_image(data, size, 3, 0, kMaxPixels, img);
  check_result(r, img, 3, "decode_image");

  cutrain::ImageSpec spec;
  spec.size = 16;
  spec.resize = 20;
  spec.channels = 1;
  spec.random_crop = true;
  spec.pad = 2;
  spec.random_flip = true;
  spec.max_pixels = kMaxPixels;
  std::vector<uint8_t> out(size_t(spec.size) * spec.size * spec.channels);
  const std::string path = scratch_file("image", data, size);
  const cutrain::DecodeResult s = cutrain::load_sample(path, spec, size, out.data());
  fuzz_require(s.ok() == r.ok() || s.error == cutrain::ImageError::too_large ||
                   r.error == cutrain::ImageError::too_large,
               "load_sample and decode_image agree on the file (" + r.message + " | " +
                   s.message + ")");
  return r.ok() ? Outcome::accepted : Outcome::refused;
}

}  // namespace cutrain_fuzz

CUTRAIN_FUZZ_TARGET(cutrain_fuzz::feed_image_decode)
