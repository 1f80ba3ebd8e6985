// The formats beside JPEG, from real files written here: WebP (libwebp's encoder: lossless,
// lossy, alpha, an animation; cut and damaged files), PNGs of every kind stb_image_write cannot
// make (16-bit gray and RGB, palettes with and without tRNS, gray+alpha, RGBA, colour keys;
// written by png_file), a GIF's transparency, and PGM/PPM samples scaled by their maxval (8
// and 16 bits). Each expected pixel is computed here from the rule in image.h, in floating
// point: 16 -> 8 bits is v / 257 rounded, alpha is composited on black (v * a / 255 rounded),
// gray is BT.601 luma.
#include <cmath>
#include <string>
#include <vector>

#include "data/image.h"
#include "tests/data/test_images.h"
#include "tests/test_util.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {

constexpr int64_t kCap = 64LL << 20;

DecodeResult decode(const std::vector<uint8_t>& bytes, Image& out, int channels = 3,
                    int64_t cap = kCap) {
  return decode_image(bytes.data(), bytes.size(), channels, 0, cap, out);
}

uint8_t round8(double v) { return uint8_t(std::lround(v)); }

// What decode_image must give for an image of `c` channels (1 gray, 2 gray+alpha, 3 RGB,
// 4 RGBA) of 8-bit samples: alpha composited on black, then `channels` (luma or replication).
std::vector<uint8_t> expected(const std::vector<uint8_t>& px, int c, int channels) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i < px.size(); i += size_t(c)) {
    const int colours = c == 2 || c == 4 ? c - 1 : c;
    const double a = colours < c ? px[i + size_t(c) - 1] : 255;
    uint8_t v[3];
    for (int k = 0; k < colours; k++) v[k] = round8(px[i + size_t(k)] * a / 255);
    if (colours == 1) v[1] = v[2] = v[0];
    if (channels == 3) {
      out.insert(out.end(), v, v + 3);
    } else if (colours == 1) {
      out.push_back(v[0]);
    } else {
      out.push_back(uint8_t((299 * v[0] + 587 * v[1] + 114 * v[2] + 500) / 1000));
    }
  }
  return out;
}

// Decodes `file` to 1 and to 3 channels; each must be h x w with exactly the expected pixels.
void require_pixels(const std::vector<uint8_t>& file, int h, int w,
                    const std::vector<uint8_t>& px8, int c) {
  for (int channels : {1, 3}) {
    INFO(channels << " channel(s)");
    Image img;
    const DecodeResult r = decode(file, img, channels);
    INFO(r.message);
    REQUIRE(r.ok());
    REQUIRE((img.h == h && img.w == w && img.c == channels));
    REQUIRE(img.pixels == expected(px8, c, channels));
  }
}

// Some 16-bit samples, every one different, with the values where rounding and stb_image's
// truncation (the high byte) differ: 0x01FF is 1.99 * 257.
std::vector<uint16_t> samples16(size_t n, uint64_t seed) {
  std::vector<uint16_t> v(n);
  for (size_t i = 0; i < n; i++) v[i] = uint16_t((i * 40503u + seed * 9973u) & 0xFFFF);
  v[0] = 0x01FF, v[1 % n] = 0x8000, v[2 % n] = 0xFFFF, v[3 % n] = 0;
  return v;
}

std::vector<uint8_t> rounded(const std::vector<uint16_t>& v16) {
  std::vector<uint8_t> v;
  for (uint16_t s : v16) v.push_back(round8(s / 257.0));
  return v;
}

}  // namespace

