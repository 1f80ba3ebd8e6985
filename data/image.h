// defines: image decoding and the per-sample transforms of the data pipeline:
//   encode_jpeg                          the JPEG writer (importer, tests)
//   decode_image, load_image_file        bytes / a file -> Image, or a DecodeResult saying
//                                        exactly what was wrong with the file (ImageError)
//   orient_image                         a photo's EXIF orientation undone (decode_image uses it)
//   resize_shorter_side, crop_flip       deterministic resampling, crop and mirror
//   ImageSpec, load_sample_uncut,        the one-call path a loader worker runs per sample:
//     augment_square_uncut, cut_window   the crop window with its margin, and the window's
//                                        place in it (InputCrop), cut out later
//   load_sample, augment_square          the same, cut on the host: the model's sample
//
// Policy: a bad file is data, not a bug. decode_image and friends never throw for one; they
// return the kind of damage and a message naming it, so the loader can skip, count and name
// the file. They throw cutrain::Error (CHECK) only for a caller's mistake (channels 2, a
// negative size, a crop outside the image).
//
// Images are uint8 HWC: pixel (y, x) channel k is pixels[(y * w + x) * c + k].
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/input.h"  // InputCrop: a window's place, as the input kernels read it

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
//   not_image  no known signature (JPEG, PNG, GIF, BMP, PGM/PPM, WebP), and stb_image does not
//              recognise it either (TGA, PSD, HDR have no fixed signature)
//   truncated  the file's own structure says more bytes should follow: a JPEG ends before its
//              end-of-image marker or inside a marker segment, a PNG inside a chunk or before
//              IEND, a WebP before the end of its RIFF container, an uncompressed BMP or a
//              binary PGM/PPM before its pixel data ends
//   corrupt    a known format whose structure is complete, but the decoder rejected it or
//              warned (bad Huffman code, bad zlib stream, impossible header values, a PGM/PPM
//              sample over its maxval); also an animated WebP (libwebp decodes stills only)
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
//  - A JPEG's EXIF orientation (phones and cameras store the sensor's rows and record how to
//    turn them) is honoured: the decoded (possibly DCT-scaled) image goes through
//    orient_image, so `out` is upright, and for orientations 5-8 its h and w are the stored
//    w and h. A missing or unreadable EXIF block means upright; it never makes a file bad.
//    (Only JPEG's EXIF is read: the EXIF chunks of PNG and WebP, rare, are not.)
//  - WebP (libwebp): lossy and lossless, with or without alpha; still images only.
//  - Binary PGM/PPM (read here): 8- or 16-bit samples scaled from 0..maxval to 0..255,
//    rounded to nearest: v8 = (v * 255 + maxval / 2) / maxval (maxval 255: unchanged).
//  - Other formats (PNG, GIF, BMP, TGA, PSD, HDR) through stb_image at full size. Palette
//    PNGs are expanded through their palette (tRNS gives alpha). 16-bit samples are rounded to
//    8 bits, not truncated: v8 = (v * 255 + 32767) / 65535, i.e. v / 257 to nearest.
//  - Alpha (PNG gray+alpha and RGBA, a palette's or a colour key's tRNS, WebP, TGA, GIF
//    transparency) is composited on black, the value the loader's padding reads as:
//    v = (v * a + 127) / 255 per channel, after the 16 -> 8 bit rounding and before any
//    channel conversion. So a fully transparent pixel is 0 whatever colour the file stored
//    under it (encoders disagree on that colour), an opaque one keeps its value.
//  - Channel conversion: RGB -> gray with the ITU-R BT.601 luma weights
//    Y = (299 R + 587 G + 114 B + 500) / 1000 (a YCbCr JPEG's own Y channel is that luma, so it
//    is used directly); gray -> RGB by replication.
//  - Deterministic: the same bytes give the same pixels on any thread, every time.
// Never throws for a bad file; on failure `out` is left empty (h = w = c = 0).
DecodeResult decode_image(const uint8_t* bytes, size_t n, int channels, int min_side,
                          int64_t max_pixels, Image& out);

// Reads a whole file. Failure to open or read it (no such file, a directory, no permission)
// is ImageError::missing, with the OS error in the message.
DecodeResult read_file_bytes(const std::string& path, std::vector<uint8_t>& bytes);

// read_file_bytes, then decode_image (an empty file is ImageError::empty).
DecodeResult load_image_file(const std::string& path, int channels, int min_side,
                             int64_t max_pixels, Image& out);

// ---- transforms ------------------------------------------------------------------------------

// Turns an image stored with EXIF orientation `orientation` (1..8) upright, in place. The
// standard describes each value by where the stored row 0 and column 0 belong on the upright
// image; undoing it, out(y, x) = in(sy, sx) with (H, W the stored size):
//   1  row 0 top,    col 0 left     as stored                 sy = y,          sx = x
//   2  row 0 top,    col 0 right    mirrored left-right       sy = y,          sx = W - 1 - x
//   3  row 0 bottom, col 0 right    turned 180 degrees        sy = H - 1 - y,  sx = W - 1 - x
//   4  row 0 bottom, col 0 left     mirrored top-bottom       sy = H - 1 - y,  sx = x
//   5  row 0 left,   col 0 top      transposed                sy = x,          sx = y
//   6  row 0 right,  col 0 top      turned 90 degrees clockwise  sy = H - 1 - x, sx = y
//   7  row 0 right,  col 0 bottom   transverse                sy = H - 1 - x,  sx = W - 1 - y
//   8  row 0 left,   col 0 bottom   turned 90 degrees anticlockwise  sy = x,   sx = W - 1 - y
// (the middle column: what is done to the stored image to make it upright). 5-8 swap h and w.
// A pure permutation of pixels: exact, and 1 costs nothing. Throws (CHECK) outside 1..8.
void orient_image(Image& img, int orientation);

