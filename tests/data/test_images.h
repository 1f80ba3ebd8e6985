// defines: real image files for the data tests, good and bad, written by the tests themselves:
// synthetic images (gradient_image, pattern_image), encoders for the lossless formats
// (png_bytes, bmp_bytes, tga_bytes, pnm_bytes) and for CMYK (cmyk_from_rgb), crafted damage
// (truncate_half, jpeg_garbage_scan, jpeg_claiming, png_claiming, png_garbage_idat), and
// write_test_images(), one file of every kind in a folder, for the image and loader tests.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/image.h"
#include "tests/data/temp_dir.h"

namespace cutrain_test {

// Smooth, c = 1 or 3: red ramps along x, green along y, blue falls along the diagonal (gray:
// the mean of the three). What JPEG compresses best, so error bounds can be tight.
cutrain::Image gradient_image(int h, int w, int c);
// The gradient with a checkerboard of 8x8 squares (+-40) on top: edges, so that any
// misplaced pixel (a wrong crop, a missing flip, swapped channels) shows.
cutrain::Image pattern_image(int h, int w, int c);


// Lossless files (stb_image_write, and PGM/PPM by hand): they decode to exactly `img`.
std::vector<uint8_t> png_bytes(const cutrain::Image& img);
std::vector<uint8_t> bmp_bytes(const cutrain::Image& img);
std::vector<uint8_t> tga_bytes(const cutrain::Image& img);
std::vector<uint8_t> pnm_bytes(const cutrain::Image& img);  // P5 for 1 channel, P6 for 3

// RGB -> Adobe CMYK (inverted: 255 = no ink) with full black generation, the inverse of the
// decoder's R = C*K/255 up to rounding (libjpeg-turbo's rgb_to_cmyk in cmyk.h).
std::vector<uint8_t> cmyk_from_rgb(const cutrain::Image& rgb);

// --- crafted damage ---
// The first half of a file.
std::vector<uint8_t> truncate_half(const std::vector<uint8_t>& file);
// Offset of the first byte after the first SOS segment (where entropy-coded data starts).
size_t jpeg_scan_start(const std::vector<uint8_t>& jpeg);
// A JPEG with every entropy-coded byte of its scans replaced by pseudo-random bytes from
// `seed`, none of them 0xFF (so no marker appears): intact headers, EOI kept, garbage data.
std::vector<uint8_t> jpeg_garbage_scan(const std::vector<uint8_t>& jpeg, uint64_t seed);
// A baseline JPEG whose SOF0 frame header is patched to claim h x w.
std::vector<uint8_t> jpeg_claiming(const std::vector<uint8_t>& jpeg, int h, int w);
// A PNG whose IHDR is patched to claim h x w (stb_image does not check the CRC).
std::vector<uint8_t> png_claiming(const std::vector<uint8_t>& png, int h, int w);
// A PNG with its IDAT data overwritten by garbage: all chunks complete, no valid zlib stream.
std::vector<uint8_t> png_garbage_idat(const std::vector<uint8_t>& png);

struct TestFile {
  std::string kind;  // "rgb_jpeg", "gray_jpeg", ..., "truncated_jpeg", ...
  std::string path;
  cutrain::ImageError error = cutrain::ImageError::none;  // what decoding it must report
  cutrain::Image source;  // good files: the pixels that were encoded, as RGB or gray
  bool lossless = false;  // good files: decodes to exactly `source`
};

// Writes one file of every kind into dir (existing files are replaced):
//   good (48x64): rgb_jpeg, gray_jpeg, cmyk_jpeg (source: the RGB it was made from),
//                 progressive_jpeg, png, gray_png, bmp, tga, ppm, pgm
//   bad: missing (a path that does not exist), empty, truncated_jpeg (the first half of
//        rgb_jpeg), corrupt_jpeg (garbage entropy data), not_image (a text file),
//        too_large_jpeg (a real JPEG whose SOF0 claims 20000x20000), truncated_png,
//        corrupt_png (garbage IDAT)
std::vector<TestFile> write_test_images(const std::string& dir);

}  // namespace cutrain_test
