// PackSource: load() returns the stored bytes (centre spec) or, once its window is cut out,
// augment_square of them (random crop and flip, padded or not), from memory and from disk;
// random access in any order and from many threads gives the same bytes; stage times; bad
// packs refused with messages naming the file; and in the loader, a pack gives the same
// batches (uncut images and windows) as the JPEG files it was made from.
#include <algorithm>
#include <filesystem>
#include <functional>
#include <random>
#include <set>
#include <thread>

#include "data/hdf5_io.h"
#include "data/loader.h"
#include "data/pack.h"
#include "tests/data/pack_fixture.h"

using namespace cutrain;
using namespace cutrain_test;
namespace fs = std::filesystem;

namespace {

constexpr int kStored = 16;
constexpr size_t kStoredBytes = kStored * kStored * 3;

ImageSpec spec_of(int size, bool crop, bool flip, int pad = 0) {
  ImageSpec s;
  s.size = size, s.channels = 3, s.random_crop = crop, s.random_flip = flip, s.pad = pad;
  return s;
}

// A 40-image RGB pack of 16x16 images in dir; returns its path.
std::string make_pack(const TempDir& dir) {
  const ImageList list = read_image_list(write_jpeg_set(dir, 40));
  PackOptions o;
  o.size = kStored, o.channels = 3, o.threads = 2;
  write_pack(list, dir / "p.h5", o);
  return dir / "p.h5";
}

// What load(i, key) must give: augment_square of the stored image i.
std::vector<uint8_t> expected(const PackData& p, int64_t i, const ImageSpec& spec, uint64_t key) {
  std::vector<uint8_t> out(size_t(spec.size) * spec.size * 3);
  augment_square(p.images.data() + size_t(i) * kStoredBytes, kStored, 3, spec, key, out.data());
  return out;
}

// load() with its window cut out (load_cut).
std::vector<uint8_t> load(const PackSource& src, int64_t i, uint64_t key) {
  std::vector<uint8_t> out(size_t(src.spec().size) * src.spec().size * 3, 0xEE);
  StageTimes t;
  const DecodeResult r = src.load_cut(i, key, out.data(), t);
  INFO(r.message);
  REQUIRE(r.ok());
  return out;
}

// A copy of `good` named `name`, changed by edit(file) through the HDF5 C API.
std::string tweaked(const TempDir& dir, const std::string& good, const std::string& name,
                    const std::function<void(hid_t)>& edit) {
  const std::string path = dir / name;
  fs::copy_file(good, path);
  H5Lock lock;
  H5Handle f = h5_owned(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose, path);
  edit(f.get());
  return path;
}

// Opening `path` throws a cutrain::Error that names the file and contains `needle`.
void require_refused(const std::string& path, const std::string& needle,
                     const ImageSpec* spec = nullptr) {
  std::string msg;
  try {
    if (spec)
      PackSource(path, *spec);
    else
      PackSource{path};
  } catch (const Error& e) {
    msg = e.what();
  }
  INFO("message: " << msg);
  REQUIRE(msg.find(path) != std::string::npos);
  REQUIRE(msg.find(needle) != std::string::npos);
}

}  // namespace

TEST_CASE("PackSource: a centre spec gives the stored bytes, from memory and from disk") {
  TempDir dir;
  const std::string path = make_pack(dir);
  const PackData p = read_pack_raw(path);
  const ImageList list = read_image_list(dir / "list.txt");
  for (int64_t max_in_memory : {kPackMaxInMemoryBytes, int64_t(0)}) {
    const PackSource src(path, spec_of(kStored, false, false), max_in_memory);
    INFO("in memory: " << src.in_memory());
    REQUIRE(src.in_memory() == (max_in_memory > 0));
    REQUIRE(src.size() == 40);
    REQUIRE(src.sample_bytes() == kStoredBytes);
    for (int64_t i = 0; i < 40; i++) {
      const std::vector<uint8_t> stored(p.images.begin() + i * kStoredBytes,
                                        p.images.begin() + (i + 1) * kStoredBytes);
      REQUIRE(load(src, i, uint64_t(i) * 31) == stored);
      REQUIRE(src.label(i) == list.samples[size_t(i)].label);
      REQUIRE(src.source_index(i) == i);
      REQUIRE(src.name(i) == path + "[" + std::to_string(i) + "]");
    }
    StageTimes t;
    std::vector<uint8_t> out(kStoredBytes);
    InputCrop window;
    for (int64_t i = 0; i < 40; i++) REQUIRE(src.load(i, 0, out.data(), window, t).ok());
    REQUIRE(t.decode_s == 0);
    REQUIRE(t.augment_s > 0);
    REQUIRE((src.in_memory() ? t.read_s == 0 : t.read_s > 0));
    REQUIRE_ERROR(src.load(40, 0, out.data(), window, t), "index outside [0, 40)");
  }
  // the one-argument form: the stored size, as stored
  const PackSource plain(path);
  REQUIRE(plain.spec().size == kStored);
  REQUIRE(plain.spec().channels == 3);
  REQUIRE(load(plain, 5, 99) == load(PackSource(path, spec_of(kStored, false, false)), 5, 0));
}

