// Synthetic photos (see photos.h). Every random choice is rng_u64(seed, key, j) for a key made
// from (split, index): the same image whatever thread draws it, in any order.
#include "data/photos.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "kernels/check.h"
#include "kernels/rng.h"

namespace cutrain {
namespace {

// The key of one image: its draws are rng_u64(seed, key, j) for j = 0, 1, ...
uint64_t photo_key(int split, int64_t index) {
  return (uint64_t(split) << 40) ^ uint64_t(index);
}

// Draw j of image `key` uniformly in [lo, hi] (integers) or [0, 1).
struct Draws {
  uint64_t seed, key;
  int j = 0;
  uint64_t bits() { return rng_u64(seed, key, uint64_t(j++)); }
  int between(int lo, int hi) { return lo + int(bits() % uint64_t(hi - lo + 1)); }
  double unit() { return double(bits() >> 11) * (1.0 / 9007199254740992.0); }
  double between(double lo, double hi) { return lo + (hi - lo) * unit(); }
};

void check_spec(const PhotoSetSpec& s) {
  USER_CHECK(s.train >= 1 && s.test >= 0 && s.train <= 100000 && s.test <= 100000,
             "photos: --train must be in [1, 100000] and --test in [0, 100000]; got " << s.train
                                                                                 << " and "
                                                                                 << s.test);
  USER_CHECK(s.classes >= 2 && s.classes <= 10,
             "photos: --classes must be in [2, 10] (a folder per class, named by its digit); "
             "got " << s.classes);
  USER_CHECK(s.min_side >= 16 && s.min_side <= s.max_side && s.max_side <= 4096,
             "photos: sides must satisfy 16 <= min <= max <= 4096; got " << s.min_side << ".."
                                                                          << s.max_side);
  USER_CHECK(s.min_quality >= 1 && s.min_quality <= s.max_quality && s.max_quality <= 100,
             "photos: qualities must satisfy 1 <= min <= max <= 100; got " << s.min_quality
                                                                           << ".." << s.max_quality);
}

}  // namespace

PhotoShape photo_shape(const PhotoSetSpec& spec, int split, int64_t index) {
  Draws d{spec.seed, photo_key(split, index)};
  PhotoShape p;
  p.h = d.between(spec.min_side, spec.max_side);
  p.w = d.between(spec.min_side, spec.max_side);
  p.quality = d.between(spec.min_quality, spec.max_quality);
  p.label = d.between(0, spec.classes - 1);
  return p;
}

Image make_photo(const PhotoSetSpec& spec, int split, int64_t index) {
  const PhotoShape p = photo_shape(spec, split, index);
  Draws d{spec.seed, photo_key(split, index), 4};  // after photo_shape's four draws
  const int H = p.h, W = p.w;
  Image img;
  img.h = H, img.w = W, img.c = 3;
  std::vector<float> px(size_t(H) * W * 3);  // (H,W,3), 0..255 before the grain

  // The background: colour a at the top left to colour b at the bottom right.
  float a[3], b[3];
  for (float& v : a) v = float(d.between(20.0, 235.0));
  for (float& v : b) v = float(d.between(20.0, 235.0));
  // The class's grating: angle k x 90/K degrees, a period of 6 to 24 pixels, any phase. Within
  // a quarter turn, so a left-right flip (augmentation) maps no class onto another: it turns
  // angle a into 180 - a, which no class has.
  const double angle = M_PI / 2 * p.label / spec.classes;
  const double freq = 2 * M_PI / d.between(6.0, 24.0), phase = d.between(0.0, 2 * M_PI);
  const float strength = float(d.between(18.0, 40.0));
  const double cx = std::cos(angle) * freq, cy = std::sin(angle) * freq;
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++) {
      const float t = float(x + y) / float(H + W - 2);
      const float g = strength * float(std::sin(x * cx + y * cy + phase));
      float* q = &px[(size_t(y) * W + x) * 3];
      for (int c = 0; c < 3; c++) q[c] = a[c] + (b[c] - a[c]) * t + g;
    }

