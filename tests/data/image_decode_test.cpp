// decode_image / load_image_file: every good kind of file decodes to the requested channels,
// and every bad kind is reported as exactly its ImageError, without throwing.
#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <thread>

#include "data/image.h"
#include "data/image_format.h"
#include "tests/data/test_images.h"
#include "tests/test_util.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {

constexpr int64_t kCap = 64LL << 20;

// The expected pixels of `src` in `channels` channels: BT.601 luma or replication, written
// out here independently of the decoder's own conversion.
std::vector<uint8_t> as_channels(const Image& src, int channels) {
  const size_t npix = size_t(src.h) * src.w;
  std::vector<uint8_t> out(npix * channels);
  for (size_t i = 0; i < npix; i++) {
    const uint8_t* p = &src.pixels[i * src.c];
    if (channels == src.c) {
      for (int k = 0; k < channels; k++) out[i * channels + k] = p[k];
    } else if (channels == 1) {
      out[i] = uint8_t((299 * p[0] + 587 * p[1] + 114 * p[2] + 500) / 1000);
    } else {
      out[i * 3] = out[i * 3 + 1] = out[i * 3 + 2] = p[0];
    }
  }
  return out;
}

void errors(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want, double& mean,
            int& max) {
  REQUIRE(got.size() == want.size());
  double sum = 0;
  max = 0;
  for (size_t i = 0; i < got.size(); i++) {
    const int e = std::abs(int(got[i]) - int(want[i]));
    sum += e;
    max = std::max(max, e);
  }
  mean = sum / double(got.size());
}

DecodeResult decode(const std::vector<uint8_t>& bytes, Image& out, int channels = 3,
                    int min_side = 0, int64_t cap = kCap) {
  return decode_image(bytes.data(), bytes.size(), channels, min_side, cap, out);
}

}  // namespace

TEST_CASE("decode_image: every good kind decodes to 1 and to 3 channels") {
  TempDir dir;
  int good = 0;
  for (const TestFile& f : write_test_images(dir.path())) {
    if (f.error != ImageError::none) continue;
    good++;
    for (int channels : {1, 3}) {
      INFO(f.kind << " as " << channels << " channel(s)");
      Image img;
      img.h = 99;  // poisoned
      const DecodeResult r = load_image_file(f.path, channels, 0, kCap, img);
      INFO(r.message);
      REQUIRE(r.ok());
      REQUIRE(r.message.empty());
      REQUIRE(img.h == f.source.h);
      REQUIRE(img.w == f.source.w);
      REQUIRE(img.c == channels);
      const std::vector<uint8_t> want = as_channels(f.source, channels);
      if (f.lossless) {
        REQUIRE(img.pixels == want);
        continue;
      }
      // JPEG at quality 95, 4:4:4, on the gradient with sharp 8x8 squares: measured mean
      // 0.24..0.62, max 2..4 over these kinds and channel counts. Bounds: 2x margin.
      double mean;
      int max;
      errors(img.pixels, want, mean, max);
      INFO(f.kind << " -> " << channels << " channel(s): mean abs error " << mean
                     << ", max " << max);
      REQUIRE(mean < 1.25);
      REQUIRE(max <= 8);
    }
  }
  REQUIRE(good == 12);
}

TEST_CASE("decode_image: gray files replicate into RGB; progressive equals baseline") {
  const Image gray = pattern_image(24, 40, 1), rgb = pattern_image(24, 40, 3);
  SUBCASE("a gray JPEG as RGB: three equal channels, each the gray decode") {
    const std::vector<uint8_t> jpeg = encode_jpeg(gray.pixels.data(), 24, 40, 1);
    Image g, c;
    REQUIRE(decode(jpeg, g, 1).ok());
    REQUIRE(decode(jpeg, c, 3).ok());
    REQUIRE(c.pixels == as_channels(g, 3));
  }
  SUBCASE("progressive: the same quantized coefficients, so the same pixels exactly") {
    Image base, prog;
    REQUIRE(decode(encode_jpeg(rgb.pixels.data(), 24, 40, 3, 90, false), base).ok());
    REQUIRE(decode(encode_jpeg(rgb.pixels.data(), 24, 40, 3, 90, true), prog).ok());
    REQUIRE(prog.pixels == base.pixels);
  }
}

