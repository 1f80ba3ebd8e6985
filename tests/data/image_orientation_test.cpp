// A photo's EXIF orientation: orient_image by hand; real JPEG files with an EXIF block made by
// libexif, for all eight orientations, both byte orders, before and after a JFIF segment,
// at full size and DCT-scaled; the order of the per-sample path (turned, then resized and
// cropped) in load_sample, ListSource (what train, eval and predict read) and packs; and
// EXIF blocks that are missing or garbled, which leave the image as stored.
#include <cstring>
#include <string>
#include <vector>

#include "data/image.h"
#include "data/pack.h"
#include "data/source.h"
#include "tests/data/pack_fixture.h"
#include "tests/data/test_images.h"
#include "tests/test_util.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {

constexpr int64_t kCap = 64LL << 20;

Image decoded(const std::vector<uint8_t>& file, int channels = 3, int min_side = 0) {
  Image img;
  const DecodeResult r = decode_image(file.data(), file.size(), channels, min_side, kCap, img);
  INFO(r.message);
  REQUIRE(r.ok());
  return img;
}

// The upright picture whose storage under `orientation` is `stored`: stored_as inverted by
// sending an image of pixel numbers through it, so only the EXIF words in stored_as decide.
Image upright_of(const Image& stored, int orientation) {
  const bool turned = orientation >= 5;
  Image numbers;  // pixel i of the upright picture holds i (two bytes)
  numbers.h = turned ? stored.w : stored.h, numbers.w = turned ? stored.h : stored.w;
  numbers.c = 2;
  numbers.pixels.resize(size_t(numbers.h) * numbers.w * 2);
  for (size_t i = 0; i < size_t(numbers.h) * numbers.w; i++)
    numbers.pixels[2 * i] = uint8_t(i >> 8), numbers.pixels[2 * i + 1] = uint8_t(i);
  const Image where = stored_as(numbers, orientation);
  Image up;
  up.h = numbers.h, up.w = numbers.w, up.c = stored.c;
  up.pixels.resize(stored.pixels.size());
  for (size_t s = 0; s < size_t(stored.h) * stored.w; s++) {
    const size_t i = size_t(where.pixels[2 * s]) << 8 | where.pixels[2 * s + 1];
    std::memcpy(&up.pixels[i * up.c], &stored.pixels[s * up.c], size_t(up.c));
  }
  return up;
}

void require_close(const Image& got, const Image& want) {
  REQUIRE(got.h == want.h);
  REQUIRE(got.w == want.w);
  REQUIRE(got.pixels.size() == want.pixels.size());
  double sum = 0;
  int max = 0;
  for (size_t i = 0; i < got.pixels.size(); i++) {
    const int e = std::abs(int(got.pixels[i]) - int(want.pixels[i]));
    sum += e, max = std::max(max, e);
  }
  // JPEG at quality 95, 4:4:4 (image_decode_test.cpp: mean 0.24..0.62, max 2..4); a wrong
  // turn or mirror of the checkerboard would be off by 80 in most pixels.
  INFO("mean abs error " << sum / double(got.pixels.size()) << ", max " << max);
  REQUIRE(sum / double(got.pixels.size()) < 1.25);
  REQUIRE(max <= 8);
}

// A TIFF structure by hand, for the garbled blocks: header, IFD0 with `entries`, no next IFD.
struct Entry {
  uint16_t tag, type;
  uint32_t count;
  uint32_t value;  // a SHORT sits in the first two bytes of the field, as the standard says
};
std::vector<uint8_t> exif_by_hand(bool big_endian, const std::vector<Entry>& entries) {
  std::vector<uint8_t> t = {'E', 'x', 'i', 'f', 0, 0};
  auto put = [&](uint32_t v, int bytes) {
    for (int i = 0; i < bytes; i++)
      t.push_back(uint8_t(v >> (8 * (big_endian ? bytes - 1 - i : i))));
  };
  t.push_back(big_endian ? 'M' : 'I'), t.push_back(big_endian ? 'M' : 'I');
  put(42, 2), put(8, 4), put(uint32_t(entries.size()), 2);
  for (const Entry& e : entries) {
    put(e.tag, 2), put(e.type, 2), put(e.count, 4);
    if (e.type == 3) put(e.value, 2), put(0, 2);
    else put(e.value, 4);
  }
  put(0, 4);
  return t;
}

}  // namespace

