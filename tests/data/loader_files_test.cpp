// The loader on real files: a list with every good kind (RGB, grayscale, CMYK, progressive
// JPEG, PNG, ...) and every bad kind (missing, empty, truncated, corrupt, not an image, over
// the pixel cap). Exactly the bad ones are skipped, counted and named, in the file of bad
// files too; the good odd ones load; --strict stops at the first bad one.
#include <fstream>
#include <map>
#include <set>
#include <vector>

#include "data/loader.h"
#include "tests/data/test_images.h"
#include "tests/test_util.h"

using namespace cutrain;
using cutrain_test::TempDir;

namespace {
ImageList list_of(const std::vector<cutrain_test::TestFile>& files) {
  ImageList l;
  l.source = "test";
  for (size_t i = 0; i < files.size(); i++) l.samples.push_back(Sample{files[i].path, int32_t(i)});
  return l;
}

SamplerConfig all_in_batches_of(int64_t n, int64_t b) {
  SamplerConfig c;
  c.num_samples = n;
  c.batch_size = b;
  c.seed = 7;
  c.last_batch = LastBatch::partial;
  return c;
}
}  // namespace

TEST_CASE("loader on files: exactly the bad files are skipped, counted and named") {
  TempDir dir;
  const auto files = cutrain_test::write_test_images(dir.path());
  std::set<std::string> bad_paths, good_paths;
  for (const auto& f : files) (f.error == ImageError::none ? good_paths : bad_paths).insert(f.path);
  REQUIRE(bad_paths.size() >= 6);   // missing, empty, truncated, corrupt, not an image, too large
  REQUIRE(good_paths.size() >= 5);  // rgb, gray, cmyk, progressive jpeg, png, ...

  ImageSpec spec;
  spec.size = 16;
  spec.channels = 3;
  spec.max_pixels = 4 << 20;
  auto src = std::make_shared<ListSource>(list_of(files), spec);
  LoaderConfig cfg;
  cfg.threads = 3;
  cfg.print_bad = 0;
  cfg.bad_files_path = dir.file("bad_files.txt");
  Loader loader(src, all_in_batches_of(src->size(), 4), cfg);
  const int64_t batches = loader.sampler().batches_per_epoch();
  for (int epoch = 0; epoch < 2; epoch++) {
    std::set<std::string> seen;
    for (int64_t b = 0; b < batches; b++) {
      Batch batch = loader.next();
      for (int k = 0; k < batch.n; k++) {
        const std::string& path = files[size_t(batch.indices[k])].path;
        seen.insert(path);
        REQUIRE(batch.labels[k] == int32_t(batch.indices[k]));
        // a good sample's bytes are what load_sample makes of it with its augmentation key
        std::vector<uint8_t> want(src->sample_bytes());
        REQUIRE(load_sample(path, spec, augment_key(7, epoch, batch.indices[k]), want.data()).ok());
        REQUIRE(std::memcmp(batch.images + size_t(k) * want.size(), want.data(), want.size()) == 0);
      }
      loader.release(batch);
    }
    REQUIRE(seen == good_paths);
  }
  // counted once, named with their kind, in memory and in the file
  const std::vector<BadFile> bad = loader.bad_files();
  REQUIRE(bad.size() == bad_paths.size());
  std::map<std::string, ImageError> want_kind;
  for (const auto& f : files) want_kind[f.path] = f.error;
  for (const BadFile& b : bad) {
    INFO(b.name << ": " << image_error_name(b.kind) << ": " << b.message);
    REQUIRE(bad_paths.count(b.name) == 1);
    REQUIRE(b.kind == want_kind[b.name]);
    REQUIRE_FALSE(b.message.empty());
  }
  std::ifstream in(cfg.bad_files_path);
  std::set<std::string> listed;
  for (std::string line; std::getline(in, line);) listed.insert(line.substr(0, line.find('\t')));
  REQUIRE(listed == bad_paths);
  REQUIRE(loader.stats().bad_files == int64_t(bad_paths.size()));
  REQUIRE(loader.stats().stages.decode_s > 0);
}

TEST_CASE("loader on files: a resumed run's loader lists each bad file once, not again") {
  TempDir dir;
  const auto files = cutrain_test::write_test_images(dir.path());
  std::set<std::string> bad_paths;
  for (const auto& f : files)
    if (f.error != ImageError::none) bad_paths.insert(f.path);
  ImageSpec spec;
  spec.size = 8;
  spec.channels = 1;
  spec.max_pixels = 4 << 20;
  auto src = std::make_shared<ListSource>(list_of(files), spec);
  LoaderConfig cfg;
  cfg.threads = 2;
  cfg.print_bad = 0;
  cfg.bad_files_path = dir.file("bad_files.txt");
  // Three processes of one run, each reading a whole epoch: the second and third find the
  // same bad files again.
  for (int process = 0; process < 3; process++) {
    SamplerCursor start;
    start.epoch = process;
    Loader loader(src, all_in_batches_of(src->size(), 4), cfg, start);
    for (int64_t b = 0; b < loader.sampler().batches_per_epoch(); b++) loader.release(loader.next());
    REQUIRE(loader.bad_files().size() == bad_paths.size());  // found again: still skipped
  }
  std::ifstream in(cfg.bad_files_path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line.substr(0, line.find('\t')));
  REQUIRE(lines.size() == bad_paths.size());
  REQUIRE(std::set<std::string>(lines.begin(), lines.end()) == bad_paths);
}

TEST_CASE("loader on files: --strict stops at a bad file and names it") {
  TempDir dir;
  const auto files = cutrain_test::write_test_images(dir.path());
  ImageSpec spec;
  spec.size = 8;
  spec.channels = 1;
  auto src = std::make_shared<ListSource>(list_of(files), spec);
  LoaderConfig cfg;
  cfg.threads = 2;
  cfg.strict = true;
  Loader loader(src, all_in_batches_of(src->size(), src->size()), cfg);
  REQUIRE_ERROR(loader.next(), "--strict: stopping");
}