TEST_CASE("decode_image: WebP, lossless exactly, lossy closely, to 1 and 3 channels") {
  const Image rgb = pattern_image(37, 53, 3), gray = pattern_image(37, 53, 1);
  SUBCASE("lossless RGB and gray (written as RGB) are exact") {
    require_pixels(webp_bytes(rgb, true), 37, 53, rgb.pixels, 3);
    require_pixels(webp_bytes(gray, true), 37, 53, gray.pixels, 1);
  }
  SUBCASE("lossy at quality 90: close to the source") {
    // The smooth gradient (no checkerboard: lossy WebP halves the chroma resolution).
    // Measured (libwebp 1.2.4): mean 1.6, max 10. Bounds: about 2x.
    const Image smooth = gradient_image(37, 53, 3);
    const std::vector<uint8_t> file = webp_bytes(smooth, false, 90);
    Image img, again;
    REQUIRE(decode(file, img).ok());
    REQUIRE((img.h == 37 && img.w == 53 && img.c == 3));
    double sum = 0;
    int max = 0;
    for (size_t i = 0; i < img.pixels.size(); i++) {
      const int e = std::abs(int(img.pixels[i]) - int(smooth.pixels[i]));
      sum += e, max = std::max(max, e);
    }
    INFO("lossy WebP: mean abs error " << sum / double(img.pixels.size()) << ", max " << max);
    REQUIRE(sum / double(img.pixels.size()) < 3.0);
    REQUIRE(max <= 20);
    REQUIRE(decode(file, again).ok());
    REQUIRE(again.pixels == img.pixels);  // deterministic
  }
  SUBCASE("alpha is composited on black (lossless: whatever the encoder kept under a = 0)") {
    Image rgba;
    rgba.h = 19, rgba.w = 23, rgba.c = 4;
    const Image colour = pattern_image(19, 23, 3);
    for (size_t i = 0; i < size_t(19 * 23); i++) {
      rgba.pixels.insert(rgba.pixels.end(), &colour.pixels[i * 3], &colour.pixels[i * 3 + 3]);
      rgba.pixels.push_back(uint8_t(i % 5 == 0 ? 0 : i % 5 == 1 ? 255 : i * 7 % 256));
    }
    require_pixels(webp_bytes(rgba, true), 19, 23, rgba.pixels, 4);
  }
}

TEST_CASE("decode_image: a WebP cut anywhere is truncated; damage, animations and the cap") {
  const Image rgb = pattern_image(40, 56, 3);
  for (const bool lossless : {true, false}) {
    const std::vector<uint8_t> file = webp_bytes(rgb, lossless);
    INFO((lossless ? "lossless" : "lossy") << " WebP of " << file.size() << " bytes");
    int checked = 0;
    for (size_t cut = 2; cut < file.size(); cut += std::max<size_t>(1, file.size() / 400)) {
      Image img;
      const DecodeResult r = decode(std::vector<uint8_t>(file.begin(), file.begin() + long(cut)),
                                    img);
      INFO("cut to " << cut << ": " << image_error_name(r.error) << ": " << r.message);
      REQUIRE(r.error == ImageError::truncated);
      REQUIRE(r.message.rfind("truncated WebP: the data ends inside the RIFF", 0) == 0);
      REQUIRE(img.pixels.empty());
      checked++;
    }
    REQUIRE(checked > 100);
    // garbage in the bitstream, the RIFF structure complete: corrupt
    for (uint64_t seed = 0; seed < 20; seed++) {
      Image img;
      const DecodeResult r = decode(webp_garbage(file, seed), img);
      INFO("garbage, seed " << seed << ": " << image_error_name(r.error) << ": " << r.message);
      REQUIRE(r.error == ImageError::corrupt);
      REQUIRE(r.message.rfind("corrupt WebP: libwebp: ", 0) == 0);
    }
  }
  Image img;
  DecodeResult r = decode(webp_animation(webp_bytes(rgb, true), 40, 56), img);
  INFO(r.message);
  REQUIRE(r.error == ImageError::corrupt);
  REQUIRE(r.message.find("an animation; only still WebP images are read") != std::string::npos);
  // the cap, from the header: inclusive, width x height
  const std::vector<uint8_t> file = webp_bytes(rgb, true);
  REQUIRE(decode(file, img, 3, 40 * 56).ok());
  r = decode(file, img, 3, 40 * 56 - 1);
  REQUIRE(r.error == ImageError::too_large);
  REQUIRE(r.message.find("WebP declares 56x40 = 2240 pixels, over the cap of 2239") !=
          std::string::npos);
  // another RIFF file (a WAV) is not an image; "RIFF" cut short counts as a WebP cut short
  const std::string wav = std::string("RIFF\x24\0\0\0WAVEfmt ", 16) + std::string(28, '\0');
  REQUIRE(decode(std::vector<uint8_t>(wav.begin(), wav.end()), img).error ==
          ImageError::not_image);
  REQUIRE(decode({'R', 'I', 'F'}, img).error == ImageError::truncated);
}

