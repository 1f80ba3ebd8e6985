// encode_jpeg: the files it writes are standard JPEGs. They are decoded here with stb_image,
// a decoder independent of the libjpeg-turbo that wrote them, and compared with the source.
#include <stb_image.h>

#include <cstdlib>
#include <memory>

#include "data/image.h"
#include "tests/test_util.h"

using namespace cutrain;

namespace {

// A smooth image: red ramps along x, green along y, blue along the diagonal. Smooth content
// is what JPEG compresses best, so the error bound below is tight and a broken encoder (wrong
// channel order, subsampling, quality ignored) breaks it.
std::vector<uint8_t> gradient(int h, int w, int c) {
  std::vector<uint8_t> p(size_t(h) * w * c);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) {
      const int r = 255 * x / (w - 1), g = 255 * y / (h - 1), b = (r + g) / 2;
      const int rgb[3] = {r, g, 255 - b};
      for (int k = 0; k < c; k++) p[(size_t(y) * w + x) * c + k] = uint8_t(rgb[k % 3]);
    }
  return p;
}

// The number of components in the frame header (SOF0 or SOF2): 1 gray, 3 YCbCr, 4 CMYK/YCCK.
// (stbi_info reports what stb would output, 3 for CMYK, so the file is read directly.)
int sof_components(const std::vector<uint8_t>& j) {
  for (size_t i = 2; i + 9 < j.size(); i++)
    if (j[i] == 0xFF && (j[i + 1] == 0xC0 || j[i + 1] == 0xC2)) return j[i + 9];
  return -1;
}

// Each component's sampling factors (H << 4 | V) from the frame header; all 0x11 is 4:4:4.
std::vector<int> sof_sampling(const std::vector<uint8_t>& j) {
  std::vector<int> f;
  for (size_t i = 2; i + 9 < j.size(); i++)
    if (j[i] == 0xFF && (j[i + 1] == 0xC0 || j[i + 1] == 0xC2)) {
      for (int k = 0; k < j[i + 9] && i + 12 + 3 * k < j.size(); k++)
        f.push_back(j[i + 11 + 3 * k]);
      break;
    }
  return f;
}

struct StbFree {
  void operator()(unsigned char* p) const { stbi_image_free(p); }
};

// Decodes with stb_image into `want_c` channels and returns the mean and max absolute error.
void stb_error(const std::vector<uint8_t>& jpeg, const std::vector<uint8_t>& want, int h, int w,
               int want_c, double& mean, int& max) {
  int dw = 0, dh = 0, dc = 0;
  std::unique_ptr<unsigned char, StbFree> px(
      stbi_load_from_memory(jpeg.data(), int(jpeg.size()), &dw, &dh, &dc, want_c));
  const std::string why = px ? "ok" : stbi_failure_reason();
  INFO("stb_image: " << why);
  REQUIRE(px);
  REQUIRE(dw == w);
  REQUIRE(dh == h);
  double sum = 0;
  max = 0;
  for (size_t i = 0; i < want.size(); i++) {
    const int e = std::abs(int(px.get()[i]) - int(want[i]));
    sum += e;
    max = std::max(max, e);
  }
  mean = sum / double(want.size());
}

}  // namespace

TEST_CASE("encode_jpeg: RGB at quality 95, 4:4:4, decodes close to the source") {
  // Measured on this 96x128 gradient (libjpeg-turbo 2.1.5 -> stb_image): mean 0.72, max 4.
  // Why so small: quality 95 scales the standard quantization tables by 0.1 (steps 2..12),
  // and a smooth image has almost nothing in the high frequencies those steps would round
  // away. The bounds, mean < 1 and max <= 8, leave about 2x margin.
  const int h = 96, w = 128;
  const std::vector<uint8_t> src = gradient(h, w, 3);
  const std::vector<uint8_t> jpeg = encode_jpeg(src.data(), h, w, 3);
  REQUIRE(jpeg.size() > 4);
  REQUIRE((jpeg[0] == 0xFF && jpeg[1] == 0xD8 && jpeg[2] == 0xFF));      // SOI
  REQUIRE((jpeg[jpeg.size() - 2] == 0xFF && jpeg[jpeg.size() - 1] == 0xD9));  // EOI
  REQUIRE(sof_components(jpeg) == 3);
  REQUIRE(sof_sampling(jpeg) == std::vector<int>{0x11, 0x11, 0x11});  // 4:4:4: no subsampling
  double mean = 0;
  int max = 0;
  stb_error(jpeg, src, h, w, 3, mean, max);
  INFO("RGB q95: mean abs error " << mean << ", max " << max);
  REQUIRE(mean < 1.0);
  REQUIRE(max <= 8);
  // quality is honoured: quality 10 is much smaller and much worse
  const std::vector<uint8_t> low = encode_jpeg(src.data(), h, w, 3, 10);
  REQUIRE(low.size() * 2 < jpeg.size());
  stb_error(low, src, h, w, 3, mean, max);
  REQUIRE(mean > 1.0);
}

