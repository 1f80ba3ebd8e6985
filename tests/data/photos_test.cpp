// The synthetic photos of the decode-heavy benchmark (data/photos.h): a pure function of
// (seed, split, index); sides, qualities and labels within their ranges; a set written in
// data/image_set.h's layout that decodes back to its images, averages at least 1.5 bits per
// pixel, is kept when asked for again and written again when its recipe changes; bad settings
// refused by name.
#include <cstring>
#include <filesystem>
#include <set>
#include <string>

#include "data/image.h"
#include "data/image_list.h"
#include "data/photos.h"
#include "tests/data/temp_dir.h"
#include "tests/test_util.h"

using namespace cutrain;
using namespace cutrain_test;

TEST_CASE("photos: each image is a pure function of (seed, split, index), within its ranges") {
  PhotoSetSpec spec;
  std::set<int> labels, widths;
  for (int64_t i = 0; i < 300; i++) {
    const PhotoShape p = photo_shape(spec, 0, i);
    REQUIRE(p.h >= 400);
    REQUIRE(p.h <= 600);
    REQUIRE(p.w >= 400);
    REQUIRE(p.w <= 600);
    REQUIRE(p.quality >= 75);
    REQUIRE(p.quality <= 95);
    REQUIRE(p.label >= 0);
    REQUIRE(p.label < 10);
    labels.insert(p.label), widths.insert(p.w);
  }
  REQUIRE(labels.size() == 10);   // every class drawn
  REQUIRE(widths.size() > 100);   // sides (and so aspect ratios) vary
  const Image a = make_photo(spec, 0, 7), b = make_photo(spec, 0, 7);
  REQUIRE(a.h == photo_shape(spec, 0, 7).h);
  REQUIRE(a.w == photo_shape(spec, 0, 7).w);
  REQUIRE(a.c == 3);
  REQUIRE(a.pixels == b.pixels);
  REQUIRE(make_photo(spec, 1, 7).pixels != a.pixels);  // the test split's image 7 is another
  PhotoSetSpec other = spec;
  other.seed = 2;
  REQUIRE(make_photo(other, 0, 7).pixels != a.pixels);
}

TEST_CASE("photos: a set in the image-set layout, at least 1.5 bits per pixel, kept or rewritten") {
  TempDir dir;
  PhotoSetSpec spec;
  spec.train = 20, spec.test = 6, spec.classes = 4;
  ImageSetOptions opt;
  opt.threads = 2;
  const PhotoSetSummary s = write_photo_set(dir / "photos", spec, opt);
  MESSAGE(s.images << " photos, " << s.bits_per_pixel << " bits per pixel");
  REQUIRE(!s.files.reused);
  REQUIRE(s.images == 26);
  REQUIRE(s.bytes == s.files.jpeg_bytes);
  REQUIRE(s.bits_per_pixel >= 1.5);
  const ImageList train = read_images(dir / "photos/train.txt");
  REQUIRE(train.samples.size() == 20);
  REQUIRE(train.class_names == std::vector<std::string>{"class0", "class1", "class2", "class3"});
  for (size_t i = 0; i < train.samples.size(); i++) {
    // Each file decodes to its image, up to JPEG's loss.
    const PhotoShape p = photo_shape(spec, 0, int64_t(i));
    REQUIRE(train.samples[i].label == p.label);
    Image back;
    REQUIRE(load_image_file(train.samples[i].path, 3, 0, 64LL << 20, back).ok());
    REQUIRE(back.h == p.h);
    REQUIRE(back.w == p.w);
    if (i == 0) {
      const Image img = make_photo(spec, 0, 0);
      double err = 0;
      for (size_t k = 0; k < img.pixels.size(); k++)
        err += std::abs(int(img.pixels[k]) - int(back.pixels[k]));
      REQUIRE(err / double(img.pixels.size()) < 12);  // lossy, but the same picture
    }
  }
  REQUIRE(read_images(dir / "photos/test.txt").samples.size() == 6);
  REQUIRE(read_text(dir / "photos/recipe.txt") == photo_recipe(spec));

  const PhotoSetSummary again = write_photo_set(dir / "photos", spec, opt);
  REQUIRE(again.files.reused);
  REQUIRE(again.bytes == s.bytes);  // measured off the files
  spec.min_quality = spec.max_quality = 95;  // another recipe: written again
  const PhotoSetSummary sharper = write_photo_set(dir / "photos", spec, opt);
  REQUIRE(!sharper.files.reused);
  REQUIRE(sharper.bytes > s.bytes);
}

TEST_CASE("photos: bad settings and a set below the bits per pixel asked for are refused") {
  TempDir dir;
  PhotoSetSpec spec;
  spec.classes = 11;
  REQUIRE_USER_ERROR(write_photo_set(dir / "a", spec), "--classes must be in [2, 10]");
  spec.classes = 10, spec.min_side = 700;
  REQUIRE_USER_ERROR(write_photo_set(dir / "a", spec), "16 <= min <= max <= 4096; got 700..600");
  spec.min_side = 400, spec.min_quality = 96;
  REQUIRE_USER_ERROR(write_photo_set(dir / "a", spec), "1 <= min <= max <= 100; got 96..95");
  spec = PhotoSetSpec();
  spec.train = 4, spec.test = 0, spec.min_bits_per_pixel = 50;  // no JPEG gets there
  REQUIRE_USER_ERROR(write_photo_set(dir / "b", spec), "bits per pixel, below the 50");
  REQUIRE(!std::filesystem::exists(dir / "b/test.txt"));  // no test split asked for
}
