// defines: (internal to data/; image.h is the API) the pieces decode_image is built from
// beyond its own TurboJPEG and stb_image code:
//   decode_webp        WebP through libwebp (image_decode_webp.cpp)
//   decode_pnm         binary PGM/PPM, read here (image_decode_pnm.cpp)
//   convert_channels   the conversion every decoder ends with: gray, gray+alpha, RGB or RGBA
//                      -> 1 or 3 channels, alpha composited on black (image_decode.cpp)
//   over_cap, too_large   the pixel cap and its message
// A decoder is called by decode_image with a file that sniff_format gave its format, channels
// 1 or 3, and `out` empty; it returns what decode_image returns (image.h), leaving `out`
// empty on failure.
#pragma once
#include <cstddef>
#include <cstdint>

#include "data/image.h"

namespace cutrain {

DecodeResult decode_webp(const uint8_t* b, size_t n, int channels, int64_t max_pixels,
                         Image& out);
DecodeResult decode_pnm(const uint8_t* b, size_t n, int channels, int64_t max_pixels,
                        Image& out);

// (h, w, c) pixels, c = 1 gray, 2 gray+alpha, 3 RGB, 4 RGBA -> `out` with `channels` (1 or 3):
// alpha composited on black (v * a / 255, rounded), then BT.601 luma or replication (image.h).
void convert_channels(const uint8_t* src, int h, int w, int c, int channels, Image& out);

// w * h > max_pixels, for sizes a header declares (up to 2^32 each: compared by division).
bool over_cap(int64_t w, int64_t h, int64_t max_pixels);
// ImageError::too_large: "<format> declares WxH = N pixels, over the cap of M".
DecodeResult too_large(const char* format, int64_t w, int64_t h, int64_t max_pixels);

}  // namespace cutrain
