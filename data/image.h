// defines: encode_jpeg, the JPEG writer (TurboJPEG) that the Fashion-MNIST importer and the
// tests use to make real JPEG files.
#pragma once
#include <cstdint>
#include <vector>

namespace cutrain {

// Compresses an (h, w, channels) uint8 HWC image into a JPEG file image (the bytes of a .jpg).
//   channels 1: grayscale JPEG; 3: RGB, stored as YCbCr with 4:4:4 chroma (no subsampling, so
//   the error stays small and tests can bound it); 4: CMYK, stored as Adobe YCCK. CMYK samples
//   follow the Adobe convention that decode_image assumes: stored inverted, 255 = no ink.
// quality is libjpeg's 1..100; progressive writes a progressive JPEG (same quantized
// coefficients, so it decodes to exactly the same pixels as the baseline file).
// Bad arguments throw cutrain::Error (CHECK): this is a programming error, not a bad file.
std::vector<uint8_t> encode_jpeg(const uint8_t* pixels, int h, int w, int channels,
                                 int quality = 95, bool progressive = false);

}  // namespace cutrain