TEST_CASE("orient_image: the eight orientations of a 2x3 image, by hand") {
  // stored:  a b c     (values 1..6; with 3 channels each pixel is (v, v + 10, v + 20))
  //          d e f
  const std::vector<std::vector<int>> want = {
      {},
      {1, 2, 3, 4, 5, 6},  // 1: as stored (2x3)
      {3, 2, 1, 6, 5, 4},  // 2: mirrored left-right
      {6, 5, 4, 3, 2, 1},  // 3: turned 180 degrees
      {4, 5, 6, 1, 2, 3},  // 4: mirrored top-bottom
      {1, 4, 2, 5, 3, 6},  // 5: transposed (3x2): a d / b e / c f
      {4, 1, 5, 2, 6, 3},  // 6: turned clockwise: d a / e b / f c
      {6, 3, 5, 2, 4, 1},  // 7: transverse: f c / e b / d a
      {3, 6, 2, 5, 1, 4}}; // 8: turned anticlockwise: c f / b e / a d
  for (int c : {1, 3})
    for (int o = 1; o <= 8; o++) {
      INFO("orientation " << o << ", " << c << " channel(s)");
      Image img;
      img.h = 2, img.w = 3, img.c = c;
      for (int v = 1; v <= 6; v++)
        for (int k = 0; k < c; k++) img.pixels.push_back(uint8_t(v + 10 * k));
      orient_image(img, o);
      REQUIRE(img.h == (o >= 5 ? 3 : 2));
      REQUIRE(img.w == (o >= 5 ? 2 : 3));
      std::vector<uint8_t> expect;
      for (int v : want[size_t(o)])
        for (int k = 0; k < c; k++) expect.push_back(uint8_t(v + 10 * k));
      REQUIRE(img.pixels == expect);
    }
  Image img;
  img.h = img.w = img.c = 1;
  img.pixels = {7};
  REQUIRE_ERROR(orient_image(img, 0), "EXIF orientation must be 1..8, got 0");
  REQUIRE_ERROR(orient_image(img, 9), "EXIF orientation must be 1..8, got 9");
}

TEST_CASE("orient_image undoes what a camera stores, as the EXIF standard words it") {
  // Odd sizes, no symmetry to hide behind, over orient_image's 32x32 tiles (and their edges).
  for (int c : {1, 3}) {
    const Image upright = pattern_image(45, 70, c);
    for (int o = 1; o <= 8; o++) {
      INFO("orientation " << o << ", " << c << " channel(s)");
      Image img = stored_as(upright, o);
      REQUIRE(img.h == (o >= 5 ? 70 : 45));
      if (o != 1) REQUIRE(img.pixels != upright.pixels);
      orient_image(img, o);
      REQUIRE((img.h == 45 && img.w == 70 && img.c == c));
      REQUIRE(img.pixels == upright.pixels);
      REQUIRE(upright_of(stored_as(upright, o), o).pixels == upright.pixels);  // the test's own
    }
  }
}

TEST_CASE("decode_image: a JPEG's EXIF orientation, all eight, any byte order and position") {
  // A landscape picture, 32x48, stored as the camera would for each orientation; the file is
  // a real JPEG with a libexif-made APP1 segment. Decoded, it is upright: exactly the plain
  // file's pixels turned (the same coefficients), and close to the picture itself.
  const Image upright = pattern_image(32, 48, 3);
  for (int o = 1; o <= 8; o++) {
    const Image stored = stored_as(upright, o);
    const std::vector<uint8_t> plain = encode_jpeg(stored.pixels.data(), stored.h, stored.w, 3);
    for (bool big_endian : {true, false})
      for (bool after_app0 : {false, true})
        for (int channels : {1, 3}) {
          INFO("orientation " << o << (big_endian ? ", Motorola" : ", Intel")
                              << (after_app0 ? ", after JFIF" : ", right after SOI") << ", "
                              << channels << " channel(s)");
          const std::vector<uint8_t> photo =
              jpeg_with_app1(plain, exif_block(o, big_endian), after_app0);
          const Image img = decoded(photo, channels);
          REQUIRE((img.h == 32 && img.w == 48 && img.c == channels));
          REQUIRE(img.pixels == upright_of(decoded(plain, channels), o).pixels);
          if (channels == 3) require_close(img, upright);
        }
  }
}

