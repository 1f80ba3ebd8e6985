// decode_pnm: binary PGM (P5) and PPM (P6), read here. stb_image 2.27 takes samples as stored:
// it does not scale them by maxval (a PGM with maxval 15 would come out nearly black) and
// reads 16-bit samples in the machine's byte order, not the big-endian order of the format
// (0x01FF came out as 255). See image.h for the contract.
#include <climits>
#include <string>
#include <vector>

#include "data/image_decoders.h"
#include "data/image_format.h"

namespace cutrain {

DecodeResult decode_pnm(const uint8_t* b, size_t n, int channels, int64_t max_pixels,
                        Image& out) {
  auto corrupt = [](const std::string& why) {
    return DecodeResult{ImageError::corrupt, "corrupt PGM/PPM: " + why};
  };
  const PnmHeader hd = parse_pnm(b, n);
  if (!hd.valid) return corrupt("the header is not width, height and maxval as numbers");
  std::string where;
  if (!hd.complete && ends_early(ImageFormat::pnm, b, n, where))
    return {ImageError::truncated, "truncated PGM/PPM: " + where};
  const int64_t w = hd.field[0], h = hd.field[1], maxval = hd.field[2];
  if (over_cap(w, h, max_pixels)) return too_large("PGM/PPM", w, h, max_pixels);
  if (w > INT_MAX || h > INT_MAX)
    return {ImageError::too_large, "PGM/PPM declares " + std::to_string(w) + "x" +
                                       std::to_string(h) + ": a side over 2^31 - 1 pixels"};
  // (a header broken by a stray byte once made stb_image decode a height of 0: found by fuzz/)
  if (w < 1 || h < 1)
    return corrupt(std::to_string(w) + "x" + std::to_string(h) + " pixels");
  if (maxval < 1 || maxval > 65535)
    return corrupt("maxval " + std::to_string(maxval) + " is outside 1..65535");
  if (ends_early(ImageFormat::pnm, b, n, where))
    return {ImageError::truncated, "truncated PGM/PPM: " + where};
  // Samples 0..maxval (one byte, or two big-endian bytes when maxval > 255) -> 0..255,
  // rounded to nearest.
  const int c = b[1] == '6' ? 3 : 1;
  const bool wide = maxval > 255;
  const uint32_t top = uint32_t(maxval);
  std::vector<uint8_t> px(size_t(w) * size_t(h) * c);
  const uint8_t* s = b + hd.data;
  for (size_t i = 0; i < px.size(); i++) {
    const uint32_t v = wide ? uint32_t(s[2 * i]) << 8 | s[2 * i + 1] : s[i];
    if (v > top)
      return corrupt("sample " + std::to_string(v) + " of pixel " + std::to_string(i / c) +
                     " is over maxval " + std::to_string(top));
    px[i] = uint8_t((v * 255 + top / 2) / top);
  }
  convert_channels(px.data(), int(h), int(w), c, channels, out);
  return {};
}

}  // namespace cutrain