TEST_CASE("decode_image: RGB -> gray with the BT.601 weights, by hand") {
  // (299 R + 587 G + 114 B + 500) / 1000: red 76.245 -> 76, green 149.685 -> 150,
  // blue 29.07 -> 29, (10, 20, 30) 18.15 -> 18, white 255.
  Image px;
  px.h = 1, px.w = 5, px.c = 3;
  px.pixels = {255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30, 255, 255, 255};
  Image g;
  REQUIRE(decode(pnm_bytes(px), g, 1).ok());
  REQUIRE(g.pixels == std::vector<uint8_t>{76, 150, 29, 18, 255});
}

TEST_CASE("decode_image: CMYK is read as Adobe writes it, inverted (255 = no ink)") {
  // Flat 16x16 fields, so JPEG keeps them to within a level or two. Inverted samples:
  // C=255 M=0 Y=0 K=255 is no cyan ink, full magenta and yellow: red. Read uninverted it
  // would be cyan-ish black.
  struct Case {
    uint8_t cmyk[4];
    uint8_t rgb[3];
  };
  const Case cases[] = {{{255, 0, 0, 255}, {255, 0, 0}},
                        {{0, 255, 255, 255}, {0, 255, 255}},
                        {{255, 255, 255, 128}, {128, 128, 128}},
                        {{255, 255, 255, 255}, {255, 255, 255}}};
  for (const Case& t : cases) {
    std::vector<uint8_t> cmyk(16 * 16 * 4);
    for (size_t i = 0; i < cmyk.size(); i++) cmyk[i] = t.cmyk[i % 4];
    Image img;
    REQUIRE(decode(encode_jpeg(cmyk.data(), 16, 16, 4), img).ok());
    for (int k = 0; k < 3; k++) {
      INFO("CMYK " << int(t.cmyk[0]) << "," << int(t.cmyk[1]) << "," << int(t.cmyk[2]) << ","
                   << int(t.cmyk[3]) << " channel " << k << ": " << int(img.pixels[k]));
      REQUIRE(std::abs(int(img.pixels[k]) - int(t.rgb[k])) <= 2);
    }
  }
}

TEST_CASE("decode_image: every bad kind gives exactly its error, and none throws") {
  TempDir dir;
  const std::map<std::string, std::string> says = {
      {"missing", "No such file or directory"}, {"empty", "0 bytes"},
      {"truncated_jpeg", "truncated JPEG: the data ends inside the entropy-coded data"},
      {"corrupt_jpeg", "corrupt JPEG: Corrupt JPEG data"},
      {"not_image", "not an image: no known signature (starts with 70 61 74 68"},
      {"too_large_jpeg", "JPEG declares 20000x20000 = 400000000 pixels, over the cap"},
      {"truncated_png", "truncated PNG: the data ends inside chunk IDAT"},
      {"corrupt_png", "corrupt PNG: stb_image:"},
      {"truncated_webp", "truncated WebP: the data ends inside the RIFF container"},
      {"corrupt_webp", "corrupt WebP: libwebp: bitstream error"}};
  int bad = 0;
  for (const TestFile& f : write_test_images(dir.path())) {
    if (f.error == ImageError::none) continue;
    bad++;
    for (int channels : {1, 3}) {
      INFO(f.kind << " as " << channels << " channel(s)");
      Image img;
      DecodeResult r;
      REQUIRE_NOTHROW(r = load_image_file(f.path, channels, 28, kCap, img));
      INFO("error " << image_error_name(r.error) << ": " << r.message);
      REQUIRE(r.error == f.error);
      REQUIRE_FALSE(r.ok());
      REQUIRE(r.message.find(says.at(f.kind)) != std::string::npos);
      REQUIRE(img.pixels.empty());
      REQUIRE(img.h == 0);
    }
  }
  REQUIRE(bad == 10);
  std::vector<std::string> names;
  for (ImageError e : {ImageError::none, ImageError::missing, ImageError::empty,
                       ImageError::truncated, ImageError::corrupt, ImageError::not_image,
                       ImageError::too_large})
    names.push_back(image_error_name(e));
  REQUIRE(names == std::vector<std::string>{"none", "missing", "empty", "truncated", "corrupt",
                                            "not_image", "too_large"});
}

