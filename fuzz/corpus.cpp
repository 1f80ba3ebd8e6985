// The seed corpus (fuzz/corpus.h): small real files of every kind the targets parse, made by
// the writers cutrain itself uses (encode_jpeg, write_pack, write_checkpoint,
// config_to_json_text, the built-in model descriptions) and by the tests' image makers.
#include "fuzz/corpus.h"

#include <zlib.h>

#include <filesystem>
#include <stdexcept>

#include "data/idx.h"
#include "data/image.h"
#include "data/image_list.h"
#include "data/pack.h"
#include "nn/model_spec.h"
#include "tests/data/test_images.h"
#include "train/checkpoint/checkpoint.h"
#include "train/setup/config.h"

namespace cutrain_fuzz {

namespace fs = std::filesystem;
using cutrain::Image;
using cutrain_test::write_bytes;
using cutrain_test::write_text;

namespace {

class Writer {
 public:
  explicit Writer(const std::string& root) : root_(root) {}

  std::string path(const std::string& target, const std::string& name) {
    fs::create_directories(root_ / target);
    return (root_ / target / name).string();
  }
  void bytes(const std::string& target, const std::string& name, const std::vector<uint8_t>& b,
             bool good) {
    seeds.push_back({target, path(target, name), good});
    write_bytes(seeds.back().path, b);
  }
  void text(const std::string& target, const std::string& name, const std::string& t, bool good) {
    bytes(target, name, std::vector<uint8_t>(t.begin(), t.end()), good);
  }
  // A file some other writer made at path(target, name).
  void made(const std::string& target, const std::string& name, bool good) {
    seeds.push_back({target, path(target, name), good});
  }

  std::vector<Seed> seeds;