TEST_CASE("PackSource: random crop and flip equal augment_square on the stored image") {
  TempDir dir;
  const std::string path = make_pack(dir);
  const PackData p = read_pack_raw(path);
  for (int64_t max_in_memory : {kPackMaxInMemoryBytes, int64_t(0)}) {
    for (const ImageSpec& spec : {spec_of(12, true, true), spec_of(12, false, false),
                                  spec_of(16, false, true), spec_of(9, true, false),
                                  spec_of(16, true, true, 3), spec_of(12, true, false, 2)}) {
      const PackSource src(path, spec, max_in_memory);
      INFO("in memory " << src.in_memory() << ", size " << spec.size << " crop "
                        << spec.random_crop << " flip " << spec.random_flip << " pad "
                        << spec.pad);
      // uncut: the window and its margin of pad pixels on each side
      const size_t side = size_t(spec.size + 2 * spec.pad);
      REQUIRE(src.sample_bytes() == side * side * 3);
      std::set<std::vector<uint8_t>> distinct;
      for (uint64_t key = 0; key < 20; key++) {
        const std::vector<uint8_t> got = load(src, 3, key);
        REQUIRE(got == expected(p, 3, spec, key));
        distinct.insert(got);
      }
      const bool random = spec.random_crop || spec.random_flip;
      REQUIRE((random ? distinct.size() > 1 : distinct.size() == 1));
    }
  }
}

TEST_CASE("PackSource: random access in any order, from 8 threads at once, gives the same bytes") {
  TempDir dir;
  const std::string path = make_pack(dir);
  const PackData p = read_pack_raw(path);
  const ImageSpec spec = spec_of(12, true, true);
  for (int64_t max_in_memory : {kPackMaxInMemoryBytes, int64_t(0)}) {
    const PackSource src(path, spec, max_in_memory);
    INFO("in memory: " << src.in_memory());
    std::vector<int> mismatches(8, 0), failures(8, 0);
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; t++) {
      threads.emplace_back([&, t] {
        std::vector<int64_t> order(40);
        for (int64_t i = 0; i < 40; i++) order[size_t(i)] = i;
        std::mt19937 rng{uint32_t(t)};
        std::vector<uint8_t> out(size_t(spec.size) * spec.size * 3);
        StageTimes times;
        for (int round = 0; round < 5; round++) {
          std::shuffle(order.begin(), order.end(), rng);
          for (int64_t i : order) {
            const uint64_t key = uint64_t(i) * 1000 + uint64_t(round);
            if (!src.load_cut(i, key, out.data(), times).ok()) failures[size_t(t)]++;
            else if (out != expected(p, i, spec, key)) mismatches[size_t(t)]++;
          }
        }
      });
    }
    for (std::thread& t : threads) t.join();
    REQUIRE(mismatches == std::vector<int>(8, 0));
    REQUIRE(failures == std::vector<int>(8, 0));
  }
}