// Scales `in` so that its shorter side becomes `target`, keeping the aspect ratio (the longer
// side is rounded to the nearest integer, at least 1). Each axis is resampled on its own:
//  - shrinking: area averaging, each output pixel the exact mean of the input area it covers
//    (fractional pixels weighted by their overlap);
//  - enlarging: bilinear with pixel centres aligned ((i + 0.5) * in / out - 0.5, clamped);
//  - equal: a copy.
// The arithmetic is integer and exact, rounded once at the end (half up), so the result is
// the same on every machine and can be checked by hand.
void resize_shorter_side(const Image& in, int target, Image& out);

// Copies the size x size window whose top-left corner is (y0, x0), mirrored left-right when
// flip, into out (size * size * in.c bytes, HWC). The window must lie inside the image.
void crop_flip(const Image& in, int size, int y0, int x0, bool flip, uint8_t* out);

// What a sample looks like after loading: channels x size x size, cut from the image resized
// so its shorter side is `resize` (0 = size). Packs store images at resize x resize.
struct ImageSpec {
  int size = 28;
  int channels = 1;
  int resize = 0;  // shorter side before cropping; 0 = size
  bool random_crop = false;
  int pad = 0;       // random_crop only: the window may reach pad pixels beyond each edge,
                     // which read as 0 (pad-and-crop, as in CIFAR training); < size
  bool random_flip = false;
  int64_t max_pixels = 64LL << 20;
};

// Throws cutrain::Error naming the bad field: size < 1, channels not 1 or 3, resize < size,
// max_pixels < 1, pad outside [0, size).
void check_image_spec(const ImageSpec& spec);

// The crop-and-flip of one sample, from its augmentation key:
//   corner: centred ((h - size) / 2, (w - size) / 2), or with random_crop drawn from
//           r = rng_u64(aug_key, 0): y0 = (r & 0xffffffff) % (h - size + 2 pad + 1) - pad,
//           x0 = (r >> 32) % (w - size + 2 pad + 1) - pad (pad 0: inside the image);
//   flip:   random_flip and rng_u64(aug_key, 1) is odd.
struct CropPlan {
  int y0 = 0, x0 = 0;
  bool flip = false;
};
CropPlan plan_crop(int h, int w, const ImageSpec& spec, uint64_t aug_key);

// What a loader worker makes of a sample: "uncut". Not the size x size crop itself but the crop
// window with a margin of `pad` pixels on each side (random_crop; no margin otherwise), neither
// cropped nor flipped, and the window's place in it (InputCrop: top, left, flip). The input
// conversion cuts the window out on the way to the model, in the kernel that normalises
// (kernels/input.h, on the CPU and the GPU alike), so the loader's copy to a GPU carries the
// uncut bytes and the crop happens on the device. The margin sits centred on the window and
// is moved inward where it would leave the zero-padded image [-pad, h + pad): for an image of
// the crop's size (h = w = size, no --resize) the uncut sample is the whole image with its
// zero padding, the same bytes for every key, and all the randomness is in the InputCrop.
// Pixels outside the image are 0, so cutting the window out gives crop_flip's bytes exactly.
//   uncut_side(spec) = size + 2 pad with random_crop, else size (then the window is the whole
//   uncut sample: InputCrop (0, 0, flip)).
int uncut_side(const ImageSpec& spec);

// The whole per-sample path: load_image_file (decoding at a DCT scale no smaller than the
// resize target), resize_shorter_side to (resize ? resize : size), then the window plan_crop
// says, uncut: into out (uncut_side(spec)^2 * channels bytes, HWC) and window. The same key
// gives the same bytes and window.
// An image whose resize would make more than spec.max_pixels pixels (an extreme aspect
// ratio: 1 x 100000 resized to a shorter side of 28) is too_large as well, so no file makes
// it throw. With `times`, the seconds spent reading the file, decoding it and
// resizing/cropping are added to it (the loader's per-stage statistics).
struct StageTimes {
  double read_s = 0, decode_s = 0, augment_s = 0;
};
DecodeResult load_sample_uncut(const std::string& path, const ImageSpec& spec, uint64_t aug_key,
                               uint8_t* out, InputCrop& window, StageTimes* times = nullptr);

// The same on an image already decoded to in_size x in_size (an HDF5 pack entry): plan_crop,
// then the uncut sample and its window, as load_sample_uncut makes them after its resize.
void augment_square_uncut(const uint8_t* in, int in_size, int channels, const ImageSpec& spec,
                          uint64_t aug_key, uint8_t* out, InputCrop& window);

// The window cut out of an uncut sample (side x side x channels) on the host, mirrored when
// window.flip: size x size x channels bytes into out. The bytes the input kernels read.
// Throws (CHECK) unless the window lies inside.
void cut_window(const uint8_t* uncut, int side, int channels, int size, const InputCrop& window,
                uint8_t* out);

// The model's sample on the host (size x size x channels): load_sample_uncut, then cut_window.
// For the packer (size = resize, no randomness: a centred square), tests and tools; the
// loader delivers the uncut form.
DecodeResult load_sample(const std::string& path, const ImageSpec& spec, uint64_t aug_key,
                         uint8_t* out, StageTimes* times = nullptr);

// augment_square_uncut, then cut_window: plan_crop + crop_flip of the stored image.
void augment_square(const uint8_t* in, int in_size, int channels, const ImageSpec& spec,
                    uint64_t aug_key, uint8_t* out);

}  // namespace cutrain
