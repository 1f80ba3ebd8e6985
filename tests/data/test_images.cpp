#include "tests/data/test_images.h"

#include <libexif/exif-data.h>
#include <stb_image_write.h>
#include <stdlib.h>
#include <webp/encode.h>
#include <zlib.h>

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

namespace {
void put_be32(std::vector<uint8_t>& out, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(uint8_t(v >> s));
}
void put_le(std::vector<uint8_t>& out, uint32_t v, int bytes) {
  for (int i = 0; i < bytes; i++) out.push_back(uint8_t(v >> (8 * i)));
}
void png_chunk(std::vector<uint8_t>& out, const char* type, const std::vector<uint8_t>& data) {
  put_be32(out, uint32_t(data.size()));
  const size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  put_be32(out, uint32_t(crc32(0, out.data() + start, uInt(out.size() - start))));
}
}  // namespace

std::vector<uint8_t> png_file(const PngSpec& p) {
  const int per_pixel = p.color_type == 2 ? 3 : p.color_type == 4 ? 2 : p.color_type == 6 ? 4 : 1;
  CHECK(p.samples.size() == size_t(p.w) * p.h * per_pixel, "png_file: wrong sample count");
  // Rows: a filter byte (0: none), then the samples packed MSB first (or 2 bytes each at 16).
  std::vector<uint8_t> raw;
  for (int y = 0; y < p.h; y++) {
    raw.push_back(0);
    int bits = 0;
    uint32_t acc = 0;
    for (int i = 0; i < p.w * per_pixel; i++) {
      const uint16_t v = p.samples[size_t(y) * p.w * per_pixel + i];
      CHECK(v < (1u << p.depth), "png_file: sample " << v << " over " << p.depth << " bits");
      if (p.depth == 16) {
        raw.push_back(uint8_t(v >> 8)), raw.push_back(uint8_t(v));
        continue;
      }
      acc = acc << p.depth | v, bits += p.depth;
      if (bits == 8) raw.push_back(uint8_t(acc)), acc = 0, bits = 0;
    }
    if (bits > 0) raw.push_back(uint8_t(acc << (8 - bits)));  // the row's last byte, padded
  }
  uLongf size = compressBound(uLong(raw.size()));
  std::vector<uint8_t> idat(size);
  CHECK(compress(idat.data(), &size, raw.data(), uLong(raw.size())) == Z_OK, "png_file: zlib");
  idat.resize(size);

  std::vector<uint8_t> out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  std::vector<uint8_t> ihdr;
  put_be32(ihdr, uint32_t(p.w)), put_be32(ihdr, uint32_t(p.h));
  ihdr.insert(ihdr.end(), {uint8_t(p.depth), uint8_t(p.color_type), 0, 0, 0});
  png_chunk(out, "IHDR", ihdr);
  if (!p.palette.empty()) png_chunk(out, "PLTE", p.palette);
  if (!p.trns.empty()) png_chunk(out, "tRNS", p.trns);
  png_chunk(out, "IDAT", idat);
  png_chunk(out, "IEND", {});
  return out;
}

std::vector<uint8_t> webp_bytes(const Image& img, bool lossless, float quality) {
  Image src = img;
  if (img.c == 1) {  // WebP has no gray
    src.c = 3;
    src.pixels.resize(img.pixels.size() * 3);
    for (size_t i = 0; i < img.pixels.size(); i++)
      src.pixels[3 * i] = src.pixels[3 * i + 1] = src.pixels[3 * i + 2] = img.pixels[i];
  }
  CHECK(src.c == 3 || src.c == 4, "webp_bytes: 1, 3 or 4 channels");
  uint8_t* data = nullptr;
  const int stride = src.w * src.c;
  const uint8_t* px = src.pixels.data();
  size_t n;
  if (src.c == 3)
    n = lossless ? WebPEncodeLosslessRGB(px, src.w, src.h, stride, &data)
                 : WebPEncodeRGB(px, src.w, src.h, stride, quality, &data);
  else
    n = lossless ? WebPEncodeLosslessRGBA(px, src.w, src.h, stride, &data)
                 : WebPEncodeRGBA(px, src.w, src.h, stride, quality, &data);
  CHECK(n > 0, "webp_bytes: libwebp could not encode " << src.h << "x" << src.w);
  std::vector<uint8_t> out(data, data + n);
  WebPFree(data);
  return out;
}