TEST_CASE("decode_image: 16-bit PNGs are rounded to 8 bits, never truncated") {
  SUBCASE("gray, all 65536 values") {
    PngSpec p;
    p.w = p.h = 256, p.depth = 16, p.color_type = 0;
    for (uint32_t v = 0; v < 65536; v++) p.samples.push_back(uint16_t(v));
    require_pixels(png_file(p), 256, 256, rounded(p.samples), 1);
    Image img;
    REQUIRE(decode(png_file(p), img, 1).ok());
    REQUIRE(img.pixels[0x01FF] == 2);  // 511 / 257 = 1.99; the high byte would say 1
    REQUIRE(img.pixels[0x8000] == 128);
  }
  SUBCASE("RGB") {
    PngSpec p;
    p.w = 29, p.h = 17, p.depth = 16, p.color_type = 2;
    p.samples = samples16(29 * 17 * 3, 1);
    require_pixels(png_file(p), 17, 29, rounded(p.samples), 3);
  }
  SUBCASE("RGBA: rounded, then composited") {
    PngSpec p;
    p.w = 13, p.h = 11, p.depth = 16, p.color_type = 6;
    p.samples = samples16(13 * 11 * 4, 2);
    require_pixels(png_file(p), 11, 13, rounded(p.samples), 4);
  }
  SUBCASE("gray with a 16-bit colour key (tRNS): its pixels are transparent, so black") {
    PngSpec p;
    p.w = 16, p.h = 4, p.depth = 16, p.color_type = 0;
    p.samples = samples16(64, 3);
    for (size_t i = 5; i < 64; i += 7) p.samples[i] = 0x1234;
    p.trns = {0x12, 0x34};
    std::vector<uint8_t> ga;
    for (uint16_t v : p.samples)
      ga.push_back(round8(v / 257.0)), ga.push_back(v == 0x1234 ? 0 : 255);
    require_pixels(png_file(p), 4, 16, ga, 2);
  }
}

TEST_CASE("decode_image: palette PNGs, with and without tRNS, at 8 and 4 bits") {
  std::vector<uint8_t> palette;  // 16 colours, none of them gray
  for (int i = 0; i < 16; i++)
    palette.insert(palette.end(),
                   {uint8_t(i * 16 + 5), uint8_t(255 - i * 13), uint8_t(i * 7 + 40)});
  const std::vector<uint8_t> alphas = {0, 255, 128, 1, 254, 64, 200};  // tRNS may be shorter:
                                                                      // the rest are opaque
  for (int depth : {8, 4})
    for (bool trns : {false, true}) {
      INFO(depth << "-bit palette" << (trns ? " with tRNS" : ""));
      PngSpec p;
      p.w = 21, p.h = 9, p.depth = depth, p.color_type = 3;  // 21 x 4 bits: a padded last byte
      p.palette = palette;
      if (trns) p.trns = alphas;
      std::vector<uint8_t> rgba;
      for (int i = 0; i < 21 * 9; i++) {
        const int index = (i * 5 + i / 21) % 16;
        p.samples.push_back(uint16_t(index));
        rgba.insert(rgba.end(), &palette[size_t(index) * 3], &palette[size_t(index) * 3 + 3]);
        rgba.push_back(trns && size_t(index) < alphas.size() ? alphas[size_t(index)] : 255);
      }
      require_pixels(png_file(p), 9, 21, rgba, 4);
    }
}

