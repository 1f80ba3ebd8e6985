#include "tests/data/test_images.h"

#include <stb_image_write.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "kernels/check.h"
#include "kernels/rng.h"

using namespace cutrain;

namespace cutrain_test {

Image gradient_image(int h, int w, int c) {
  Image img;
  img.h = h, img.w = w, img.c = c;
  img.pixels.resize(size_t(h) * w * c);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      const int r = 255 * x / std::max(w - 1, 1), g = 255 * y / std::max(h - 1, 1);
      const int b = 255 - (r + g) / 2;
      uint8_t* p = &img.pixels[(size_t(y) * w + x) * c];
      if (c == 1) {
        p[0] = uint8_t((r + g + b) / 3);
      } else {
        p[0] = uint8_t(r), p[1] = uint8_t(g), p[2] = uint8_t(b);
      }
    }
  return img;
}

Image pattern_image(int h, int w, int c) {
  Image img = gradient_image(h, w, c);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      for (int k = 0; k < c; k++) {
        uint8_t& v = img.pixels[(size_t(y) * w + x) * c + k];
        v = uint8_t(std::clamp(int(v) + (((x / 8 + y / 8) & 1) ? 40 : -40), 0, 255));
      }
  return img;
}

namespace {
void append(void* ctx, void* data, int size) {
  auto* v = static_cast<std::vector<uint8_t>*>(ctx);
  v->insert(v->end(), static_cast<uint8_t*>(data), static_cast<uint8_t*>(data) + size);
}
}  // namespace

std::vector<uint8_t> png_bytes(const Image& img) {
  std::vector<uint8_t> out;
  CHECK(stbi_write_png_to_func(append, &out, img.w, img.h, img.c, img.pixels.data(), 0),
        "stbi_write_png failed");
  return out;
}

std::vector<uint8_t> bmp_bytes(const Image& img) {
  std::vector<uint8_t> out;
  CHECK(stbi_write_bmp_to_func(append, &out, img.w, img.h, img.c, img.pixels.data()),
        "stbi_write_bmp failed");
  return out;
}

std::vector<uint8_t> tga_bytes(const Image& img) {
  std::vector<uint8_t> out;
  CHECK(stbi_write_tga_to_func(append, &out, img.w, img.h, img.c, img.pixels.data()),
        "stbi_write_tga failed");
  return out;
}

std::vector<uint8_t> pnm_bytes(const Image& img) {
  const std::string header = std::string(img.c == 1 ? "P5" : "P6") + "\n# cutrain test\n" +
                             std::to_string(img.w) + " " + std::to_string(img.h) + "\n255\n";
  std::vector<uint8_t> out(header.begin(), header.end());
  out.insert(out.end(), img.pixels.begin(), img.pixels.end());
  return out;
}

std::vector<uint8_t> cmyk_from_rgb(const Image& rgb) {
  CHECK(rgb.c == 3, "cmyk_from_rgb needs RGB");
  std::vector<uint8_t> out(size_t(rgb.h) * rgb.w * 4);
  for (size_t i = 0; i < size_t(rgb.h) * rgb.w; i++) {
    double ink[3], k = 1.0;
    for (int j = 0; j < 3; j++) k = std::min(k, ink[j] = 1.0 - rgb.pixels[i * 3 + j] / 255.0);
    for (int j = 0; j < 3; j++) {
      const double cmy = k == 1.0 ? 0.0 : (ink[j] - k) / (1.0 - k);
      out[i * 4 + j] = uint8_t(255.0 - cmy * 255.0 + 0.5);
    }
    out[i * 4 + 3] = uint8_t(255.0 - k * 255.0 + 0.5);
  }
  return out;
}

std::vector<uint8_t> truncate_half(const std::vector<uint8_t>& file) {
  return std::vector<uint8_t>(file.begin(), file.begin() + long(file.size() / 2));
}

size_t jpeg_scan_start(const std::vector<uint8_t>& j) {
  for (size_t i = 2; i + 3 < j.size(); i++)
    if (j[i] == 0xFF && j[i + 1] == 0xDA) return i + 2 + (size_t(j[i + 2]) << 8 | j[i + 3]);
  CHECK(false, "no SOS marker");
}

std::vector<uint8_t> jpeg_garbage_scan(const std::vector<uint8_t>& jpeg, uint64_t seed) {
  std::vector<uint8_t> out = jpeg;
  // Overwrites everything between the first scan and EOI, later scan headers of a progressive
  // file included: fine for a baseline file, which has one scan.
  for (size_t i = jpeg_scan_start(jpeg); i + 2 < out.size(); i++)
    out[i] = uint8_t(rng_u64(seed, i) % 255);  // 0..254: never 0xFF
  return out;
}

