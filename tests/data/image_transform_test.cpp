// resize_shorter_side, crop_flip, plan_crop, load_sample and augment_square, and the uncut
// sample the loader delivers (augment_square_uncut, cut_window): exact values on small images
// computed by hand, and the properties the loader relies on (same key, same bytes; crops in
// range; augment_square == load_sample on the same decoded image; the window cut out of the
// uncut sample == the crop).
#include <set>

#include "data/image.h"
#include "kernels/rng.h"
#include "tests/data/test_images.h"
#include "tests/test_util.h"

using namespace cutrain;
using namespace cutrain_test;

namespace {

Image make(int h, int w, int c, std::vector<uint8_t> px) {
  Image img;
  img.h = h, img.w = w, img.c = c;
  img.pixels = std::move(px);
  REQUIRE(img.pixels.size() == size_t(h) * w * c);
  return img;
}

std::vector<uint8_t> resized(const Image& in, int target, int& h, int& w) {
  Image out;
  resize_shorter_side(in, target, out);
  h = out.h, w = out.w;
  REQUIRE(out.c == in.c);
  return out.pixels;
}

}  // namespace

TEST_CASE("resize: area averaging when shrinking, by hand") {
  int h, w;
  SUBCASE("4x4 -> 2x2: the mean of each 2x2 block") {
    const Image in = make(4, 4, 1, {0, 10, 20, 30, 40, 50, 60, 70,  //
                                    80, 90, 100, 110, 120, 130, 140, 150});
    // (0+10+40+50)/4 = 25, (20+30+60+70)/4 = 45, (80+90+120+130)/4 = 105, ... = 125
    REQUIRE(resized(in, 2, h, w) == std::vector<uint8_t>{25, 45, 105, 125});
    REQUIRE((h == 2 && w == 2));
  }
  SUBCASE("3x3 -> 2x2: fractional overlaps, weights (2, 1) / 3 and (1, 2) / 3 per axis") {
    const Image in = make(3, 3, 1, {0, 30, 60, 90, 120, 150, 180, 210, 240});
    // (0,0): [4*0 + 2*30 + 2*90 + 1*120] / 9 = 360 / 9 = 40
    // (0,1): [2*(30 + 2*60) + 1*(120 + 2*150)] / 9 = 720 / 9 = 80
    // (1,0): [1*(2*90 + 120) + 2*(2*180 + 210)] / 9 = 1440 / 9 = 160
    // (1,1): [1*(120 + 2*150) + 2*(210 + 2*240)] / 9 = 1800 / 9 = 200
    REQUIRE(resized(in, 2, h, w) == std::vector<uint8_t>{40, 80, 160, 200});
  }
  SUBCASE("one rounding at the end, half up") {
    REQUIRE(resized(make(2, 2, 1, {1, 0, 0, 0}), 1, h, w) == std::vector<uint8_t>{0});  // .25
    REQUIRE(resized(make(2, 2, 1, {1, 1, 0, 0}), 1, h, w) == std::vector<uint8_t>{1});  // .5
    REQUIRE(resized(make(2, 2, 1, {2, 1, 0, 0}), 1, h, w) == std::vector<uint8_t>{1});  // .75
  }
  SUBCASE("channels are averaged separately") {
    const Image in = make(2, 2, 3, {0, 100, 255, 4, 100, 255, 8, 100, 255, 12, 100, 255});
    REQUIRE(resized(in, 1, h, w) == std::vector<uint8_t>{6, 100, 255});
  }
}