TEST_CASE("decode_image: a file cut anywhere is truncated, never corrupt, never decoded") {
  // Every cut point of a baseline and a progressive JPEG (inside markers, headers, every scan),
  // a JPEG with an EXIF block (cuts inside it), a PNG, BMP and PPM (WebP: in
  // image_formats_test.cpp). A cut at 0 is an empty file, at 1 byte not yet an image.
  const Image rgb = pattern_image(40, 56, 3);
  const std::map<std::string, std::vector<uint8_t>> files = {
      {"baseline JPEG", encode_jpeg(rgb.pixels.data(), 40, 56, 3)},
      {"progressive JPEG", encode_jpeg(rgb.pixels.data(), 40, 56, 3, 95, true)},
      {"JPEG with EXIF", jpeg_with_app1(encode_jpeg(rgb.pixels.data(), 40, 56, 3),
                                        exif_block(6, true), true)},
      {"PNG", png_bytes(rgb)}, {"BMP", bmp_bytes(rgb)}, {"PPM", pnm_bytes(rgb)}};
  for (const auto& [name, file] : files) {
    const size_t step = std::max<size_t>(1, file.size() / 600);
    int checked = 0;
    for (size_t cut = 2; cut < file.size(); cut += step) {
      const std::vector<uint8_t> part(file.begin(), file.begin() + long(cut));
      Image img;
      DecodeResult r;
      REQUIRE_NOTHROW(r = decode(part, img));
      INFO(name << " cut to " << cut << " of " << file.size() << " bytes: "
                << image_error_name(r.error) << ": " << r.message);
      REQUIRE(r.error == ImageError::truncated);
      checked++;
    }
    REQUIRE(checked > 100);
  }
}

TEST_CASE("decode_image: garbage after a valid header is corrupt, for many garbage patterns") {
  const Image rgb = pattern_image(40, 56, 3);
  const std::vector<uint8_t> jpeg = encode_jpeg(rgb.pixels.data(), 40, 56, 3);
  for (uint64_t seed = 0; seed < 20; seed++) {
    Image img;
    const DecodeResult r = decode(jpeg_garbage_scan(jpeg, seed), img);
    INFO("seed " << seed << ": " << image_error_name(r.error) << ": " << r.message);
    REQUIRE(r.error == ImageError::corrupt);
  }
}

TEST_CASE("decode_image: the pixel cap is checked on the header, before any decoding") {
  const Image rgb = gradient_image(16, 16, 3);
  const std::vector<uint8_t> huge = jpeg_claiming(encode_jpeg(rgb.pixels.data(), 16, 16, 3),
                                                  20000, 20000);
  Image img;
  SUBCASE("refused in well under 50 ms (decoding would allocate 1.2 GB first)") {
    const auto t0 = std::chrono::steady_clock::now();
    const DecodeResult r = decode(huge, img);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    INFO("20000x20000 JPEG refused in " << ms << " ms");
    REQUIRE(r.error == ImageError::too_large);
    REQUIRE(ms < 50);
  }
  SUBCASE("a file that is only the headers is too_large, not truncated: nothing was decoded") {
    const std::vector<uint8_t> headers(huge.begin(), huge.begin() + long(jpeg_scan_start(huge)));
    REQUIRE(decode(headers, img).error == ImageError::too_large);
    // raise the cap, and the same bytes do get decoded (at 1/8 scale: 2500x2500) and found short
    REQUIRE(decode(headers, img, 3, 2500, 400000000).error == ImageError::truncated);
  }
  SUBCASE("the cap is width * height of the full image, inclusive") {
    const std::vector<uint8_t> jpeg = encode_jpeg(rgb.pixels.data(), 16, 16, 3);
    REQUIRE(decode(jpeg, img, 3, 0, 256).ok());
    REQUIRE(decode(jpeg, img, 3, 0, 255).error == ImageError::too_large);
    REQUIRE(decode(jpeg, img, 3, 2, 255).error == ImageError::too_large);  // not the scaled size
  }
  SUBCASE("stb_image formats: the cap from stbi_info, and stb_image's own limit") {
    DecodeResult r = decode(png_claiming(png_bytes(rgb), 100, 100), img, 3, 0, 9999);
    INFO(r.message);
    REQUIRE(r.error == ImageError::too_large);
    REQUIRE(r.message.find("PNG declares 100x100 = 10000 pixels") != std::string::npos);
    REQUIRE(decode(png_bytes(rgb), img, 3, 0, 255).error == ImageError::too_large);
    REQUIRE(decode(png_bytes(rgb), img, 3, 0, 256).ok());
    // 20000x20000 RGB is also over stb_image's own 2^30-byte limit, which makes stbi_info
    // fail: the cap is read from IHDR first, so this is still too_large, not corrupt
    r = decode(png_claiming(png_bytes(rgb), 20000, 20000), img);
    REQUIRE(r.error == ImageError::too_large);
    REQUIRE(r.message.find("PNG declares 20000x20000") != std::string::npos);
  }
}