std::vector<uint8_t> jpeg_claiming(const std::vector<uint8_t>& jpeg, int h, int w) {
  std::vector<uint8_t> out = jpeg;
  for (size_t i = 2; i + 8 < out.size(); i++)
    if (out[i] == 0xFF && out[i + 1] == 0xC0) {  // FF C0, length(2), precision(1), H(2), W(2)
      out[i + 5] = uint8_t(h >> 8), out[i + 6] = uint8_t(h);
      out[i + 7] = uint8_t(w >> 8), out[i + 8] = uint8_t(w);
      return out;
    }
  CHECK(false, "no SOF0 marker");
}

std::vector<uint8_t> png_claiming(const std::vector<uint8_t>& png, int h, int w) {
  std::vector<uint8_t> out = png;  // signature(8), IHDR length(4), "IHDR", width(4), height(4)
  for (int k = 0; k < 4; k++) {
    out[16 + k] = uint8_t(uint32_t(w) >> (24 - 8 * k));
    out[20 + k] = uint8_t(uint32_t(h) >> (24 - 8 * k));
  }
  return out;
}

std::vector<uint8_t> png_garbage_idat(const std::vector<uint8_t>& png) {
  std::vector<uint8_t> out = png;
  for (size_t p = 8; p + 8 <= out.size();) {
    const size_t len = size_t(out[p]) << 24 | size_t(out[p + 1]) << 16 |
                       size_t(out[p + 2]) << 8 | out[p + 3];
    if (std::string(out.begin() + long(p) + 4, out.begin() + long(p) + 8) == "IDAT") {
      for (size_t i = 0; i < len; i++) out[p + 8 + i] = uint8_t(0xFF - i % 7);
      return out;
    }
    p += 12 + len;
  }
  CHECK(false, "no IDAT chunk");
}

std::vector<TestFile> write_test_images(const std::string& dir) {
  const int h = 48, w = 64;
  const Image rgb = pattern_image(h, w, 3), gray = pattern_image(h, w, 1);
  const std::vector<uint8_t> rgb_jpeg = encode_jpeg(rgb.pixels.data(), h, w, 3);
  const std::vector<uint8_t> png = png_bytes(rgb);
  const std::vector<uint8_t> cmyk = cmyk_from_rgb(rgb);
  const std::string text = "path label\nthis is a list, not an image\n";

  std::vector<TestFile> files;
  auto add = [&](const std::string& kind, const std::string& name,
                 const std::vector<uint8_t>& bytes, ImageError error, const Image& source,
                 bool lossless) {
    TestFile f{kind, dir + "/" + name, error, source, lossless};
    write_bytes(f.path, bytes);
    files.push_back(f);
  };
  const Image none;
  add("rgb_jpeg", "rgb.jpg", rgb_jpeg, ImageError::none, rgb, false);
  add("gray_jpeg", "gray.jpg", encode_jpeg(gray.pixels.data(), h, w, 1), ImageError::none, gray,
      false);
  add("cmyk_jpeg", "cmyk.jpg", encode_jpeg(cmyk.data(), h, w, 4), ImageError::none, rgb, false);
  add("progressive_jpeg", "progressive.jpg", encode_jpeg(rgb.pixels.data(), h, w, 3, 95, true),
      ImageError::none, rgb, false);
  add("png", "rgb.png", png, ImageError::none, rgb, true);
  add("gray_png", "gray.png", png_bytes(gray), ImageError::none, gray, true);
  add("bmp", "rgb.bmp", bmp_bytes(rgb), ImageError::none, rgb, true);
  add("tga", "rgb.tga", tga_bytes(rgb), ImageError::none, rgb, true);
  add("ppm", "rgb.ppm", pnm_bytes(rgb), ImageError::none, rgb, true);
  add("pgm", "gray.pgm", pnm_bytes(gray), ImageError::none, gray, true);

  files.push_back({"missing", dir + "/no_such_file.jpg", ImageError::missing, none, false});
  std::remove(files.back().path.c_str());
  add("empty", "empty.jpg", {}, ImageError::empty, none, false);
  add("truncated_jpeg", "truncated.jpg", truncate_half(rgb_jpeg), ImageError::truncated, none,
      false);
  add("corrupt_jpeg", "corrupt.jpg", jpeg_garbage_scan(rgb_jpeg, 7), ImageError::corrupt, none,
      false);
  add("not_image", "list.jpg", std::vector<uint8_t>(text.begin(), text.end()),
      ImageError::not_image, none, false);
  add("too_large_jpeg", "huge.jpg", jpeg_claiming(rgb_jpeg, 20000, 20000), ImageError::too_large,
      none, false);
  add("truncated_png", "truncated.png", truncate_half(png), ImageError::truncated, none, false);
  add("corrupt_png", "corrupt.png", png_garbage_idat(png), ImageError::corrupt, none, false);
  return files;
}

}  // namespace cutrain_test