TEST_CASE("resize: bilinear when enlarging, pixel centres aligned, by hand") {
  // 2 -> 4 along an axis: output centres at input positions -0.25, 0.25, 0.75, 1.25, so
  // weights (clamped) v0, .75 v0 + .25 v1, .25 v0 + .75 v1, v1. Rows [0, 100] and
  // [100, 200] become [0, 25, 75, 100] and [100, 125, 175, 200]; then the same along y.
  int h, w;
  const Image in = make(2, 2, 1, {0, 100, 100, 200});
  REQUIRE(resized(in, 4, h, w) == std::vector<uint8_t>{0,  25,  75,  100,  //
                                                       25, 50,  100, 125,  //
                                                       75, 100, 150, 175,  //
                                                       100, 125, 175, 200});
  REQUIRE((h == 4 && w == 4));
  // 1 -> 3: every output is the single input
  REQUIRE(resized(make(1, 1, 1, {77}), 3, h, w) == std::vector<uint8_t>(9, 77));
}

TEST_CASE("resize: the shorter side becomes the target, the longer keeps the aspect ratio") {
  struct Case {
    int h, w, target, oh, ow;
  };
  // longer = round(longer * target / shorter), half up: 5*2/3 = 3.33 -> 3; 7*2/4 = 3.5 -> 4
  for (const Case& t : {Case{3, 5, 2, 2, 3}, Case{5, 3, 2, 3, 2}, Case{4, 7, 2, 2, 4},
                        Case{6, 9, 4, 4, 6}, Case{10, 10, 3, 3, 3}, Case{2, 300, 1, 1, 150},
                        Case{3, 4, 6, 6, 8}, Case{4, 6, 4, 4, 6}}) {
    INFO(t.h << "x" << t.w << " -> shorter side " << t.target);
    int h, w;
    // a constant image stays exactly constant: the weights of every output sum to the divisor
    const std::vector<uint8_t> out = resized(make(t.h, t.w, 3, std::vector<uint8_t>(
                                                                   size_t(t.h) * t.w * 3, 201)),
                                             t.target, h, w);
    REQUIRE(h == t.oh);
    REQUIRE(w == t.ow);
    REQUIRE(out == std::vector<uint8_t>(size_t(h) * w * 3, 201));
  }
  // the output may be the input
  Image img = make(2, 2, 1, {0, 100, 100, 200});
  resize_shorter_side(img, 1, img);
  REQUIRE(img.pixels == std::vector<uint8_t>{100});
  REQUIRE_ERROR(resize_shorter_side(img, 0, img), "target must be >= 1");
  REQUIRE_ERROR(resize_shorter_side(Image(), 2, img), "not an image");
}

namespace {
// The plain definition of one axis's weight of input j in output i, over `denom`: overlap
// length when shrinking, the bilinear tent (clamped at the borders) when enlarging.
int64_t axis_weight(int64_t i, int64_t j, int64_t in, int64_t out, int64_t& denom) {
  if (in == out) return denom = 1, i == j;
  if (out < in) {
    denom = in;
    return std::max<int64_t>(0, std::min((i + 1) * in, (j + 1) * out) - std::max(i * in, j * out));
  }
  denom = 2 * out;
  const int64_t pos = std::max<int64_t>(0, (2 * i + 1) * in - out);
  const int64_t j0 = std::min(pos / denom, in - 1), frac = j0 == in - 1 ? 0 : pos % denom;
  return j == j0 ? denom - frac : j == j0 + 1 ? frac : 0;
}
}  // namespace

TEST_CASE("resize: equals the plain 2-D weighted sum with one division, on random images") {
  // out(y, x) = round_half_up(sum_ij wy(y, i) wx(x, j) in(i, j) / (denom_y denom_x)), in
  // exact integers: what the two passes, the tap tables and the reciprocal division must be.
  for (int trial = 0; trial < 24; trial++) {
    const int ih = 1 + int(rng_u64(9, trial, 0) % 23), iw = 1 + int(rng_u64(9, trial, 1) % 23);
    const int c = trial % 2 ? 3 : 1, target = 1 + int(rng_u64(9, trial, 2) % 30);
    Image in = make(ih, iw, c, std::vector<uint8_t>(size_t(ih) * iw * c));
    for (size_t i = 0; i < in.pixels.size(); i++) in.pixels[i] = uint8_t(rng_u64(10, trial, i));
    Image out;
    resize_shorter_side(in, target, out);
    INFO(ih << "x" << iw << "x" << c << " -> " << out.h << "x" << out.w);
    REQUIRE(std::min(out.h, out.w) == target);
    for (int y = 0; y < out.h; y++)
      for (int x = 0; x < out.w; x++)
        for (int k = 0; k < c; k++) {
          int64_t sum = 0, dy = 1, dx = 1;
          for (int i = 0; i < ih; i++)
            for (int j = 0; j < iw; j++)
              sum += axis_weight(y, i, ih, out.h, dy) * axis_weight(x, j, iw, out.w, dx) *
                     in.pixels[(size_t(i) * iw + j) * c + k];
          const int64_t want = (sum + dy * dx / 2) / (dy * dx);
          REQUIRE(int(out.pixels[(size_t(y) * out.w + x) * c + k]) == want);
        }
  }
}