TEST_CASE("PackSource: bad packs and mismatched specs are refused, naming the file") {
  TempDir dir;
  const std::string good = make_pack(dir);
  require_refused(dir / "missing.h5", "No such file");
  write_text(dir / "text.h5", "images labels\n1 2 3\n");
  require_refused(dir / "text.h5", "is not an HDF5 file");
  {
    H5Lock lock;
    H5Handle f = h5_owned(H5Fcreate((dir / "plain.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT,
                                    H5P_DEFAULT), H5Fclose, "plain.h5");
  }
  require_refused(dir / "plain.h5", "not a cutrain pack");
  require_refused(tweaked(dir, good, "no_images.h5",
                          [](hid_t f) { REQUIRE(H5Ldelete(f, "images", H5P_DEFAULT) >= 0); }),
                  "dataset 'images' is missing");
  require_refused(tweaked(dir, good, "v99.h5",
                          [](hid_t f) {
                            REQUIRE(H5Adelete(f, "version") >= 0);
                            h5_write_int_attribute(f, "version", 99, H5T_STD_I32LE);
                          }),
                  "pack format version 99");
  require_refused(tweaked(dir, good, "float_labels.h5",
                          [](hid_t f) {
                            REQUIRE(H5Ldelete(f, "labels", H5P_DEFAULT) >= 0);
                            const std::vector<float> v(40, 1.0f);
                            h5_write_vector(f, "labels", v.data(), 40, H5T_NATIVE_FLOAT,
                                            H5T_IEEE_F32LE);
                          }),
                  "dataset 'labels' is float32, expected int32");
  require_refused(tweaked(dir, good, "flat_images.h5",
                          [](hid_t f) {
                            REQUIRE(H5Ldelete(f, "images", H5P_DEFAULT) >= 0);
                            const std::vector<uint8_t> v(40, 0);
                            h5_write_vector(f, "images", v.data(), 40, H5T_NATIVE_UINT8,
                                            H5T_STD_U8LE);
                          }),
                  "dataset 'images' has 1 dimensions, expected 4");
  require_refused(tweaked(dir, good, "short_labels.h5",
                          [](hid_t f) {
                            REQUIRE(H5Ldelete(f, "labels", H5P_DEFAULT) >= 0);
                            const std::vector<int32_t> v(39, 0);
                            h5_write_vector(f, "labels", v.data(), 39, H5T_NATIVE_INT32,
                                            H5T_STD_I32LE);
                          }),
                  "dataset 'labels' has 39 entries for 40 images");
  require_refused(tweaked(dir, good, "label9.h5",
                          [](hid_t f) {
                            REQUIRE(H5Ldelete(f, "labels", H5P_DEFAULT) >= 0);
                            std::vector<int32_t> v(40, 0);
                            v[17] = 9;
                            h5_write_vector(f, "labels", v.data(), 40, H5T_NATIVE_INT32,
                                            H5T_STD_I32LE);
                          }),
                  "image 17 has label 9, outside [0, 5)");
  // sizes that would size allocations beyond the file (a billion unwritten chunks)
  require_refused(tweaked(dir, good, "claims_1e9.h5",
                          [](hid_t f) {
                            REQUIRE(H5Ldelete(f, "images", H5P_DEFAULT) >= 0);
                            const hsize_t dims[4] = {1000000000, 16, 16, 3};
                            const hsize_t chunk[4] = {1, 16, 16, 3};
                            H5Handle dcpl = h5_owned(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "p");
                            REQUIRE(H5Pset_chunk(dcpl.get(), 4, chunk) >= 0);
                            H5Handle space = h5_owned(H5Screate_simple(4, dims, nullptr),
                                                      H5Sclose, "space");
                            h5_owned(H5Dcreate2(f, "images", H5T_STD_U8LE, space.get(),
                                                H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                                     H5Dclose, "images");
                          }),
                  "the pack claims 1000000000 images of 16x16x3, more than its");
  REQUIRE_ERROR(read_pack_info(dir / "text.h5"), "is not an HDF5 file");

  // a good pack, but not what the loader asks for
  ImageSpec too_big = spec_of(20, false, false);
  require_refused(good, "larger than the pack's 16x16", &too_big);
  ImageSpec gray = spec_of(16, false, false);
  gray.channels = 1;
  require_refused(good, "the loader wants 1-channel images, the pack holds 3-channel", &gray);
  ImageSpec resized = spec_of(12, false, false);
  resized.resize = 14;
  require_refused(good, "already resized to 16", &resized);
}

TEST_CASE("PackSource in the loader: the same batches as the JPEG list, for square images") {
  // For a square image the pack stores exactly the resized image (the centre crop is all of
  // it), so the loader must give the same bytes from the pack as from the JPEG files: the same
  // sampler order, the same augmentation keys, the same crop and flip code.
  TempDir dir;
  std::string list_text;
  for (int i = 0; i < 30; i++) {
    const int side = 16 + 8 * (i % 4);  // 16..40: resized to 16 (or kept)
    std::vector<uint8_t> px(size_t(side) * side * 3);
    for (size_t j = 0; j < px.size(); j++) px[j] = uint8_t(j * 7 + size_t(i) * 29 + (j / 48) * 5);
    write_bytes(dir / ("sq" + std::to_string(i) + ".jpg"), encode_jpeg(px.data(), side, side, 3));
    list_text += "sq" + std::to_string(i) + ".jpg " + std::to_string(i % 4) + "\n";
  }
  write_text(dir / "sq.txt", list_text);
  const ImageList list = read_image_list(dir / "sq.txt");
  PackOptions o;
  o.size = kStored, o.channels = 3;
  write_pack(list, dir / "sq.h5", o);

  ImageSpec spec = spec_of(12, true, true, 2);
  auto from_pack = std::make_shared<PackSource>(dir / "sq.h5", spec, 0);  // on disk
  spec.resize = kStored;
  auto from_files = std::make_shared<ListSource>(list, spec);
  SamplerConfig sc;
  sc.num_samples = 30, sc.batch_size = 8, sc.seed = 11, sc.last_batch = LastBatch::partial;
  LoaderConfig lc;
  lc.threads = 3;
  Loader a(from_pack, sc, lc), b(from_files, sc, lc);
  for (int64_t step = 0; step < 3 * a.sampler().batches_per_epoch(); step++) {
    INFO("step " << step);
    const Batch x = a.next(), y = b.next();
    REQUIRE(x.n == y.n);
    REQUIRE(std::equal(x.indices, x.indices + x.n, y.indices));
    REQUIRE(std::equal(x.labels, x.labels + x.n, y.labels));
    REQUIRE(x.side == 16);  // uncut: 12 + 2 x 2
    REQUIRE(y.side == 16);
    REQUIRE(std::equal(x.images, x.images + size_t(x.n) * 16 * 16 * 3, y.images));
    for (int k = 0; k < x.n; k++) {
      REQUIRE(x.crops[k].top == y.crops[k].top);
      REQUIRE(x.crops[k].left == y.crops[k].left);
      REQUIRE(x.crops[k].flip == y.crops[k].flip);
    }
    a.release(x);
    b.release(y);
  }
  REQUIRE(a.stats().stages.read_s > 0);
  REQUIRE(a.stats().stages.decode_s == 0);
}