TEST_CASE("encode_jpeg: grayscale, progressive and CMYK files decode elsewhere") {
  const int h = 40, w = 56;
  SUBCASE("grayscale: one component") {
    const std::vector<uint8_t> src = gradient(h, w, 1);
    const std::vector<uint8_t> jpeg = encode_jpeg(src.data(), h, w, 1);
    REQUIRE(sof_components(jpeg) == 1);
    double mean;
    int max;
    stb_error(jpeg, src, h, w, 1, mean, max);
    REQUIRE(mean < 1.0);
    REQUIRE(max <= 8);
  }
  SUBCASE("progressive: an SOF2 marker, same pixels") {
    const std::vector<uint8_t> src = gradient(h, w, 3);
    const std::vector<uint8_t> base = encode_jpeg(src.data(), h, w, 3, 95, false);
    const std::vector<uint8_t> prog = encode_jpeg(src.data(), h, w, 3, 95, true);
    auto has_marker = [](const std::vector<uint8_t>& j, uint8_t m) {
      for (size_t i = 0; i + 1 < j.size(); i++)
        if (j[i] == 0xFF && j[i + 1] == m) return true;
      return false;
    };
    REQUIRE(has_marker(prog, 0xC2));
    REQUIRE_FALSE(has_marker(base, 0xC2));
    double mean;
    int max;
    stb_error(prog, src, h, w, 3, mean, max);
    REQUIRE(mean < 1.0);
    REQUIRE(max <= 8);
  }
  SUBCASE("CMYK: stored inverted (Adobe), so stb's R = C*K/255 gives the colour back") {
    // RGB -> inverted CMYK with no black generation: C = R, M = G, Y = B, K = 255 (no ink).
    // A second half uses K: C = M = Y = 255 (no ink) and K = the gray level.
    const std::vector<uint8_t> rgb = gradient(h, w, 3);
    std::vector<uint8_t> cmyk(size_t(h) * w * 4), want(rgb.size());
    for (size_t p = 0; p < size_t(h) * w; p++) {
      const bool use_k = (p % w) >= size_t(w / 2);
      for (int k = 0; k < 3; k++) {
        cmyk[p * 4 + k] = use_k ? 255 : rgb[p * 3 + k];
        want[p * 3 + k] = use_k ? rgb[p * 3] : rgb[p * 3 + k];
      }
      cmyk[p * 4 + 3] = use_k ? rgb[p * 3] : 255;
    }
    const std::vector<uint8_t> jpeg = encode_jpeg(cmyk.data(), h, w, 4);
    REQUIRE(sof_components(jpeg) == 4);
    double mean;
    int max;
    stb_error(jpeg, want, h, w, 3, mean, max);
    INFO("CMYK q95 via stb_image: mean abs error " << mean << ", max " << max);
    REQUIRE(mean < 2.0);
    REQUIRE(max <= 16);
  }
}

TEST_CASE("encode_jpeg: a progressive file does not spoil the baseline files after it") {
  // Regression: a TurboJPEG 2.1.5 compressor reused after a progressive file kept its
  // optimized Huffman tables and wrote corrupt baseline files.
  const std::vector<uint8_t> src = gradient(24, 40, 3);
  const std::vector<uint8_t> before = encode_jpeg(src.data(), 24, 40, 3);
  encode_jpeg(src.data(), 24, 40, 3, 95, true);
  const std::vector<uint8_t> after = encode_jpeg(src.data(), 24, 40, 3);
  REQUIRE(after == before);
  double mean;
  int max;
  stb_error(after, src, 24, 40, 3, mean, max);
  REQUIRE(max <= 8);
}

TEST_CASE("encode_jpeg: bad arguments are refused") {
  const std::vector<uint8_t> px(64, 0);
  REQUIRE_ERROR(encode_jpeg(px.data(), 4, 4, 2), "channels must be 1 (gray), 3 (RGB) or 4");
  REQUIRE_ERROR(encode_jpeg(px.data(), 0, 4, 1), "is empty");
  REQUIRE_ERROR(encode_jpeg(px.data(), 4, 4, 1, 0), "quality must be in [1, 100]");
  REQUIRE_ERROR(encode_jpeg(px.data(), 4, 4, 1, 101), "quality must be in [1, 100]");
  REQUIRE_ERROR(encode_jpeg(nullptr, 4, 4, 1), "no pixels");
}