TEST_CASE("decode_image: a DCT-scaled decode is turned too, its size from the upright image") {
  // 64x96 upright; stored 96x64 for 5-8. min_side 16: 1/4 scale either way (the shorter side
  // is 64 whichever way round), then turned: 16x24 upright for every orientation.
  const Image upright = pattern_image(64, 96, 3);
  for (int o = 1; o <= 8; o++) {
    INFO("orientation " << o);
    const Image stored = stored_as(upright, o);
    const std::vector<uint8_t> plain = encode_jpeg(stored.pixels.data(), stored.h, stored.w, 3);
    const Image img = decoded(jpeg_with_app1(plain, exif_block(o, o % 2 == 0), false), 3, 16);
    REQUIRE((img.h == 16 && img.w == 24));
    REQUIRE(img.pixels == upright_of(decoded(plain, 3, 16), o).pixels);
  }
}

TEST_CASE("load_sample, ListSource and packs turn a photo before resizing and cropping it") {
  // The per-sample path of training, eval and predict (ListSource -> load_sample) and of
  // `cutrain pack` (write_pack -> load_sample): each EXIF photo must give exactly the samples
  // of its upright pixels saved as a lossless PNG (decoded to gray or RGB as the photo is:
  // a gray decode of a JPEG is its Y channel, not the luma of its RGB decode). The picture is
  // 40x56, so the shorter side (which the resize keeps) is the other one of the stored 56x40
  // for orientations 5-8.
  TempDir dir;
  const Image upright = pattern_image(40, 56, 3);
  ImageList photos;
  std::vector<std::string> pngs[4];  // [channels]: the upright pixels of each photo
  for (int o = 1; o <= 8; o++) {
    const Image stored = stored_as(upright, o);
    const std::vector<uint8_t> plain = encode_jpeg(stored.pixels.data(), stored.h, stored.w, 3);
    const std::string photo = dir.file("photo" + std::to_string(o) + ".jpg");
    write_bytes(photo, jpeg_with_app1(plain, exif_block(o, true), true));
    photos.samples.push_back({photo, int32_t(o % 2)});
    for (int c : {1, 3}) {
      pngs[c].push_back(dir.file("upright" + std::to_string(o) + "_" + std::to_string(c) + ".png"));
      write_bytes(pngs[c].back(), png_bytes(upright_of(decoded(plain, c), o)));
    }
  }
  photos.class_names = {"even", "odd"};
  for (int channels : {1, 3}) {
    ImageSpec spec;  // resize 28: the JPEG is decoded at full size (1/2 would be 20 < 28)
    spec.size = 24, spec.resize = 28, spec.channels = channels;
    spec.random_crop = spec.random_flip = true;
    ListSource source(photos, spec);
    const size_t bytes = source.sample_bytes();
    for (int o = 1; o <= 8; o++)
      for (uint64_t key = 0; key < 6; key++) {
        INFO("orientation " << o << ", " << channels << " channel(s), key " << key);
        std::vector<uint8_t> got(bytes, 0xEE), via_source(bytes, 0xEE), want(bytes, 0xEF);
        REQUIRE(load_sample(photos.samples[size_t(o - 1)].path, spec, key, got.data()).ok());
        StageTimes t;
        REQUIRE(source.load_cut(o - 1, key, via_source.data(), t).ok());
        REQUIRE(load_sample(pngs[channels][size_t(o - 1)], spec, key, want.data()).ok());
        REQUIRE(got == want);
        REQUIRE(via_source == want);
      }
  }
  PackOptions opt;  // 24: a full-size decode again
  opt.size = 24, opt.channels = 3, opt.threads = 2;
  const PackSummary s = write_pack(photos, dir.file("photos.h5"), opt);
  REQUIRE(s.packed == 8);
  const PackData p = read_pack_raw(dir.file("photos.h5"));
  const size_t image_bytes = 24 * 24 * 3;
  for (size_t i = 0; i < 8; i++) {
    INFO("packed orientation " << i + 1);
    const std::vector<uint8_t> want = centre_sample(pngs[3][i], 24, 3);
    REQUIRE(std::equal(want.begin(), want.end(), p.images.begin() + long(i * image_bytes)));
  }
}