TEST_CASE("resize: sums past 32 bits (a 4096x4200 image) take the 64-bit path, still exact") {
  // 255 * 4096 * 4200 > 2^32. Top half 10, bottom half 250; shorter side 4096 -> 2 makes each
  // output row the mean of exactly one half: 10 and 250, with 4200 -> 2 columns (2.05 -> 2).
  Image in = make(4096, 4200, 1, std::vector<uint8_t>(size_t(4096) * 4200, 10));
  std::fill(in.pixels.begin() + long(in.pixels.size() / 2), in.pixels.end(), uint8_t(250));
  int h, w;
  REQUIRE(resized(in, 2, h, w) == std::vector<uint8_t>{10, 10, 250, 250});
}

TEST_CASE("crop_flip: the window, and its mirror, by hand") {
  // 3x4 RGB, value 100 y + 10 x + k
  std::vector<uint8_t> px;
  for (int y = 0; y < 3; y++)
    for (int x = 0; x < 4; x++)
      for (int k = 0; k < 3; k++) px.push_back(uint8_t(100 * y + 10 * x + k));
  const Image in = make(3, 4, 3, px);
  std::vector<uint8_t> out(2 * 2 * 3, 0xEE);
  crop_flip(in, 2, 1, 1, false, out.data());
  REQUIRE(out == std::vector<uint8_t>{110, 111, 112, 120, 121, 122, 210, 211, 212, 220, 221, 222});
  crop_flip(in, 2, 1, 1, true, out.data());  // columns swapped, channels kept in order
  REQUIRE(out == std::vector<uint8_t>{120, 121, 122, 110, 111, 112, 220, 221, 222, 210, 211, 212});
  crop_flip(in, 2, 0, 2, false, out.data());  // the top-right corner
  REQUIRE(out == std::vector<uint8_t>{20, 21, 22, 30, 31, 32, 120, 121, 122, 130, 131, 132});
  REQUIRE_ERROR(crop_flip(in, 2, 2, 0, false, out.data()), "does not fit in a 3x4 image");
  REQUIRE_ERROR(crop_flip(in, 2, 0, 3, false, out.data()), "does not fit");
  REQUIRE_ERROR(crop_flip(in, 2, -1, 0, false, out.data()), "does not fit");
}

TEST_CASE("plan_crop: centred, or random in range and varying with the key") {
  ImageSpec spec;
  spec.size = 5;
  CropPlan p = plan_crop(9, 12, spec, 123);
  REQUIRE((p.y0 == 2 && p.x0 == 3 && !p.flip));  // (9-5)/2, (12-5)/2
  spec.random_crop = spec.random_flip = true;
  std::set<int> ys, xs;
  int flips = 0;
  for (uint64_t key = 0; key < 2000; key++) {
    p = plan_crop(9, 12, spec, key);
    REQUIRE((p.y0 >= 0 && p.y0 <= 4 && p.x0 >= 0 && p.x0 <= 7));
    REQUIRE(p.flip == bool(rng_u64(key, 1) & 1));
    const CropPlan again = plan_crop(9, 12, spec, key);
    REQUIRE((again.y0 == p.y0 && again.x0 == p.x0 && again.flip == p.flip));
    ys.insert(p.y0), xs.insert(p.x0), flips += p.flip;
  }
  REQUIRE(ys.size() == 5);  // every position is reached
  REQUIRE(xs.size() == 8);
  REQUIRE((flips > 900 && flips < 1100));
  REQUIRE_ERROR(plan_crop(4, 12, spec, 0), "a 5x5 crop does not fit in 4x12");
}