 private:
  fs::path root_;
};

std::vector<uint8_t> jpeg(const Image& img, bool progressive = false) {
  return cutrain::encode_jpeg(img.pixels.data(), img.h, img.w, img.c, 90, progressive);
}

void image_seeds(Writer& w, const fs::path& scratch) {
  // Every kind the image tests use, good and damaged (all 48x64)...
  for (const cutrain_test::TestFile& f : cutrain_test::write_test_images(scratch.string())) {
    if (f.error == cutrain::ImageError::missing) continue;
    w.bytes("image_decode", fs::path(f.path).filename().string(),
            cutrain_test::read_bytes(f.path), f.error == cutrain::ImageError::none);
  }
  // ... and odd sizes: tails of the 8x8 JPEG blocks, single pixels, a portrait CMYK.
  using cutrain_test::pattern_image;
  w.bytes("image_decode", "1x1_gray.jpg", jpeg(pattern_image(1, 1, 1)), true);
  w.bytes("image_decode", "3x5_rgb.jpg", jpeg(pattern_image(3, 5, 3)), true);
  w.bytes("image_decode", "17x9_progressive.jpg", jpeg(pattern_image(17, 9, 3), true), true);
  const Image rgb = pattern_image(11, 7, 3);
  const std::vector<uint8_t> cmyk = cutrain_test::cmyk_from_rgb(rgb);
  w.bytes("image_decode", "11x7_cmyk.jpg", cutrain::encode_jpeg(cmyk.data(), 11, 7, 4), true);
  w.bytes("image_decode", "1x1.png", cutrain_test::png_bytes(pattern_image(1, 1, 3)), true);
  w.bytes("image_decode", "5x3_gray.bmp", cutrain_test::bmp_bytes(pattern_image(5, 3, 1)), true);
  w.bytes("image_decode", "2x7.ppm", cutrain_test::pnm_bytes(pattern_image(2, 7, 3)), true);
  w.bytes("image_decode", "9x1.tga", cutrain_test::tga_bytes(pattern_image(9, 1, 3)), true);
  // Photos: EXIF orientation blocks (libexif's, both byte orders, before and after JFIF; one
  // garbled: IFD0 past its block), so mutations reach the TIFF walk of jpeg_orientation.
  using cutrain_test::exif_block;
  using cutrain_test::jpeg_with_app1;
  const Image portrait = cutrain_test::stored_as(pattern_image(13, 6, 3), 6);
  const std::vector<uint8_t> stored = jpeg(portrait);
  w.bytes("image_decode", "exif6_motorola.jpg", jpeg_with_app1(stored, exif_block(6, true), false),
          true);
  w.bytes("image_decode", "exif8_intel_after_jfif.jpg",
          jpeg_with_app1(jpeg(pattern_image(5, 9, 1)), exif_block(8, false), true), true);
  std::vector<uint8_t> garbled = exif_block(3, true);
  garbled[10] = 0x7F;  // IFD0's offset, far past the block
  w.bytes("image_decode", "exif_garbled.jpg", jpeg_with_app1(stored, garbled, false), true);
  // WebP: lossless, lossy, with alpha, an animation (refused), and PNGs of every kind.
  using cutrain_test::webp_bytes;
  Image rgba = pattern_image(5, 7, 3);
  rgba.c = 4;
  rgba.pixels.clear();
  for (int i = 0; i < 35; i++)
    rgba.pixels.insert(rgba.pixels.end(), {uint8_t(i * 7), uint8_t(i * 3), uint8_t(200 - i),
                                           uint8_t(i % 3 == 0 ? 0 : i * 9)});
  w.bytes("image_decode", "6x11_lossless.webp", webp_bytes(pattern_image(6, 11, 3), true), true);
  w.bytes("image_decode", "9x4_lossy.webp", webp_bytes(pattern_image(9, 4, 3), false, 60), true);
  w.bytes("image_decode", "5x7_alpha.webp", webp_bytes(rgba, true), true);
  w.bytes("image_decode", "5x7_alpha_lossy.webp", webp_bytes(rgba, false, 50), true);
  w.bytes("image_decode", "animation.webp",
          cutrain_test::webp_animation(webp_bytes(pattern_image(3, 4, 3), true), 3, 4), false);
  w.bytes("image_decode", "5x7_rgba.png", cutrain_test::png_bytes(rgba), true);
  using cutrain_test::PngSpec;
  PngSpec p16;  // 16-bit RGB
  p16.w = 3, p16.h = 2, p16.depth = 16, p16.color_type = 2;
  for (int i = 0; i < 18; i++) p16.samples.push_back(uint16_t(i * 3851));
  w.bytes("image_decode", "3x2_16bit.png", cutrain_test::png_file(p16), true);
  PngSpec pal;  // 4-bit palette with tRNS
  pal.w = 5, pal.h = 3, pal.depth = 4, pal.color_type = 3;
  pal.palette = {255, 0, 0, 0, 255, 0, 0, 0, 255, 9, 9, 9};
  pal.trns = {0, 128};
  for (int i = 0; i < 15; i++) pal.samples.push_back(uint16_t(i % 4));
  w.bytes("image_decode", "5x3_palette_trns.png", cutrain_test::png_file(pal), true);
  PngSpec ga;  // gray + alpha
  ga.w = 4, ga.h = 2, ga.color_type = 4;
  for (int i = 0; i < 16; i++) ga.samples.push_back(uint16_t(i * 17));
  w.bytes("image_decode", "4x2_gray_alpha.png", cutrain_test::png_file(ga), true);
  // 16-bit PGM, maxval 1000: big-endian samples 1, 1000, 500, 0, 512, 768
  const std::string pgm16 = std::string("P5\n3 2\n1000\n") +
                            std::string("\x00\x01\x03\xE8\x01\xF4\x00\x00\x02\x00\x03\x00", 12);
  w.text("image_decode", "3x2_16bit.pgm", pgm16, true);
}

void list_seeds(Writer& w) {
  w.text("image_list", "spaces.txt", "a/1.jpg 0\nb/2.jpg 1\n/abs/3.jpg 2\n", true);
  w.text("image_list", "tabs_comments_crlf.txt",
         "\xEF\xBB\xBF# made by make_corpus\r\n\r\nmy cat/001.jpg\t3\r\n  ./x/../y.png\t0 \r\n"
         "#4.jpg 1\n", true);
  w.text("image_list", "bad_lines.txt", "a.jpg\nb.jpg x\nc.jpg -1\nd.jpg 1 2\n\te.jpg\t\t4\n",
         false);
  // A NUL splits the input: the list, then the classes.txt beside it (image_list_fuzz.cpp).
  w.text("image_list", "with_classes.txt",
         std::string("img0.jpg 0\nimg1.jpg 1\nimg2.jpg 2\n") + '\0' + "ant\nbee\ncat\n", true);
  w.text("image_list", "label_over_classes.txt",
         std::string("img0.jpg 0\nimg1.jpg 5\n") + '\0' + "ant\nbee\n", false);
  w.text("image_list", "names.txt", "a/1.jpg shoe\nb/2.jpg\tankle boot\n/abs/3.jpg bag\n", true);
  w.text("image_list", "names_with_classes.txt",
         std::string("img0.jpg bee\nimg1.jpg 0\nimg2.jpg cat\n") + '\0' + "ant\nbee\ncat\n", true);
  w.text("image_list", "unknown_name.txt",
         std::string("img0.jpg bee\nimg1.jpg emu\n") + '\0' + "ant\nbee\n", false);
}

void csv_seeds(Writer& w) {
  w.text("csv_list", "names_quotes_crlf_bom.csv",
         "\xEF\xBB\xBF" "id,filename,class\r\n1,a/1.jpg,shoe\r\n\r\n"
         "2,\"b/with, comma.jpg\",\"ankle boot\"\r\n3,\"say \"\"hi\"\".jpg\",bag\r\n", true);
  w.text("csv_list", "integers.csv", "image,label\na.jpg,0\n/abs/b.jpg,2\n", true);
  w.text("csv_list", "other_header.csv", "img,y\na.jpg,1\n", false);  // by index only
  w.text("csv_list", "bad_rows.csv", "path,label\na.jpg\n,cat\nb.jpg,\nc.jpg,dog\nd.jpg,4\n", false);
  w.text("csv_list", "syntax.csv", "path,label\na.jpg,1\nb\"c.jpg,2\n\"open,3\n", false);
  w.text("csv_list", "with_classes.csv",
         std::string("file,target\nimg0.jpg,bee\nimg1.jpg,2\n") + '\0' + "ant\nbee\ncat\n", true);
  w.text("csv_list", "unknown_name.csv",
         std::string("file,target\nimg0.jpg,bee\nimg1.jpg,emu\n") + '\0' + "ant\nbee\n", false);
}

// A folder of small JPEGs (sizes 12..40, gray and colour, one truncated) and its list.
cutrain::ImageList jpeg_list(const fs::path& dir, int n, int channels) {
  fs::create_directories(dir);
  cutrain::ImageList list;
  for (int i = 0; i < n; i++) {
    const Image img = cutrain_test::pattern_image(12 + (i * 7) % 29, 12 + (i * 11) % 29,
                                                  i % 3 == 0 ? 1 : channels);
    std::vector<uint8_t> b = jpeg(img);
    if (i == n - 1) b.resize(b.size() / 2);  // a bad file: the pack names it
    const std::string p = (dir / ("img" + std::to_string(i) + ".jpg")).string();
    write_bytes(p, b);
    list.samples.push_back({p, int32_t(i % 3)});
  }
  list.class_names = {"ant", "bee", "cat"};
  list.source = (dir / "list.txt").string();
  return list;
}

void pack_seeds(Writer& w, const fs::path& scratch) {
  cutrain::PackOptions opt;
  opt.threads = 1;
  opt.size = 8, opt.channels = 1;  // 4 x 8x8x1: read whole at open
  cutrain::write_pack(jpeg_list(scratch / "gray", 5, 1), w.path("pack", "small_gray.h5"), opt);
  w.made("pack", "small_gray.h5", true);
  opt.size = 20, opt.channels = 3;  // 6 x 20x20x3: over the target's 4 KiB, read per image
  cutrain::write_pack(jpeg_list(scratch / "rgb", 7, 3), w.path("pack", "rgb.h5"), opt);
  w.made("pack", "rgb.h5", true);
}

cutrain::TrainConfig config(bool adam) {
  cutrain::TrainConfig c;
  c.train = "data/train.txt";
  c.val = "data/test.txt";
  c.size = 28, c.channels = 1, c.classes = 3;
  c.mean = {0.28}, c.std = {0.35};
  c.class_names = {"ant", "bee", "cat"};
  c.model_text = cutrain::builtin_model_text(adam ? "resnet" : "default");
  if (adam) {
    c.optimizer = "adamw", c.schedule = "onecycle", c.devices = "cpu,cpu", c.accum = 2;
    c.augment = true, c.pad = 3, c.batch = 64;
    c.ema = 0.999, c.tta = "flip", c.recipe = "fmnist";  // the averages, flips and a recipe
  }
  cutrain::resolve_defaults(c);
  return c;
}

cutrain::Tensor tensor(const cutrain::Shape& shape, cutrain::DType dtype, int seed) {
  cutrain::Tensor t = cutrain::Tensor::empty(shape, dtype);
  uint8_t* p = static_cast<uint8_t*>(t.raw());
  for (size_t i = 0; i < t.bytes(); i++) p[i] = uint8_t(i * 37 + size_t(seed) * 101);
  return t;
}

void checkpoint_seeds(Writer& w) {
  using cutrain::DType;
  cutrain::Checkpoint c;
  c.step = 120, c.epoch = 2, c.cursor = {2, 7}, c.seed = 42;
  c.config_json = cutrain::config_to_json_text(config(false));
  c.tensors.emplace_back("conv1.w", tensor({4, 3, 3, 1}, DType::f32, 1));
  c.tensors.emplace_back("conv1.w.half", tensor({4, 3, 3, 1}, DType::f16, 2));
  c.tensors.emplace_back("bn1.running_var", tensor({4}, DType::f64, 3));
  c.tensors.emplace_back("counts", tensor({2, 5}, DType::i32, 4));
  c.tensors.emplace_back("step_state", tensor({}, DType::f32, 5));  // rank 0
  c.tensors.emplace_back("empty", tensor({3, 0, 2}, DType::f32, 6));
  // --ema's averages, named as the optimizer names them
  c.tensors.emplace_back("conv1.w.ema", tensor({4, 3, 3, 1}, DType::f32, 7));
  c.tensors.emplace_back("bn1.running_var.ema", tensor({4}, DType::f64, 8));
  c.scalars["loss_scale"] = 65536;
  c.scalars["best_accuracy"] = 0.875;
  c.scalars["val_ema_top1"] = 0.8875;
  cutrain::write_checkpoint(c, w.path("checkpoint", "step-00000120.h5"));
  w.made("checkpoint", "step-00000120.h5", true);
  cutrain::Checkpoint bare;  // nothing but the metadata
  bare.config_json = cutrain::config_to_json_text(config(true));
  cutrain::write_checkpoint(bare, w.path("checkpoint", "bare.h5"));
  w.made("checkpoint", "bare.h5", true);

  w.text("checkpoint_config", "default.json", cutrain::config_to_json_text(config(false)), true);
  w.text("checkpoint_config", "adamw_replicas.json", cutrain::config_to_json_text(config(true)),
         true);
  w.text("checkpoint_config", "wrong_types.json",
         "{\"size\": \"28\", \"mean\": [0.5, null], \"lr\": true, \"nope\": 1}", false);
}

void model_seeds(Writer& w) {
  for (const std::string& name : cutrain::builtin_model_names())
    w.text("model_spec", name + ".model", cutrain::builtin_model_text(name), true);
  w.text("model_spec", "every_option.model",
         "conv 16 3x5 stride=1x2 pad=1x2 bias  # every option\nbn\nrelu\n"
         "maxpool 3x3 stride=2 pad=1\nresblock 16\nresblock 24 stride=2\n"
         "conv 8 1x1\nflatten\nlinear 32 nobias\nrelu\nlinear classes\n", true);
  w.text("model_spec", "mistakes.model", "conv 32\nconvv 3x3\nlinear classes bias\n", false);
}

void idx_file(Writer& w, const std::string& name, uint32_t magic,
              const std::vector<uint32_t>& sizes, size_t n, bool gzip) {
  std::vector<uint8_t> b;
  auto put32 = [&](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(v >> s));
  };
  put32(magic);
  for (uint32_t s : sizes) put32(s);
  for (size_t i = 0; i < n; i++) b.push_back(uint8_t(i * 13 % 251));
  const std::string p = w.path("idx", name);
  w.made("idx", name, true);
  if (!gzip) return write_bytes(p, b);
  gzFile f = gzopen(p.c_str(), "wb");
  const bool ok = f != nullptr && gzwrite(f, b.data(), unsigned(b.size())) == int(b.size());
  if (gzclose(f) != Z_OK || !ok) throw std::runtime_error("cannot write " + p);
}

void idx_seeds(Writer& w) {
  idx_file(w, "images.idx", cutrain::kIdxImagesMagic, {3, 5, 4}, 60, false);
  idx_file(w, "images.idx.gz", cutrain::kIdxImagesMagic, {2, 28, 28}, 2 * 28 * 28, true);
  idx_file(w, "labels.idx", cutrain::kIdxLabelsMagic, {7}, 7, false);
  idx_file(w, "labels.idx.gz", cutrain::kIdxLabelsMagic, {10}, 10, true);
}

}  // namespace

std::vector<Seed> write_seed_corpus(const std::string& root) {
  Writer w(root);
  const fs::path scratch = fs::path(root) / ".scratch";  // sources of packs and images
  fs::remove_all(scratch);
  fs::create_directories(scratch);
  image_seeds(w, scratch);
  list_seeds(w);
  csv_seeds(w);
  pack_seeds(w, scratch);
  checkpoint_seeds(w);
  model_seeds(w);
  idx_seeds(w);
  fs::remove_all(scratch);
  return w.seeds;
}

}  // namespace cutrain_fuzz