TEST_CASE("decode_image: a missing or garbled EXIF block leaves the image as stored") {
  // A photo is never a bad file because of its EXIF: each of these decodes, to exactly the
  // pixels of the file without the block.
  const Image stored = pattern_image(24, 40, 3);
  const std::vector<uint8_t> plain = encode_jpeg(stored.pixels.data(), 24, 40, 3);
  const Image want = decoded(plain);
  const std::vector<uint8_t> good = exif_by_hand(true, {{0x0112, 3, 1, 6}});
  REQUIRE(decoded(jpeg_with_app1(plain, good, false)).h == 40);  // the hand-made block works
  auto with = [](std::vector<uint8_t> b, size_t at, std::vector<uint8_t> bytes) {
    std::copy(bytes.begin(), bytes.end(), b.begin() + long(at));
    return b;
  };
  const std::string xmp = "http://ns.adobe.com/xap/1.0/";
  const std::vector<std::pair<std::string, std::vector<uint8_t>>> cases = {
      {"only the Exif header", {'E', 'x', 'i', 'f', 0, 0}},
      {"a TIFF header cut short", {'E', 'x', 'i', 'f', 0, 0, 'M', 'M', 0, 42}},
      {"byte order XX", with(good, 6, {'X', 'X'})},
      {"byte order II on a big-endian block", with(good, 6, {'I', 'I'})},
      {"43 instead of 42", with(good, 8, {0, 43})},
      {"IFD0 past the block", with(good, 10, {0, 0, 1, 0})},
      {"IFD0 at the last byte", with(good, 10, {0, 0, 0, uint8_t(good.size() - 6 - 1)})},
      {"1000 entries in IFD0", with(good, 14, {0x03, 0xE8})},
      {"the entry cut in half", std::vector<uint8_t>(good.begin(), good.begin() + 22)},
      {"orientation 0", exif_by_hand(true, {{0x0112, 3, 1, 0}})},
      {"orientation 9", exif_by_hand(false, {{0x0112, 3, 1, 9}})},
      {"orientation 0xFFFF", exif_by_hand(true, {{0x0112, 3, 1, 0xFFFF}})},
      {"orientation as a LONG", exif_by_hand(true, {{0x0112, 4, 1, 6}})},
      {"orientation with count 2", exif_by_hand(true, {{0x0112, 3, 2, 6}})},
      {"no orientation entry (XResolution only)", exif_by_hand(true, {{0x011A, 5, 1, 26}})},
      {"XMP, not EXIF", [&] {
         std::vector<uint8_t> b(xmp.begin(), xmp.end());
         b.push_back(0);
         const std::string body = "<x:xmpmeta tiff:Orientation=\"6\"/>";
         b.insert(b.end(), body.begin(), body.end());
         return b;
       }()},
      {"Exif without its two NUL bytes", with(good, 4, {'X', 'X'})}};
  for (const auto& [what, payload] : cases) {
    for (bool after_app0 : {false, true}) {
      INFO(what << (after_app0 ? ", after JFIF" : ""));
      Image img;
      const std::vector<uint8_t> file = jpeg_with_app1(plain, payload, after_app0);
      const DecodeResult r = decode_image(file.data(), file.size(), 3, 0, kCap, img);
      INFO(r.message);
      REQUIRE(r.ok());
      REQUIRE((img.h == 24 && img.w == 40));
      REQUIRE(img.pixels == want.pixels);
    }
  }
  // The first EXIF segment counts, found past any other APP1 (XMP) before it.
  std::vector<uint8_t> xmp_block(xmp.begin(), xmp.end());
  xmp_block.push_back(0);
  const std::vector<uint8_t> file =
      jpeg_with_app1(jpeg_with_app1(jpeg_with_app1(plain, exif_block(3, false), false),
                                    exif_block(6, true), false),
                     xmp_block, false);  // SOI, XMP, EXIF 6, EXIF 3, JFIF, ...
  REQUIRE(decoded(file).pixels == upright_of(want, 6).pixels);
}
