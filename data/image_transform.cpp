// orient_image, resize_shorter_side, crop_flip, plan_crop, the uncut sample (load_sample_uncut,
// augment_square_uncut, cut_window) and its cut form (load_sample, augment_square). See image.h.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>

#include "data/image.h"
#include "kernels/check.h"
#include "kernels/rng.h"

namespace cutrain {

namespace {

// One axis of a separable resampling: output i = sum over its taps of in[index] * weight,
// divided by `denom` (all integers, so the result is exact until the single final rounding).
// Output i uses taps start[i] .. start[i + 1] - 1.
struct Axis {
  std::vector<int> index;
  std::vector<uint32_t> weight;
  std::vector<int> start;
  uint64_t denom = 1;
  void add(int64_t i, int64_t w) { index.push_back(int(i)), weight.push_back(uint32_t(w)); }
  void end_output() { start.push_back(int(index.size())); }
};

// Shrinking: output pixel i covers input [i * in / out, (i + 1) * in / out). In units of
// 1/out of an input pixel that is [i * in, (i + 1) * in), and input j covers
// [j * out, (j + 1) * out), so each overlap is an integer and the weights sum to in.
// Enlarging: bilinear between the two nearest input centres, the output centre i + 0.5 sitting
// at input position (i + 0.5) * in / out - 0.5 = ((2i + 1) * in - out) / (2 * out), clamped to
// the first and last pixel. Weights are in units of 1/(2 * out).
Axis make_axis(int in, int out) {
  Axis a;
  a.end_output();
  if (in == out) {
    for (int i = 0; i < out; i++) a.add(i, 1), a.end_output();
  } else if (out < in) {
    a.denom = uint64_t(in);
    for (int64_t i = 0; i < out; i++) {
      const int64_t lo = i * in, hi = (i + 1) * in;
      for (int64_t j = lo / out; j * out < hi; j++)
        a.add(j, std::min(hi, (j + 1) * out) - std::max(lo, j * out));
      a.end_output();
    }
  } else {
    const int64_t d = 2 * int64_t(out);
    a.denom = uint64_t(d);
    for (int64_t i = 0; i < out; i++) {
      const int64_t pos = (2 * i + 1) * in - out;  // / d = the input position
      const int64_t j = pos <= 0 ? 0 : pos / d, frac = pos <= 0 ? 0 : pos % d;
      if (j >= in - 1) {
        a.add(in - 1, d);
      } else {
        a.add(j, d - frac);
        if (frac) a.add(j + 1, frac);
      }
      a.end_output();
    }
  }
  return a;
}

// Pass 1, along x: rows (in_h, ow, C) of sums, each <= 255 * ax.denom. C is a template
// parameter for 1 and 3 channels so the channel loop unrolls (0 = any, from c).
template <int C>
void horizontal_pass(const uint8_t* in, int in_h, int in_w, int c_any, const Axis& ax,
                     uint32_t* rows) {
  const int c = C ? C : c_any;
  const int ow = int(ax.start.size()) - 1;
  for (int y = 0; y < in_h; y++) {
    const uint8_t* src = in + size_t(y) * in_w * c;
    uint32_t* dst = rows + size_t(y) * ow * c;
    for (int x = 0; x < ow; x++, dst += c) {
      for (int k = 0; k < c; k++) dst[k] = 0;
      for (int t = ax.start[x]; t < ax.start[x + 1]; t++) {
        const uint8_t* p = src + size_t(ax.index[t]) * c;
        const uint32_t wt = ax.weight[t];
        for (int k = 0; k < c; k++) dst[k] += p[k] * wt;
      }
    }
  }
}

// Pass 2, along y, and the one rounding per byte: q = (sum + denom / 2) / denom. Acc is
// uint32_t when 255 * denom fits (the usual case: faster), else uint64_t. A hardware division
// per byte would cost more than the rest, so q is estimated with the reciprocal in double
// (off by at most one) and made exact by one integer comparison.
template <typename Acc>
void vertical_pass(const uint32_t* rows, size_t row_len, const Axis& ay, uint64_t denom,
                   uint8_t* out) {
  const int oh = int(ay.start.size()) - 1;
  const uint64_t half = denom / 2;
  const double inv = 1.0 / double(denom);
  std::vector<Acc> acc(row_len);
  for (int y = 0; y < oh; y++) {
    std::fill(acc.begin(), acc.end(), Acc(0));
    for (int t = ay.start[y]; t < ay.start[y + 1]; t++) {
      const uint32_t* row = rows + size_t(ay.index[t]) * row_len;
      const Acc wt = ay.weight[t];
      for (size_t i = 0; i < row_len; i++) acc[i] += Acc(row[i]) * wt;
    }
    uint8_t* dst = out + size_t(y) * row_len;
    for (size_t i = 0; i < row_len; i++) {
      const uint64_t n = uint64_t(acc[i]) + half;
      uint64_t q = uint64_t(double(n) * inv);
      if (q * denom > n) q--;
      else if ((q + 1) * denom <= n) q++;
      dst[i] = uint8_t(q);
    }
  }
}

// The window may reach `pad` pixels beyond each edge of the image; those pixels are 0 (the
// zero-padded random crop of CIFAR-style training).
void crop_flip_raw(const uint8_t* in, int h, int w, int c, int size, int y0, int x0, bool flip,
                   uint8_t* out, int pad = 0) {
  CHECK(size >= 1 && pad >= 0 && y0 >= -pad && x0 >= -pad && y0 + size <= h + pad &&
            x0 + size <= w + pad,
        "crop_flip: a " << size << "x" << size << " window at (" << y0 << ", " << x0
                        << ") does not fit in a " << h << "x" << w << " image"
                        << (pad ? " padded by " + std::to_string(pad) : std::string()));
  const bool inside = y0 >= 0 && x0 >= 0 && y0 + size <= h && x0 + size <= w;
  for (int y = 0; y < size; y++) {
    uint8_t* dst = out + size_t(y) * size * c;
    const int sy = y0 + y;
    if (sy < 0 || sy >= h) {
      std::memset(dst, 0, size_t(size) * c);
      continue;
    }
    const uint8_t* row = in + size_t(sy) * w * c;  // in[sy][0][:]
    if (inside && !flip) {
      std::memcpy(dst, row + size_t(x0) * c, size_t(size) * c);
      continue;
    }
    if (!flip) {  // zeros, the part of the row inside the image, zeros: the loop below in 3 calls
      const int a = std::max(0, -x0), b = std::min(size, w - x0);  // inside for x in [a, b)
      if (b <= a) {
        std::memset(dst, 0, size_t(size) * c);
        continue;
      }
      std::memset(dst, 0, size_t(a) * c);
      std::memcpy(dst + size_t(a) * c, row + size_t(x0 + a) * c, size_t(b - a) * c);
      std::memset(dst + size_t(b) * c, 0, size_t(size - b) * c);
      continue;
    }
    for (int x = 0; x < size; x++) {
      const int sx = x0 + (flip ? size - 1 - x : x);
      if (sx < 0 || sx >= w)
        std::memset(dst + size_t(x) * c, 0, size_t(c));
      else
        std::memcpy(dst + size_t(x) * c, row + size_t(sx) * c, size_t(c));
    }
  }
}

// The size resize_shorter_side makes of an h x w image: the shorter side becomes target, the
// longer one long * target / short rounded to nearest, at least 1 (in 64 bits: an extreme
// aspect ratio can make it larger than an int).
void resized_size(int h, int w, int target, int64_t& oh, int64_t& ow) {
  const int64_t shorter = std::min(h, w);
  auto scaled = [&](int64_t side) {
    return std::max<int64_t>(1, (2 * side * target + shorter) / (2 * shorter));
  };
  oh = h == shorter ? target : scaled(h);
  ow = h == shorter ? scaled(w) : target;
}

// Whether the resampler's sums fit for one axis: pass 1 sums in 32 bits, pass 2 sums
// (<= 255 * ax.denom * ay.denom) in 64; denom is in_side when shrinking, 2 * out_side when
// enlarging.
bool axis_in_range(int64_t in, int64_t out) {
  const int64_t denom = in == out ? 1 : out < in ? in : 2 * out;
  return denom <= int64_t(UINT32_MAX / 255);
}

// out pixel (y, x) = in pixel base + y * dy + x * dx, for every pixel of an oh x ow output
// (orient_image). When an output row runs down an input column (|dx| > 1: orientations 5-8),
// in 32x32 tiles, so that the input lines a tile reads stay in cache: on a 12-megapixel RGB
// photo (3024x4032) on the 2-core VM, 85 ms instead of 370. Rows along rows (2-4) go whole:
// tiles would cost there (60 ms whole, 80 in tiles). C = channels when 1 or 3 (a fixed-size
// copy), 0 for any other c.
template <int C>
void walk_pixels(const uint8_t* in, int64_t oh, int64_t ow, int64_t c, int64_t base,
                 int64_t dy, int64_t dx, uint8_t* out) {
  const int64_t ch = C ? C : c;
  const int64_t T = dx == 1 || dx == -1 ? std::max(oh, ow) : 32;
  for (int64_t y0 = 0; y0 < oh; y0 += T)
    for (int64_t x0 = 0; x0 < ow; x0 += T)
      for (int64_t y = y0; y < std::min(y0 + T, oh); y++) {
        const int64_t row = base + y * dy;
        uint8_t* dst = out + (y * ow + x0) * ch;
        for (int64_t x = x0; x < std::min(x0 + T, ow); x++, dst += ch) {
          const uint8_t* src = in + (row + x * dx) * ch;
          for (int64_t j = 0; j < ch; j++) dst[j] = src[j];
        }
      }
}

}  // namespace

void resize_shorter_side(const Image& in, int target, Image& out) {
  CHECK(target >= 1, "resize_shorter_side: target must be >= 1, got " << target);
  CHECK(in.h >= 1 && in.w >= 1 && in.c >= 1 &&
            in.pixels.size() == size_t(in.h) * in.w * in.c,
        "resize_shorter_side: not an image: " << in.h << "x" << in.w << "x" << in.c << " with "
                                              << in.pixels.size() << " bytes");
  int64_t oh64 = 0, ow64 = 0;
  resized_size(in.h, in.w, target, oh64, ow64);
  CHECK(axis_in_range(in.w, ow64) && axis_in_range(in.h, oh64),
        "resize_shorter_side: " << in.h << "x" << in.w << " -> " << oh64 << "x" << ow64
                                << " is beyond the resampler's range (sides up to 8M)");
  const int oh = int(oh64), ow = int(ow64), c = in.c;
  if (oh == in.h && ow == in.w) {
    if (&out != &in) out = in;
    return;
  }
  const Axis ax = make_axis(in.w, ow), ay = make_axis(in.h, oh);
  std::unique_ptr<uint32_t[]> rows(new uint32_t[size_t(in.h) * ow * c]);  // (in.h, ow, c)
  if (c == 1) horizontal_pass<1>(in.pixels.data(), in.h, in.w, c, ax, rows.get());
  else if (c == 3) horizontal_pass<3>(in.pixels.data(), in.h, in.w, c, ax, rows.get());
  else horizontal_pass<0>(in.pixels.data(), in.h, in.w, c, ax, rows.get());
  Image res;
  res.h = oh, res.w = ow, res.c = c;
  res.pixels.resize(size_t(oh) * ow * c);
  const uint64_t denom = ax.denom * ay.denom;
  if (255 * denom <= UINT32_MAX)
    vertical_pass<uint32_t>(rows.get(), size_t(ow) * c, ay, denom, res.pixels.data());
  else
    vertical_pass<uint64_t>(rows.get(), size_t(ow) * c, ay, denom, res.pixels.data());
  out = std::move(res);
}

void orient_image(Image& img, int orientation) {
  CHECK(orientation >= 1 && orientation <= 8,
        "orient_image: EXIF orientation must be 1..8, got " << orientation);
  CHECK(img.pixels.size() == size_t(img.h) * img.w * img.c,
        "orient_image: not an image: " << img.h << "x" << img.w << "x" << img.c << " with "
                                       << img.pixels.size() << " bytes");
  if (orientation == 1) return;
  const int64_t H = img.h, W = img.w, c = img.c;
  // image.h's table as a walk through the stored pixels: sy * W + sx = base + y * dy + x * dx.
  struct Walk {
    int64_t base, dy, dx;
  };
  const Walk walks[9] = {{0, 0, 0},
                         {0, W, 1},                       // 1: sy = y,         sx = x
                         {W - 1, W, -1},                  // 2: sy = y,         sx = W-1-x
                         {(H - 1) * W + W - 1, -W, -1},   // 3: sy = H-1-y,     sx = W-1-x
                         {(H - 1) * W, -W, 1},            // 4: sy = H-1-y,     sx = x
                         {0, 1, W},                       // 5: sy = x,         sx = y
                         {(H - 1) * W, 1, -W},            // 6: sy = H-1-x,     sx = y
                         {(H - 1) * W + W - 1, -1, -W},   // 7: sy = H-1-x,     sx = W-1-y
                         {W - 1, -1, W}};                 // 8: sy = x,         sx = W-1-y
  const Walk& k = walks[orientation];
  Image out;
  out.h = orientation >= 5 ? img.w : img.h;
  out.w = orientation >= 5 ? img.h : img.w;
  out.c = img.c;
  out.pixels.resize(img.pixels.size());
  const uint8_t* in = img.pixels.data();
  if (c == 1) walk_pixels<1>(in, out.h, out.w, c, k.base, k.dy, k.dx, out.pixels.data());
  else if (c == 3) walk_pixels<3>(in, out.h, out.w, c, k.base, k.dy, k.dx, out.pixels.data());
  else walk_pixels<0>(in, out.h, out.w, c, k.base, k.dy, k.dx, out.pixels.data());
  img = std::move(out);
}

void crop_flip(const Image& in, int size, int y0, int x0, bool flip, uint8_t* out) {
  CHECK(in.pixels.size() == size_t(in.h) * in.w * in.c,
        "crop_flip: not an image: " << in.h << "x" << in.w << "x" << in.c << " with "
                                    << in.pixels.size() << " bytes");
  crop_flip_raw(in.pixels.data(), in.h, in.w, in.c, size, y0, x0, flip, out);
}

void check_image_spec(const ImageSpec& spec) {
  CHECK(spec.size >= 1, "image spec: size must be >= 1, got " << spec.size);
  CHECK(spec.channels == 1 || spec.channels == 3,
        "image spec: channels must be 1 or 3, got " << spec.channels);
  CHECK(spec.resize == 0 || spec.resize >= spec.size,
        "image spec: resize (" << spec.resize << ") must be 0 or >= size (" << spec.size
                               << "): the crop is cut from the resized image");
  CHECK(spec.max_pixels >= 1, "image spec: max_pixels must be >= 1, got " << spec.max_pixels);
  CHECK(spec.pad >= 0 && spec.pad < spec.size,
        "image spec: pad must be in [0, size), got " << spec.pad << " for size " << spec.size);
}

CropPlan plan_crop(int h, int w, const ImageSpec& spec, uint64_t aug_key) {
  CHECK(h >= spec.size && w >= spec.size, "plan_crop: a " << spec.size << "x" << spec.size
                                              << " crop does not fit in " << h << "x" << w);
  CropPlan p;
  if (spec.random_crop) {
    const uint64_t r = rng_u64(aug_key, 0);
    const int pad = spec.pad;
    p.y0 = int((r & 0xffffffffu) % uint64_t(h - spec.size + 2 * pad + 1)) - pad;
    p.x0 = int((r >> 32) % uint64_t(w - spec.size + 2 * pad + 1)) - pad;
  } else {
    p.y0 = (h - spec.size) / 2;
    p.x0 = (w - spec.size) / 2;
  }
  p.flip = spec.random_flip && (rng_u64(aug_key, 1) & 1);
  return p;
}

int uncut_side(const ImageSpec& spec) {
  return spec.size + (spec.random_crop ? 2 * spec.pad : 0);
}

namespace {

// The uncut sample of an h x w image for plan p: the window grown by the margin m on each
// side, moved inward where it would leave [-m, h + m), into out (side x side x c), and the
// window's place in it.
void uncut_raw(const uint8_t* in, int h, int w, int c, const ImageSpec& spec, const CropPlan& p,
               uint8_t* out, InputCrop& window) {
  const int m = spec.random_crop ? spec.pad : 0, side = uncut_side(spec);
  // plan_crop keeps p.y0 in [-m, h - size + m], so the corner lies in [-m, h - size - m] and
  // the window in [0, 2m] inside the uncut sample.
  const int uy = std::min(std::max(p.y0 - m, -m), h - spec.size - m);
  const int ux = std::min(std::max(p.x0 - m, -m), w - spec.size - m);
  crop_flip_raw(in, h, w, c, side, uy, ux, false, out, m);
  window.top = p.y0 - uy;
  window.left = p.x0 - ux;
  window.flip = p.flip ? 1 : 0;
}

}  // namespace

void cut_window(const uint8_t* uncut, int side, int channels, int size, const InputCrop& window,
                uint8_t* out) {
  crop_flip_raw(uncut, side, side, channels, size, window.top, window.left, window.flip != 0,
                out);
}

DecodeResult load_sample_uncut(const std::string& path, const ImageSpec& spec, uint64_t aug_key,
                               uint8_t* out, InputCrop& window, StageTimes* times) {
  check_image_spec(spec);
  const int target = spec.resize ? spec.resize : spec.size;
  using clock = std::chrono::steady_clock;
  auto lap = [t = clock::now()](double* into) mutable {
    const auto now = clock::now();
    if (into) *into += std::chrono::duration<double>(now - t).count();
    t = now;
  };
  std::vector<uint8_t> bytes;
  DecodeResult r = read_file_bytes(path, bytes);
  lap(times ? &times->read_s : nullptr);
  if (!r.ok()) return r;
  Image img;
  // min_side = target: the decoder may drop DCT scales down to the target, never below it.
  r = decode_image(bytes.data(), bytes.size(), spec.channels, target, spec.max_pixels, img);
  lap(times ? &times->decode_s : nullptr);
  if (!r.ok()) return r;
  // The cap holds for the resized image too: a small file can hold a legal 3 x 65541 image,
  // which a target of 20 would make 20 x 436940 (found by fuzz/; 1 x 10^6 would be worse).
  int64_t oh = 0, ow = 0;
  resized_size(img.h, img.w, target, oh, ow);
  if (ow > spec.max_pixels / oh || !axis_in_range(img.w, ow) || !axis_in_range(img.h, oh)) {
    r.error = ImageError::too_large;
    r.message = "resizing " + std::to_string(img.h) + "x" + std::to_string(img.w) +
                " so that its shorter side is " + std::to_string(target) + " would make it " +
                std::to_string(oh) + "x" + std::to_string(ow) + ", over the cap of " +
                std::to_string(spec.max_pixels) + " pixels";
    return r;
  }
  resize_shorter_side(img, target, img);
  const CropPlan p = plan_crop(img.h, img.w, spec, aug_key);
  uncut_raw(img.pixels.data(), img.h, img.w, img.c, spec, p, out, window);
  lap(times ? &times->augment_s : nullptr);
  return r;
}

void augment_square_uncut(const uint8_t* in, int in_size, int channels, const ImageSpec& spec,
                          uint64_t aug_key, uint8_t* out, InputCrop& window) {
  check_image_spec(spec);
  CHECK(channels == spec.channels, "augment_square: the image has " << channels
                                       << " channels, the spec asks for " << spec.channels);
  const CropPlan p = plan_crop(in_size, in_size, spec, aug_key);
  uncut_raw(in, in_size, in_size, channels, spec, p, out, window);
}

DecodeResult load_sample(const std::string& path, const ImageSpec& spec, uint64_t aug_key,
                         uint8_t* out, StageTimes* times) {
  check_image_spec(spec);
  const int side = uncut_side(spec);
  std::vector<uint8_t> uncut(size_t(side) * side * size_t(spec.channels));
  InputCrop window;
  const DecodeResult r = load_sample_uncut(path, spec, aug_key, uncut.data(), window, times);
  if (r.ok()) cut_window(uncut.data(), side, spec.channels, spec.size, window, out);
  return r;
}

void augment_square(const uint8_t* in, int in_size, int channels, const ImageSpec& spec,
                    uint64_t aug_key, uint8_t* out) {
  check_image_spec(spec);
  const int side = uncut_side(spec);
  std::vector<uint8_t> uncut(size_t(side) * side * size_t(channels));
  InputCrop window;
  augment_square_uncut(in, in_size, channels, spec, aug_key, uncut.data(), window);
  cut_window(uncut.data(), side, channels, spec.size, window, out);
}

}  // namespace cutrain