TEST_CASE("decode_image: header sizes whose product passes 2^63, and an image of no pixels") {
  Image img;
  // (found by fuzz/: PNG sizes are 32-bit, so width * height overflowed int64)
  const Image rgb = gradient_image(4, 4, 3);
  DecodeResult r = decode(png_claiming(png_bytes(rgb), int(0xfeffffffu), int(0xf6ffffffu)), img);
  INFO(r.message);
  REQUIRE(r.error == ImageError::too_large);
  REQUIRE(r.message.find("= over 2^63 pixels") != std::string::npos);
  // stb_image reads a PPM header cut by a stray byte as a height of 0 (found by fuzz/)
  const std::string ppm = "P6\n255\n\x01";
  r = decode(std::vector<uint8_t>(ppm.begin(), ppm.end()), img);
  INFO(r.message);
  REQUIRE(r.error == ImageError::corrupt);
  REQUIRE(img.pixels.empty());
  // ends_early's byte counts saturate instead of overflowing (the cap check comes first in
  // decode_image, but the walk is for any header)
  const std::string pgm = "P5 99999999999 99999999999 65535\n";
  std::string where;
  REQUIRE(ends_early(ImageFormat::pnm, reinterpret_cast<const uint8_t*>(pgm.data()), pgm.size(),
                     where));
  std::vector<uint8_t> bmp = bmp_bytes(rgb);
  for (int at : {18, 22}) bmp[size_t(at)] = 0xff, bmp[size_t(at) + 1] = 0xff,
                          bmp[size_t(at) + 2] = 0xff, bmp[size_t(at) + 3] = 0x7f;
  bmp[28] = bmp[29] = 0xff;  // 65535 bits a pixel
  REQUIRE(ends_early(ImageFormat::bmp, bmp.data(), bmp.size(), where));
}

TEST_CASE("decode_image: DCT scaling, the smallest power-of-two scale keeping min_side") {
  const Image src = gradient_image(384, 512, 3);
  const std::vector<uint8_t> jpeg = encode_jpeg(src.pixels.data(), 384, 512, 3);
  // min_side -> decoded h x w. Never below min_side, never enlarged, 1/8 at the most.
  const std::vector<std::array<int, 3>> cases = {
      {0, 384, 512}, {1, 48, 64},   {48, 48, 64},    {49, 96, 128},   {96, 96, 128},
      {97, 192, 256}, {100, 192, 256}, {192, 192, 256}, {193, 384, 512}, {1000, 384, 512}};
  Image full, img;
  REQUIRE(decode(jpeg, full).ok());
  for (const auto& [min_side, h, w] : cases) {
    INFO("min_side " << min_side);
    REQUIRE(decode(jpeg, img, 3, min_side).ok());
    REQUIRE(img.h == h);
    REQUIRE(img.w == w);
  }
  // 1/8 keeps each 8x8 block's DC term, i.e. the block mean: compare with block means of the
  // full decode (measured: mean abs difference ~0.2, max 1-2).
  REQUIRE(decode(jpeg, img, 3, 48).ok());
  double sum = 0;
  int max = 0;
  for (int y = 0; y < 48; y++)
    for (int x = 0; x < 64; x++)
      for (int k = 0; k < 3; k++) {
        int s = 0;
        for (int dy = 0; dy < 8; dy++)
          for (int dx = 0; dx < 8; dx++)
            s += full.pixels[((size_t(y) * 8 + dy) * 512 + x * 8 + dx) * 3 + k];
        const int e = std::abs(int(img.pixels[(size_t(y) * 64 + x) * 3 + k]) - (s + 32) / 64);
        sum += e;
        max = std::max(max, e);
      }
  INFO("1/8 DCT decode vs 8x8 block means of the full decode: mean " << sum / (48 * 64 * 3)
                                                                       << ", max " << max);
  REQUIRE(sum / (48 * 64 * 3) < 1.0);
  REQUIRE(max <= 4);
  // odd sizes round up, as TurboJPEG's TJSCALED does: 75x101 at 1/8 is 10x13
  const Image odd = gradient_image(75, 101, 1);
  REQUIRE(decode(encode_jpeg(odd.pixels.data(), 75, 101, 1), img, 1, 10).ok());
  REQUIRE(img.h == 10);
  REQUIRE(img.w == 13);
}