TEST_CASE("decode_image: alpha PNGs (gray+alpha, RGBA, colour keys) and TGA are on black") {
  const Image colour = pattern_image(15, 22, 3);
  std::vector<uint8_t> alpha;
  for (int i = 0; i < 15 * 22; i++)  // transparent, opaque, and two levels in between
    alpha.push_back(uint8_t(i % 4 == 0 ? 0 : i % 4 == 1 ? 255 : i * 37));
  SUBCASE("gray+alpha, 8-bit") {
    PngSpec p;
    p.w = 22, p.h = 15, p.color_type = 4;
    std::vector<uint8_t> ga;
    for (size_t i = 0; i < alpha.size(); i++) {
      ga.push_back(colour.pixels[i * 3]), ga.push_back(alpha[i]);
      p.samples.push_back(colour.pixels[i * 3]), p.samples.push_back(alpha[i]);
    }
    require_pixels(png_file(p), 15, 22, ga, 2);
  }
  SUBCASE("RGBA, 8-bit, and the same pixels as a 32-bit TGA") {
    Image rgba;
    rgba.h = 15, rgba.w = 22, rgba.c = 4;
    PngSpec p;
    p.w = 22, p.h = 15, p.color_type = 6;
    for (size_t i = 0; i < alpha.size(); i++) {
      for (int k = 0; k < 3; k++) rgba.pixels.push_back(colour.pixels[i * 3 + size_t(k)]);
      rgba.pixels.push_back(alpha[i]);
    }
    p.samples.assign(rgba.pixels.begin(), rgba.pixels.end());
    require_pixels(png_file(p), 15, 22, rgba.pixels, 4);
    require_pixels(png_bytes(rgba), 15, 22, rgba.pixels, 4);  // stb_image_write's PNG
    require_pixels(tga_bytes(rgba), 15, 22, rgba.pixels, 4);
  }
  SUBCASE("RGB with a colour key: exactly the pixels of that colour turn black") {
    PngSpec p;
    p.w = 22, p.h = 15, p.color_type = 2;
    p.samples.assign(colour.pixels.begin(), colour.pixels.end());
    const uint8_t* key = &colour.pixels[7 * 3];
    p.trns = {0, key[0], 0, key[1], 0, key[2]};
    std::vector<uint8_t> rgba;
    int keyed = 0;
    for (size_t i = 0; i < alpha.size(); i++) {
      const uint8_t* px = &colour.pixels[i * 3];
      const bool is_key = px[0] == key[0] && px[1] == key[1] && px[2] == key[2];
      keyed += is_key;
      rgba.insert(rgba.end(), px, px + 3);
      rgba.push_back(is_key ? 0 : 255);
    }
    REQUIRE(keyed >= 1);
    require_pixels(png_file(p), 15, 22, rgba, 4);
  }
  SUBCASE("1-bit gray: 0 and 255") {
    PngSpec p;
    p.w = 11, p.h = 3, p.depth = 1, p.color_type = 0;
    std::vector<uint8_t> gray;
    for (int i = 0; i < 33; i++)
      p.samples.push_back(uint16_t(i % 3 == 0)), gray.push_back(i % 3 == 0 ? 255 : 0);
    require_pixels(png_file(p), 3, 11, gray, 1);
  }
}

TEST_CASE("decode_image: a GIF's transparent colour is black") {
  // image_decode_test.cpp's one white pixel (index 0 of a white, black colour table), with a
  // graphic control extension before it: flags 1 (a transparent index), index 0.
  std::vector<uint8_t> gif = {'G', 'I', 'F', '8', '9', 'a', 1, 0, 1, 0, 0x80, 0, 0,
                              0xFF, 0xFF, 0xFF, 0, 0, 0,
                              0x2C, 0, 0, 0, 0, 1, 0, 1, 0, 0, 2, 2, 0x44, 0x01, 0, 0x3B};
  Image img;
  REQUIRE(decode(gif, img).ok());
  REQUIRE(img.pixels == std::vector<uint8_t>{255, 255, 255});
  const std::vector<uint8_t> transparent_0 = {0x21, 0xF9, 4, 0x01, 0, 0, 0, 0};
  gif.insert(gif.begin() + 19, transparent_0.begin(), transparent_0.end());
  const DecodeResult r = decode(gif, img);
  INFO(r.message);
  REQUIRE(r.ok());
  REQUIRE(img.pixels == std::vector<uint8_t>{0, 0, 0});
}

