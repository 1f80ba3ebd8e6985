// defines: real image files for the data tests, good and bad, written by the tests themselves:
// synthetic images (gradient_image, pattern_image), encoders for the lossless formats
// (png_bytes, bmp_bytes, tga_bytes, pnm_bytes), PNGs of any kind (png_file: 16-bit, palette,
// tRNS, alpha), WebP (webp_bytes, webp_animation), CMYK (cmyk_from_rgb), photos' EXIF
// orientation (exif_block, jpeg_with_app1, stored_as), crafted damage (truncate_half,
// jpeg_garbage_scan, jpeg_claiming, png_claiming, png_garbage_idat, webp_garbage), and
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

// Any PNG, written here (stb_image_write writes only 8-bit gray/RGB/RGBA): IHDR with this
// bit depth and colour type, PLTE and tRNS when given, one IDAT (zlib), IEND; every row with
// filter 0. `samples` holds each pixel's samples in file order (palette: the index), one
// value each, 0 .. 2^depth - 1; packed MSB first below 8 bits, big-endian at 16.
struct PngSpec {
  int w = 0, h = 0;
  int depth = 8;       // 1, 2, 4, 8, 16
  int color_type = 2;  // 0 gray, 2 RGB, 3 palette, 4 gray+alpha, 6 RGBA
  std::vector<uint16_t> samples;
  std::vector<uint8_t> palette;  // PLTE: r, g, b per entry
  std::vector<uint8_t> trns;     // tRNS, as stored: palette alphas, or a 16-bit colour key
};
std::vector<uint8_t> png_file(const PngSpec& spec);

// WebP through libwebp's encoder: img gray (written as RGB), RGB or RGBA; lossless, or lossy
// at `quality` (0..100).
std::vector<uint8_t> webp_bytes(const cutrain::Image& img, bool lossless, float quality = 90);
// An animated WebP (VP8X + ANIM + two ANMF frames), assembled by hand around the bitstream of
// a lossless still from webp_bytes (libwebp's muxer is another library).
std::vector<uint8_t> webp_animation(const std::vector<uint8_t>& still, int h, int w);

// --- a photo's EXIF orientation ---
// The payload of an EXIF APP1 segment, "Exif\0\0" + a TIFF structure, made by libexif with
// IFD0's Orientation = orientation (plus the resolution entries and an EXIF sub-IFD with a
// DateTimeOriginal, as a camera would write), in big- (Motorola) or little-endian (Intel)
// byte order.
std::vector<uint8_t> exif_block(int orientation, bool big_endian);
// The JPEG with an APP1 segment holding `payload` inserted after SOI, or after the JFIF APP0
// segment that follows it (TurboJPEG writes one; files edited after the camera have both).
std::vector<uint8_t> jpeg_with_app1(const std::vector<uint8_t>& jpeg,
                                    const std::vector<uint8_t>& payload, bool after_app0);
// What a camera stores for the upright picture `upright` when it records `orientation`,
// from the words of the EXIF standard (where the stored row 0 and column 0 lie on the upright
// picture), written here independently of orient_image.
cutrain::Image stored_as(const cutrain::Image& upright, int orientation);

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
// A WebP whose image data, from the 5th byte of its VP8 / VP8L chunk's payload on (past the
// VP8L header, inside the VP8 frame tag) to the end of the chunk, is pseudo-random bytes from
// `seed`: the RIFF structure complete, the bitstream not.
std::vector<uint8_t> webp_garbage(const std::vector<uint8_t>& webp, uint64_t seed);

struct TestFile {
  std::string kind;  // "rgb_jpeg", "gray_jpeg", ..., "truncated_jpeg", ...
  std::string path;
  cutrain::ImageError error = cutrain::ImageError::none;  // what decoding it must report
  cutrain::Image source;  // good files: the pixels that were encoded, as RGB or gray
  bool lossless = false;  // good files: decodes to exactly `source`
};

// Writes one file of every kind into dir (existing files are replaced):
//   good (48x64): rgb_jpeg, gray_jpeg, cmyk_jpeg (source: the RGB it was made from),
//                 progressive_jpeg, exif_jpeg (a phone's portrait: the upright picture,
//                 64x48, stored 48x64 with EXIF orientation 6), png, gray_png, bmp, tga, ppm,
//                 pgm, webp (lossless)
//   bad: missing (a path that does not exist), empty, truncated_jpeg (the first half of
//        rgb_jpeg), corrupt_jpeg (garbage entropy data), not_image (a text file),
//        too_large_jpeg (a real JPEG whose SOF0 claims 20000x20000), truncated_png,
//        corrupt_png (garbage IDAT), truncated_webp, corrupt_webp (webp_garbage)
std::vector<TestFile> write_test_images(const std::string& dir);

}  // namespace cutrain_test