  // 6 to 14 shapes over it, each blended in with a soft edge (a few pixels wide).
  const int shapes = d.between(6, 14);
  for (int k = 0; k < shapes; k++) {
    const bool ellipse = d.bits() & 1;
    const double sx = d.between(0.0, double(W)), sy = d.between(0.0, double(H));
    const double rx = d.between(0.05, 0.3) * W, ry = d.between(0.05, 0.3) * H;
    float col[3];
    for (float& v : col) v = float(d.between(0.0, 255.0));
    const double edge = d.between(1.5, 6.0);  // pixels
    const int y0 = std::max(0, int(sy - ry - edge)), y1 = std::min(H - 1, int(sy + ry + edge));
    const int x0 = std::max(0, int(sx - rx - edge)), x1 = std::min(W - 1, int(sx + rx + edge));
    for (int y = y0; y <= y1; y++)
      for (int x = x0; x <= x1; x++) {
        const double dx = (x - sx) / rx, dy = (y - sy) / ry;
        // How far inside, in pixels (negative outside): the ellipse's radial distance, or the
        // box's distance to its nearer side.
        const double inside = ellipse ? (1 - std::sqrt(dx * dx + dy * dy)) * std::min(rx, ry)
                                      : std::min(rx - std::fabs(x - sx), ry - std::fabs(y - sy));
        const float alpha = float(std::clamp(inside / edge + 0.5, 0.0, 1.0));
        if (alpha == 0) continue;
        float* q = &px[(size_t(y) * W + x) * 3];
        for (int c = 0; c < 3; c++) q[c] += (col[c] - q[c]) * alpha;
      }
  }

  // The grain: +-14 on every sample.
  const uint64_t grain_seed = d.bits();
  img.pixels.resize(px.size());
  for (size_t i = 0; i < px.size(); i++) {
    const float noise = float(int(rng_u64(grain_seed, i) % 29) - 14);
    img.pixels[i] = uint8_t(std::clamp(std::lround(px[i] + noise), 0L, 255L));
  }
  return img;
}

std::string photo_recipe(const PhotoSetSpec& s) {
  std::ostringstream os;
  os << "cutrain synthetic photos (data/photos.h), generator version 2\n"
     << "train " << s.train << "\ntest " << s.test << "\nclasses " << s.classes << "\nsides "
     << s.min_side << ".." << s.max_side << "\nquality " << s.min_quality << ".."
     << s.max_quality << "\nseed " << s.seed << "\n";
  return os.str();
}

PhotoSetSummary write_photo_set(const std::string& out_dir, const PhotoSetSpec& spec,
                                const ImageSetOptions& opt) {
  check_spec(spec);
  std::vector<ImageSetSplit> splits = {{"train", {}}, {"test", {}}};
  const int64_t counts[2] = {spec.train, spec.test};
  PhotoSetSummary sum;
  for (int s = 0; s < 2; s++)
    for (int64_t i = 0; i < counts[s]; i++) {
      const PhotoShape p = photo_shape(spec, s, i);
      splits[size_t(s)].labels.push_back(p.label);
      sum.pixels += int64_t(p.h) * p.w;
      sum.images++;
    }
  if (spec.test == 0) splits.pop_back();
  std::vector<std::string> classes;
  for (int k = 0; k < spec.classes; k++) classes.push_back("class" + std::to_string(k));
  sum.files = write_image_set(
      out_dir, classes, splits,
      [&](int s, int64_t i) {
        const Image img = make_photo(spec, s, i);
        return encode_jpeg(img.pixels.data(), img.h, img.w, 3, photo_shape(spec, s, i).quality);
      },
      photo_recipe(spec), opt);
  // The bytes from the files themselves, so that a kept set is measured too.
  namespace fs = std::filesystem;
  for (size_t s = 0; s < splits.size(); s++)
    for (size_t i = 0; i < splits[s].labels.size(); i++)
      sum.bytes += int64_t(fs::file_size(
          fs::path(out_dir) / image_set_path(splits[s].name, splits[s].labels[i], int64_t(i))));
  sum.bits_per_pixel = 8.0 * double(sum.bytes) / double(sum.pixels);
  USER_CHECK(sum.bits_per_pixel >= spec.min_bits_per_pixel,
             out_dir << ": the photos average " << sum.bits_per_pixel
                     << " bits per pixel, below the " << spec.min_bits_per_pixel
                     << " a decode-heavy workload needs: raise the qualities");
  return sum;
}

}  // namespace cutrain