TEST_CASE("plan_crop and augment_square with pad: the window reaches past the edges, zeros there") {
  ImageSpec spec;
  spec.size = 3, spec.channels = 1, spec.random_crop = true, spec.pad = 2;
  std::set<int> ys, xs;
  for (uint64_t key = 0; key < 3000; key++) {
    const CropPlan p = plan_crop(4, 4, spec, key);
    REQUIRE((p.y0 >= -2 && p.y0 <= 3 && p.x0 >= -2 && p.x0 <= 3));
    ys.insert(p.y0), xs.insert(p.x0);
  }
  REQUIRE(ys.size() == 6);  // -2 .. 4 - 3 + 2: every position is reached
  REQUIRE(xs.size() == 6);
  // Find a key whose window starts at (-1, 2): its first row and last column are padding.
  const std::vector<uint8_t> in = {1, 2, 3, 4,  5, 6, 7, 8,  9, 10, 11, 12,  13, 14, 15, 16};
  uint64_t key = 0;
  while (!(plan_crop(4, 4, spec, key).y0 == -1 && plan_crop(4, 4, spec, key).x0 == 2)) key++;
  std::vector<uint8_t> out(9);
  augment_square(in.data(), 4, 1, spec, key, out.data());
  require_equal(doubles(out), {0, 0, 0,  3, 4, 0,  7, 8, 0});
  spec.random_flip = true;  // mirrored: the padding column comes first
  for (key = 0;; key++) {
    const CropPlan p = plan_crop(4, 4, spec, key);
    if (p.y0 == -1 && p.x0 == 2 && p.flip) break;
  }
  augment_square(in.data(), 4, 1, spec, key, out.data());
  require_equal(doubles(out), {0, 0, 0,  0, 4, 3,  0, 8, 7});
  // Without random_crop, pad does nothing: the centred window.
  spec.random_crop = spec.random_flip = false;
  const CropPlan c = plan_crop(4, 4, spec, 7);
  REQUIRE((c.y0 == 0 && c.x0 == 0));
  spec.pad = 3;
  REQUIRE_ERROR(check_image_spec(spec), "pad must be in [0, size)");
}