TEST_CASE("decode_image: a failed JPEG does not spoil the next decode on the thread") {
  // TurboJPEG 2.1.5 handles keep stale state after an error; the decoder replaces its
  // per-thread handle after any failure. Alternate bad and good files on one thread, then on
  // four threads at once: every good file must decode to the same pixels every time.
  const Image rgb = pattern_image(32, 48, 3);
  const std::vector<uint8_t> good = encode_jpeg(rgb.pixels.data(), 32, 48, 3);
  const std::vector<std::vector<uint8_t>> bad = {
      truncate_half(good), jpeg_garbage_scan(good, 3), {0xFF, 0xD8, 0xFF, 0xDA, 0x00},
      std::vector<uint8_t>(good.begin(), good.begin() + long(jpeg_scan_start(good)) - 3)};
  Image want;
  REQUIRE(decode(good, want).ok());
  auto run = [&](int rounds, int& failures) {
    for (int i = 0; i < rounds; i++) {
      Image img;
      decode(bad[size_t(i) % bad.size()], img);
      if (!decode(good, img).ok() || img.pixels != want.pixels) failures++;
    }
  };
  int failures = 0;
  run(40, failures);
  REQUIRE(failures == 0);
  std::vector<int> per_thread(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; t++) threads.emplace_back(run, 50, std::ref(per_thread[size_t(t)]));
  for (std::thread& t : threads) t.join();
  REQUIRE(per_thread == std::vector<int>(4, 0));
}

TEST_CASE("decode_image: a caller's mistakes throw; unreadable paths are missing") {
  const std::vector<uint8_t> b = {1, 2, 3};
  Image img;
  REQUIRE_ERROR(decode_image(b.data(), 3, 2, 0, kCap, img), "channels must be 1 or 3, got 2");
  REQUIRE_ERROR(decode_image(b.data(), 3, 3, -1, kCap, img), "min_side must be >= 0");
  REQUIRE_ERROR(decode_image(b.data(), 3, 3, 0, 0, img), "max_pixels must be >= 1");
  TempDir dir;
  DecodeResult r = load_image_file(dir.path(), 3, 0, kCap, img);
  REQUIRE(r.error == ImageError::missing);
  REQUIRE(r.message == "cannot read: Is a directory");
  r = load_image_file(dir.file("nope/x.jpg"), 3, 0, kCap, img);
  REQUIRE(r.error == ImageError::missing);
  REQUIRE(r.message == "cannot open: No such file or directory");
  // a one-byte file is not an image; two bytes of a JPEG signature are a truncated JPEG
  REQUIRE(decode({0xFF}, img).error == ImageError::not_image);
  REQUIRE(decode({0xFF, 0xD8}, img).error == ImageError::truncated);
}

TEST_CASE("decode_image: a GIF (hand-made: one white pixel) and its pixel cap") {
  // header, 1x1 logical screen with a 2-entry colour table (white, black), one 1x1 image whose
  // LZW data (min code size 2) is clear, index 0, end; then the trailer.
  std::vector<uint8_t> gif = {'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0, 0x80, 0, 0,
                              0xFF, 0xFF, 0xFF, 0, 0, 0,
                              0x2C, 0, 0, 0, 0, 1, 0, 1, 0, 0, 2, 2, 0x44, 0x01, 0, 0x3B};
  Image img;
  DecodeResult r = decode(gif, img);
  INFO(r.message);
  REQUIRE(r.ok());
  REQUIRE((img.h == 1 && img.w == 1 && img.c == 3));
  REQUIRE(img.pixels == std::vector<uint8_t>{255, 255, 255});
  gif[6] = gif[8] = 0x20, gif[7] = gif[9] = 0x4E;  // the logical screen claims 20000x20000
  r = decode(gif, img);
  REQUIRE(r.error == ImageError::too_large);
  REQUIRE(r.message.find("GIF declares 20000x20000") != std::string::npos);
}