TEST_CASE("decode_image: PGM/PPM samples are scaled by their maxval, 8 and 16 bits") {
  auto pnm = [](const std::string& magic, int w, int h, int maxval,
                const std::vector<uint16_t>& samples) {
    const std::string header = magic + "\n" + std::to_string(w) + " " + std::to_string(h) +
                               "\n" + std::to_string(maxval) + "\n";
    std::vector<uint8_t> b(header.begin(), header.end());
    for (uint16_t s : samples) {
      if (maxval > 255) b.push_back(uint8_t(s >> 8));  // big-endian
      b.push_back(uint8_t(s));
    }
    return b;
  };
  auto scaled = [](const std::vector<uint16_t>& samples, int maxval) {
    std::vector<uint8_t> v;
    for (uint16_t s : samples) v.push_back(uint8_t(std::floor(s * 255.0 / maxval + 0.5)));
    return v;
  };
  SUBCASE("8-bit PGM, maxval 15: 0..15 -> 0..255 in steps of 17") {
    std::vector<uint16_t> s;
    for (int i = 0; i < 16 * 3; i++) s.push_back(uint16_t(i % 16));
    require_pixels(pnm("P5", 16, 3, 15, s), 3, 16, scaled(s, 15), 1);
    REQUIRE(scaled(s, 15)[15] == 255);
  }
  SUBCASE("16-bit PGM, maxval 65535: every value, rounded") {
    std::vector<uint16_t> s;
    for (uint32_t v = 0; v < 65536; v++) s.push_back(uint16_t(v));
    require_pixels(pnm("P5", 256, 256, 65535, s), 256, 256, rounded(s), 1);
  }
  SUBCASE("16-bit PPM, maxval 1000 (100 is 25.5: half up)") {
    std::vector<uint16_t> s;
    for (int i = 0; i < 9 * 7 * 3; i++) s.push_back(uint16_t((i * 97) % 1001));
    s[0] = 100;
    require_pixels(pnm("P6", 9, 7, 1000, s), 7, 9, scaled(s, 1000), 3);
    REQUIRE(scaled(s, 1000)[0] == 26);
  }
  SUBCASE("no whitespace after P5, as stb_image reads it, goes to the same reader") {
    // (found by fuzz/: such a 16-bit file reached stb_image's PGM reader, which read past its
    // own buffer when asked for another channel count)
    std::vector<uint16_t> s = {1, 1000, 500, 0, 512, 768};
    std::vector<uint8_t> file = pnm("P5", 3, 2, 1000, s);
    file.erase(file.begin() + 2);  // "P5\n3 2 ..." -> "P53 2 ..."
    REQUIRE(file[2] == '3');
    require_pixels(file, 2, 3, scaled(s, 1000), 1);
    file.pop_back();
    Image img;
    REQUIRE(decode(file, img).error == ImageError::truncated);
  }
  SUBCASE("bad samples and maxvals are corrupt; a cut file is truncated") {
    Image img;
    DecodeResult r = decode(pnm("P5", 2, 2, 15, {1, 2, 3, 16}), img);
    REQUIRE(r.error == ImageError::corrupt);
    REQUIRE(r.message == "corrupt PGM/PPM: sample 16 of pixel 3 is over maxval 15");
    r = decode(pnm("P5", 2, 2, 0, {0, 0, 0, 0}), img);
    REQUIRE(r.error == ImageError::corrupt);
    REQUIRE(r.message == "corrupt PGM/PPM: maxval 0 is outside 1..65535");
    r = decode(pnm("P6", 1, 1, 70000, {1, 2, 3}), img);
    REQUIRE(r.error == ImageError::corrupt);
    REQUIRE(r.message == "corrupt PGM/PPM: maxval 70000 is outside 1..65535");
    const std::vector<uint8_t> wide = pnm("P6", 5, 4, 4095, std::vector<uint16_t>(60, 4095));
    r = decode(std::vector<uint8_t>(wide.begin(), wide.end() - 1), img);
    REQUIRE(r.error == ImageError::truncated);
    REQUIRE(r.message == "truncated PGM/PPM: the data ends inside the samples (132 bytes "
                         "declared, 131 present)");
    REQUIRE(img.pixels.empty());
  }
}
