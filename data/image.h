// defines: image decoding and the per-sample transforms of the data pipeline:
//   encode_jpeg                          the JPEG writer (importer, tests)
//   decode_image, load_image_file        bytes / a file -> Image, or a DecodeResult saying
//                                        exactly what was wrong with the file (ImageError)
//
// Policy: a bad file is data, not a bug. decode_image and friends never throw for one; they
// return the kind of damage and a message naming it, so the loader can skip, count and name
// the file. They throw cutrain::Error (CHECK) only for a caller's mistake (channels 2, a
// negative size).
//
// Images are uint8 HWC: pixel (y, x) channel k is pixels[(y * w + x) * c + k].
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace cutrain {

// ---- encoding --------------------------------------------------------------------------------

// Compresses an (h, w, channels) uint8 HWC image into a JPEG file image (the bytes of a .jpg).
//   channels 1: grayscale JPEG; 3: RGB, stored as YCbCr with 4:4:4 chroma (no subsampling, so
//   the error stays small and tests can bound it); 4: CMYK, stored as Adobe YCCK. CMYK samples
//   follow the Adobe convention that decode_image assumes: stored inverted, 255 = no ink.
// quality is libjpeg's 1..100; progressive writes a progressive JPEG (same quantized
// coefficients, so it decodes to exactly the same pixels as the baseline file).
// Bad arguments throw cutrain::Error (CHECK): this is a programming error, not a bad file.
std::vector<uint8_t> encode_jpeg(const uint8_t* pixels, int h, int w, int channels,
                                 int quality = 95, bool progressive = false);

// ---- decoding --------------------------------------------------------------------------------

// What was wrong with a file. The rules (data/README.md has the long form):
//   missing    the file could not be opened or read (the OS error is in the message)
//   empty      zero bytes
//   not_image  no known signature (JPEG, PNG, GIF, BMP, PGM/PPM), and stb_image does not
//              recognise it either (TGA, PSD, HDR have no fixed signature)
//   truncated  the file's own structure says more bytes should follow: a JPEG ends before its
//              end-of-image marker or inside a marker segment, a PNG inside a chunk or before
//              IEND, an uncompressed BMP or a binary PGM/PPM before its pixel data ends
//   corrupt    a known format whose structure is complete, but the decoder rejected it or
//              warned (bad Huffman code, bad zlib stream, impossible header values)
//   too_large  the header declares more than max_pixels pixels (checked before decoding)
enum class ImageError { none, missing, empty, truncated, corrupt, not_image, too_large };

// "none", "missing", "empty", "truncated", "corrupt", "not_image", "too_large".
const char* image_error_name(ImageError e);

struct DecodeResult {
  ImageError error = ImageError::none;
  std::string message;  // empty when ok; otherwise names the problem, e.g. "truncated JPEG: ..."
  bool ok() const { return error == ImageError::none; }
};

struct Image {
  int h = 0, w = 0, c = 0;
  std::vector<uint8_t> pixels;  // (H, W, C) uint8
};

// Decodes a whole file image held in memory into `out` with `channels` channels (1 or 3).
//  - The format comes from the magic bytes, never from a file name.
//  - The declared size is checked against max_pixels (width * height of the full image)
//    before anything is allocated or decoded: a file claiming 20000x20000 costs microseconds.
//  - JPEG (libjpeg-turbo): when min_side > 0 the image is decoded with the smallest DCT
//    scaling of 1/8, 1/4, 1/2 (else 1) whose shorter side is still >= min_side, so a caller
//    that will shrink to min_side anyway decodes up to 64x fewer pixels. Grayscale, YCbCr, RGB,
//    CMYK/YCCK and progressive JPEGs are read. CMYK is taken as Adobe writes it (inverted:
//    255 = no ink; libjpeg-turbo hands the samples over as stored) so R = C*K/255, etc.
//  - Other formats (PNG, GIF, BMP, PGM/PPM, TGA) through stb_image at full size; 16-bit PNGs
//    are reduced to 8 bits and alpha is dropped.
//  - Channel conversion: RGB -> gray with the ITU-R BT.601 luma weights
//    Y = (299 R + 587 G + 114 B + 500) / 1000 (a YCbCr JPEG's own Y channel is that luma, so it
//    is used directly); gray -> RGB by replication.
// Never throws for a bad file; on failure `out` is left empty (h = w = c = 0).
DecodeResult decode_image(const uint8_t* bytes, size_t n, int channels, int min_side,
                          int64_t max_pixels, Image& out);

// Reads a whole file. Failure to open or read it (no such file, a directory, no permission)
// is ImageError::missing, with the OS error in the message.
DecodeResult read_file_bytes(const std::string& path, std::vector<uint8_t>& bytes);

// read_file_bytes, then decode_image (an empty file is ImageError::empty).
DecodeResult load_image_file(const std::string& path, int channels, int min_side,
                             int64_t max_pixels, Image& out);

}  // namespace cutrain