std::vector<uint8_t> webp_animation(const std::vector<uint8_t>& still, int h, int w) {
  // The still is RIFF(12) + "VP8L" + size + bitstream: each frame carries that chunk.
  CHECK(still.size() > 20 && std::string(still.begin() + 12, still.begin() + 16) == "VP8L",
        "webp_animation: needs a lossless still");
  const std::vector<uint8_t> frame_chunk(still.begin() + 12, still.end());
  std::vector<uint8_t> body = {'W', 'E', 'B', 'P'};
  auto chunk = [&](const char* type, const std::vector<uint8_t>& data) {
    body.insert(body.end(), type, type + 4);
    put_le(body, uint32_t(data.size()), 4);
    body.insert(body.end(), data.begin(), data.end());
    if (data.size() % 2) body.push_back(0);
  };
  std::vector<uint8_t> vp8x = {0x02, 0, 0, 0};  // flags: animation
  put_le(vp8x, uint32_t(w - 1), 3), put_le(vp8x, uint32_t(h - 1), 3);
  chunk("VP8X", vp8x);
  chunk("ANIM", {0, 0, 0, 0, 0, 0});  // background colour, loop forever
  for (int frame = 0; frame < 2; frame++) {
    std::vector<uint8_t> anmf;
    put_le(anmf, 0, 3), put_le(anmf, 0, 3);  // offset x / 2, y / 2
    put_le(anmf, uint32_t(w - 1), 3), put_le(anmf, uint32_t(h - 1), 3);
    put_le(anmf, 100, 3);  // duration, ms
    anmf.push_back(0);     // alpha-blend, no disposal
    anmf.insert(anmf.end(), frame_chunk.begin(), frame_chunk.end());
    chunk("ANMF", anmf);
  }
  std::vector<uint8_t> out = {'R', 'I', 'F', 'F'};
  put_le(out, uint32_t(body.size()), 4);
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

std::vector<uint8_t> exif_block(int orientation, bool big_endian) {
  const ExifByteOrder order = big_endian ? EXIF_BYTE_ORDER_MOTOROLA : EXIF_BYTE_ORDER_INTEL;
  ExifData* ed = exif_data_new();
  CHECK(ed != nullptr, "exif_data_new failed");
  exif_data_set_byte_order(ed, order);
  exif_data_set_data_type(ed, EXIF_DATA_TYPE_COMPRESSED);
  // An entry is added to its IFD before it is initialized: it takes the byte order from there.
  auto add = [&](ExifIfd ifd, ExifTag tag) {
    ExifEntry* e = exif_entry_new();
    exif_content_add_entry(ed->ifd[ifd], e);
    exif_entry_initialize(e, tag);  // the standard's default value (72 dpi, inches, ...)
    exif_entry_unref(e);            // the IFD holds it now
    return e;
  };
  add(EXIF_IFD_0, EXIF_TAG_X_RESOLUTION);
  add(EXIF_IFD_0, EXIF_TAG_Y_RESOLUTION);
  add(EXIF_IFD_0, EXIF_TAG_RESOLUTION_UNIT);
  exif_set_short(add(EXIF_IFD_0, EXIF_TAG_ORIENTATION)->data, order, uint16_t(orientation));
  add(EXIF_IFD_EXIF, EXIF_TAG_DATE_TIME_ORIGINAL);  // the time of the call: not compared
  unsigned char* data = nullptr;
  unsigned int size = 0;
  exif_data_save_data(ed, &data, &size);
  exif_data_unref(ed);
  CHECK(data != nullptr && size > 6, "exif_data_save_data failed");
  std::vector<uint8_t> out(data, data + size);
  free(data);
  return out;
}

std::vector<uint8_t> jpeg_with_app1(const std::vector<uint8_t>& jpeg,
                                    const std::vector<uint8_t>& payload, bool after_app0) {
  CHECK(jpeg.size() > 4 && jpeg[0] == 0xFF && jpeg[1] == 0xD8, "jpeg_with_app1: not a JPEG");
  CHECK(payload.size() + 2 <= 0xFFFF, "jpeg_with_app1: an APP1 segment holds < 64 KiB");
  size_t at = 2;
  if (after_app0) {
    CHECK(jpeg[2] == 0xFF && jpeg[3] == 0xE0, "jpeg_with_app1: no APP0 after SOI");
    at = 4 + (size_t(jpeg[4]) << 8 | jpeg[5]);
  }
  const size_t len = payload.size() + 2;
  std::vector<uint8_t> out(jpeg.begin(), jpeg.begin() + long(at));
  out.insert(out.end(), {0xFF, 0xE1, uint8_t(len >> 8), uint8_t(len)});
  out.insert(out.end(), payload.begin(), payload.end());
  out.insert(out.end(), jpeg.begin() + long(at), jpeg.end());
  return out;
}

Image stored_as(const Image& upright, int orientation) {
  // EXIF 2.3, tag 0x0112: "the 0th row represents the visual <row0> of the image, and the 0th
  // column represents the visual <col0>".
  enum Side { top, bottom, left, right };
  const Side row0[9] = {top, top, top, bottom, bottom, left, right, right, left};
  const Side col0[9] = {left, left, right, right, left, top, top, bottom, bottom};
  CHECK(orientation >= 1 && orientation <= 8, "stored_as: orientation " << orientation);
  const Side r0 = row0[orientation], c0 = col0[orientation];
  const int H = upright.h, W = upright.w, c = upright.c;
  const bool rows_across = r0 == top || r0 == bottom;  // stored rows are upright rows
  Image s;
  s.h = rows_across ? H : W, s.w = rows_across ? W : H, s.c = c;
  s.pixels.resize(upright.pixels.size());
  for (int r = 0; r < s.h; r++)
    for (int col = 0; col < s.w; col++) {
      // stored row r is r steps from side r0; stored column col is col steps from side c0
      int y = 0, x = 0;
      if (r0 == top) y = r;
      if (r0 == bottom) y = H - 1 - r;
      if (r0 == left) x = r;
      if (r0 == right) x = W - 1 - r;
      if (c0 == left) x = col;
      if (c0 == right) x = W - 1 - col;
      if (c0 == top) y = col;
      if (c0 == bottom) y = H - 1 - col;
      for (int k = 0; k < c; k++)
        s.pixels[(size_t(r) * s.w + col) * c + k] = upright.pixels[(size_t(y) * W + x) * c + k];
    }
  return s;
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

std::vector<uint8_t> webp_garbage(const std::vector<uint8_t>& webp, uint64_t seed) {
  std::vector<uint8_t> out = webp;
  for (size_t p = 12; p + 8 <= out.size();) {  // the chunks after "RIFF" size "WEBP"
    const std::string type(out.begin() + long(p), out.begin() + long(p) + 4);
    const size_t len = size_t(out[p + 4]) | size_t(out[p + 5]) << 8 |
                       size_t(out[p + 6]) << 16 | size_t(out[p + 7]) << 24;
    if (type == "VP8L" || type == "VP8 ") {
      for (size_t i = 5; i < len; i++) out[p + 8 + i] = uint8_t(rng_u64(seed, i));
      return out;
    }
    p += 8 + len + len % 2;
  }
  CHECK(false, "no VP8 / VP8L chunk");
}

std::vector<TestFile> write_test_images(const std::string& dir) {
  const int h = 48, w = 64;
  const Image rgb = pattern_image(h, w, 3), gray = pattern_image(h, w, 1);
  const std::vector<uint8_t> rgb_jpeg = encode_jpeg(rgb.pixels.data(), h, w, 3);
  const std::vector<uint8_t> png = png_bytes(rgb);
  const std::vector<uint8_t> webp = webp_bytes(rgb, true);
  const Image portrait = pattern_image(w, h, 3);  // upright 64x48; the camera stores 48x64
  const Image sensor = stored_as(portrait, 6);
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
  add("exif_jpeg", "portrait.jpg",
      jpeg_with_app1(encode_jpeg(sensor.pixels.data(), sensor.h, sensor.w, 3),
                     exif_block(6, true), false),
      ImageError::none, portrait, false);
  add("png", "rgb.png", png, ImageError::none, rgb, true);
  add("gray_png", "gray.png", png_bytes(gray), ImageError::none, gray, true);
  add("bmp", "rgb.bmp", bmp_bytes(rgb), ImageError::none, rgb, true);
  add("tga", "rgb.tga", tga_bytes(rgb), ImageError::none, rgb, true);
  add("ppm", "rgb.ppm", pnm_bytes(rgb), ImageError::none, rgb, true);
  add("pgm", "gray.pgm", pnm_bytes(gray), ImageError::none, gray, true);
  add("webp", "rgb.webp", webp, ImageError::none, rgb, true);

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
  add("truncated_webp", "truncated.webp", truncate_half(webp), ImageError::truncated, none,
      false);
  add("corrupt_webp", "corrupt.webp", webp_garbage(webp, 7), ImageError::corrupt, none, false);
  return files;
}

}  // namespace cutrain_test