TEST_CASE("augment_square_uncut: the window with its margin, and the window's place in it") {
  ImageSpec spec;
  spec.size = 3, spec.channels = 1, spec.random_crop = spec.random_flip = true, spec.pad = 2;
  REQUIRE(uncut_side(spec) == 7);
  // An image of the crop's size: the uncut sample is the whole image padded by 2, whatever
  // the key; the window (top, left) = the planned corner + 2, and the flip, carry the draw.
  const std::vector<uint8_t> in3 = {1, 2, 3,  4, 5, 6,  7, 8, 9};
  std::vector<uint8_t> want(49, 0);
  for (int y = 0; y < 3; y++)
    for (int x = 0; x < 3; x++) want[size_t(y + 2) * 7 + size_t(x + 2)] = in3[size_t(y) * 3 + x];
  std::vector<uint8_t> uncut(49), cut(9), direct(9);
  for (uint64_t key = 0; key < 200; key++) {
    InputCrop w{-1, -1, -1};
    augment_square_uncut(in3.data(), 3, 1, spec, key, uncut.data(), w);
    REQUIRE(uncut == want);
    const CropPlan p = plan_crop(3, 3, spec, key);
    REQUIRE((w.top == p.y0 + 2 && w.left == p.x0 + 2 && w.flip == int(p.flip)));
    cut_window(uncut.data(), 7, 1, 3, w, cut.data());  // the window cut out = the old crop
    augment_square(in3.data(), 3, 1, spec, key, direct.data());
    REQUIRE(cut == direct);
  }
  // A larger image (8x8, as after --resize): the window grown by 2 each side, moved inward
  // where it would leave the padded image; the window anywhere in [0, 4] inside it.
  std::vector<uint8_t> in8(64);
  for (size_t i = 0; i < in8.size(); i++) in8[i] = uint8_t(i + 1);
  std::set<int> tops;
  for (uint64_t key = 0; key < 2000; key++) {
    InputCrop w;
    augment_square_uncut(in8.data(), 8, 1, spec, key, uncut.data(), w);
    const CropPlan p = plan_crop(8, 8, spec, key);
    REQUIRE((w.top >= 0 && w.top <= 4 && w.left >= 0 && w.left <= 4));
    const int uy = p.y0 - w.top, ux = p.x0 - w.left;  // the uncut sample's corner
    REQUIRE((uy == std::min(std::max(p.y0 - 2, -2), 8 - 3 - 2)));
    REQUIRE((ux == std::min(std::max(p.x0 - 2, -2), 8 - 3 - 2)));
    for (int y = 0; y < 7; y++)
      for (int x = 0; x < 7; x++) {
        const int sy = uy + y, sx = ux + x;
        const bool inside = sy >= 0 && sy < 8 && sx >= 0 && sx < 8;
        REQUIRE(uncut[size_t(y) * 7 + x] == (inside ? in8[size_t(sy) * 8 + sx] : 0));
      }
    cut_window(uncut.data(), 7, 1, 3, w, cut.data());
    augment_square(in8.data(), 8, 1, spec, key, direct.data());
    REQUIRE(cut == direct);
    tops.insert(w.top);
  }
  REQUIRE(tops.size() == 5);  // 0 .. 4: every place, edges included
  // No random crop: no margin, the centred window is the whole uncut sample.
  spec.random_crop = false;
  REQUIRE(uncut_side(spec) == 3);
  InputCrop w;
  augment_square_uncut(in8.data(), 8, 1, spec, 5, uncut.data(), w);
  REQUIRE((w.top == 0 && w.left == 0));
  require_equal(doubles(std::vector<uint8_t>(uncut.begin(), uncut.begin() + 9)),
                {19, 20, 21, 27, 28, 29, 35, 36, 37});  // rows 2-4, columns 2-4
  REQUIRE_ERROR(cut_window(uncut.data(), 3, 1, 3, InputCrop{1, 0, 0}, cut.data()),
                "does not fit in a 3x3 image");
}

TEST_CASE("image spec: bad fields are refused by name") {
  TempDir dir;
  std::vector<uint8_t> out(28 * 28 * 3);
  auto with = [](int size, int channels, int resize) {
    ImageSpec s;
    s.size = size, s.channels = channels, s.resize = resize;
    return s;
  };
  REQUIRE_ERROR(check_image_spec(with(0, 1, 0)), "size must be >= 1, got 0");
  REQUIRE_ERROR(check_image_spec(with(28, 2, 0)), "channels must be 1 or 3, got 2");
  REQUIRE_ERROR(check_image_spec(with(28, 3, 20)), "resize (20) must be 0 or >= size (28)");
  ImageSpec s;
  s.max_pixels = 0;
  REQUIRE_ERROR(check_image_spec(s), "max_pixels must be >= 1");
  // every entry point checks the spec before it touches the file
  REQUIRE_ERROR(load_sample(dir.file("x.jpg"), with(28, 2, 0), 0, out.data()), "channels");
  REQUIRE_ERROR(augment_square(out.data(), 28, 3, with(28, 3, 20), 0, out.data()), "resize");
  REQUIRE_ERROR(augment_square(out.data(), 28, 1, with(28, 3, 0), 0, out.data()),
                "the image has 1 channels, the spec asks for 3");
  REQUIRE_ERROR(augment_square(out.data(), 20, 3, with(28, 3, 0), 0, out.data()),
                "does not fit in 20x20");
}
