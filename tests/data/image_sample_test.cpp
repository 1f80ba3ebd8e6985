// load_sample and augment_square: the one-call path of a loader worker equals the same steps
// done by hand; the same key gives the same bytes; a pack entry gets the same crop and flip as
// the JPEG it came from.
#include <set>

#include "data/image.h"
#include "kernels/rng.h"
#include "tests/data/test_images.h"
#include "tests/test_util.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {

ImageSpec spec_of(int size, int channels, int resize, bool crop, bool flip) {
  ImageSpec s;
  s.size = size, s.channels = channels, s.resize = resize;
  s.random_crop = crop, s.random_flip = flip;
  return s;
}

std::vector<uint8_t> sample(const std::string& path, const ImageSpec& spec, uint64_t key) {
  std::vector<uint8_t> out(size_t(spec.size) * spec.size * spec.channels, 0xEE);
  const DecodeResult r = load_sample(path, spec, key, out.data());
  INFO(r.message);
  REQUIRE(r.ok());
  return out;
}

// Mirror each row of a size x size x c image.
std::vector<uint8_t> mirrored(const std::vector<uint8_t>& img, int size, int c) {
  std::vector<uint8_t> out(img.size());
  for (int y = 0; y < size; y++)
    for (int x = 0; x < size; x++)
      for (int k = 0; k < c; k++)
        out[(size_t(y) * size + x) * c + k] = img[(size_t(y) * size + size - 1 - x) * c + k];
  return out;
}

}  // namespace

TEST_CASE("load_sample: decode (DCT-scaled), resize, centre crop, equal to the steps by hand") {
  TempDir dir;
  const Image src = pattern_image(384, 512, 3);
  write_bytes(dir.file("big.jpg"), encode_jpeg(src.pixels.data(), 384, 512, 3));
  for (int channels : {1, 3}) {
    const ImageSpec spec = spec_of(28, channels, 32, false, false);
    // by hand: decode at 1/8 (48x64: the smallest scale with shorter side >= 32), shorter side
    // to 32 (32x43), the centred 28x28 window at ((32-28)/2, (43-28)/2) = (2, 7)
    Image img, small;
    REQUIRE(load_image_file(dir.file("big.jpg"), channels, 32, spec.max_pixels, img).ok());
    REQUIRE((img.h == 48 && img.w == 64));
    resize_shorter_side(img, 32, small);
    REQUIRE((small.h == 32 && small.w == 43));
    std::vector<uint8_t> want(28 * 28 * size_t(channels));
    crop_flip(small, 28, 2, 7, false, want.data());
    REQUIRE(sample(dir.file("big.jpg"), spec, 5) == want);
  }
}

TEST_CASE("load_sample: the same key gives the same bytes; keys move the crop and the flip") {
  TempDir dir;
  const Image src = pattern_image(60, 80, 3);
  write_bytes(dir.file("a.png"), png_bytes(src));
  const ImageSpec spec = spec_of(24, 3, 40, true, true);
  std::set<std::vector<uint8_t>> distinct;
  for (uint64_t key = 0; key < 30; key++) {
    const std::vector<uint8_t> a = sample(dir.file("a.png"), spec, key);
    REQUIRE(sample(dir.file("a.png"), spec, key) == a);
    distinct.insert(a);
  }
  REQUIRE(distinct.size() > 20);  // 17 x 30 positions x 2 flips: repeats are rare

  // The flip is a mirror of the unflipped crop at the same position (the position depends on
  // rng_u64(key, 0) only, the flip on rng_u64(key, 1)).
  const ImageSpec no_flip = spec_of(24, 3, 40, true, false);
  int flipped = 0;
  for (uint64_t key = 0; key < 20; key++) {
    const std::vector<uint8_t> f = sample(dir.file("a.png"), spec, key);
    const std::vector<uint8_t> n = sample(dir.file("a.png"), no_flip, key);
    if (rng_u64(key, 1) & 1) {
      REQUIRE(f == mirrored(n, 24, 3));
      REQUIRE(f != n);
      flipped++;
    } else {
      REQUIRE(f == n);
    }
  }
  REQUIRE((flipped > 0 && flipped < 20));
}

TEST_CASE("augment_square equals load_sample's crop and flip on the same decoded image") {
  // A pack stores each image at resize x resize; the loader then crops and flips it with
  // augment_square. Starting from a file already at resize x resize, load_sample's resize is
  // the identity, so both paths must give the same bytes for every key.
  TempDir dir;
  for (int channels : {1, 3}) {
    const Image src = pattern_image(40, 40, channels);
    write_bytes(dir.file("sq.png"), png_bytes(src));
    for (bool crop : {false, true})
      for (bool flip : {false, true}) {
        const ImageSpec spec = spec_of(32, channels, 40, crop, flip);
        for (uint64_t key = 0; key < 25; key++) {
          INFO("channels " << channels << " crop " << crop << " flip " << flip << " key " << key);
          std::vector<uint8_t> packed(32 * 32 * size_t(channels), 0xEE);
          augment_square(src.pixels.data(), 40, channels, spec, key, packed.data());
          REQUIRE(packed == sample(dir.file("sq.png"), spec, key));
        }
      }
  }
}

TEST_CASE("load_sample: a bad file is returned, not thrown, and the output is left alone") {
  TempDir dir;
  const ImageSpec spec = spec_of(28, 1, 0, true, true);
  for (const TestFile& f : write_test_images(dir.path())) {
    std::vector<uint8_t> out(28 * 28, 0xEE);
    DecodeResult r;
    REQUIRE_NOTHROW(r = load_sample(f.path, spec, 1, out.data()));
    INFO(f.kind << ": " << r.message);
    REQUIRE(r.error == f.error);
    if (!r.ok()) REQUIRE(out == std::vector<uint8_t>(28 * 28, 0xEE));
  }
  // a good file smaller than the crop is enlarged first, so it always loads
  const Image tiny = pattern_image(5, 7, 1);
  write_bytes(dir.file("tiny.pgm"), pnm_bytes(tiny));
  REQUIRE(sample(dir.file("tiny.pgm"), spec, 3).size() == 28 * 28);
}

TEST_CASE("load_sample: a resize past the pixel cap is too_large, not a huge image or a throw") {
  // (found by fuzz/: a 71-byte BMP of 3 x 65541 pixels resized to a shorter side of 20)
  TempDir dir;
  write_bytes(dir.file("thin.pgm"), pnm_bytes(pattern_image(2, 3000, 1)));
  ImageSpec spec = spec_of(28, 1, 0, false, false);
  spec.max_pixels = 28 * 42000 - 1;  // the resize makes 28 x 42000
  std::vector<uint8_t> out(28 * 28, 0xEE);
  DecodeResult r;
  REQUIRE_NOTHROW(r = load_sample(dir.file("thin.pgm"), spec, 1, out.data()));
  INFO(r.message);
  REQUIRE(r.error == ImageError::too_large);
  REQUIRE(r.message.find("resizing 2x3000 so that its shorter side is 28 would make it 28x42000")
          != std::string::npos);
  spec.max_pixels += 1;  // the cap is inclusive
  REQUIRE(sample(dir.file("thin.pgm"), spec, 1).size() == 28 * 28);
}
