// decode_webp: WebP through libwebp: lossy (VP8) and lossless (VP8L), with or without alpha.
// See image.h for the contract, image_decoders.h for how decode_image calls it.
#include <webp/decode.h>

#include <string>
#include <vector>

#include "data/image_decoders.h"
#include "data/image_format.h"
#include "kernels/check.h"

namespace cutrain {

namespace {

const char* status_name(VP8StatusCode s) {
  switch (s) {
    case VP8_STATUS_OK: return "ok";
    case VP8_STATUS_OUT_OF_MEMORY: return "out of memory";
    case VP8_STATUS_INVALID_PARAM: return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR: return "bitstream error";
    case VP8_STATUS_UNSUPPORTED_FEATURE: return "unsupported feature";
    case VP8_STATUS_SUSPENDED: return "suspended";
    case VP8_STATUS_USER_ABORT: return "user abort";
    case VP8_STATUS_NOT_ENOUGH_DATA: return "not enough data";
  }
  return "unknown status";
}

DecodeResult truncated(const std::string& where, const std::string& why = "") {
  return {ImageError::truncated,
          "truncated WebP: " + where + (why.empty() ? "" : " (libwebp: " + why + ")")};
}

// libwebp refused the file: truncated if its RIFF container is cut short, else corrupt.
DecodeResult webp_failure(const uint8_t* b, size_t n, VP8StatusCode status) {
  std::string where;
  if (ends_early(ImageFormat::webp, b, n, where)) return truncated(where, status_name(status));
  return {ImageError::corrupt, std::string("corrupt WebP: libwebp: ") + status_name(status)};
}

}  // namespace

DecodeResult decode_webp(const uint8_t* b, size_t n, int channels, int64_t max_pixels,
                         Image& out) {
  // The headers alone, no pixel memory yet: the size, alpha, animation.
  WebPBitstreamFeatures ft;
  const VP8StatusCode header = WebPGetFeatures(b, n, &ft);
  if (header != VP8_STATUS_OK) return webp_failure(b, n, header);
  if (over_cap(ft.width, ft.height, max_pixels))
    return too_large("WebP", ft.width, ft.height, max_pixels);
  std::string where;
  if (ends_early(ImageFormat::webp, b, n, where)) return truncated(where);
  if (ft.has_animation)
    return {ImageError::corrupt, "corrupt WebP: an animation; only still WebP images are read "
                                 "(save its first frame as an image of its own)"};
  // Straight (not premultiplied) RGBA when the file has alpha: convert_channels composites
  // it on black as it does for every format.
  const int c = ft.has_alpha ? 4 : 3;
  std::vector<uint8_t> px(size_t(ft.width) * ft.height * c);
  WebPDecoderConfig config;
  CHECK(WebPInitDecoderConfig(&config), "libwebp: the header and the library differ in version");
  config.output.colorspace = ft.has_alpha ? MODE_RGBA : MODE_RGB;
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = px.data();
  config.output.u.RGBA.stride = ft.width * c;
  config.output.u.RGBA.size = px.size();
  const VP8StatusCode decoded = WebPDecode(b, n, &config);
  WebPFreeDecBuffer(&config.output);  // external memory: frees only libwebp's own bookkeeping
  if (decoded != VP8_STATUS_OK) return webp_failure(b, n, decoded);
  convert_channels(px.data(), ft.height, ft.width, c, channels, out);
  return {};
}

}  // namespace cutrain
