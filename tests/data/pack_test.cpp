// write_pack: the round trip (every packed image equals load_sample's centred square, byte for
// byte), labels, source_index, attributes and the chunk layout; bad files skipped and named,
// or fatal with strict; progress; bad options; and crash safety: a packer killed halfway
// leaves no file under the final name, and a new pack replaces an old one atomically.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include "data/pack.h"
#include "tests/data/pack_fixture.h"

using namespace cutrain;
using namespace cutrain_test;
namespace fs = std::filesystem;

namespace {

PackOptions options(int size, int channels, int threads = 2, bool strict = false) {
  PackOptions o;
  o.size = size, o.channels = channels, o.threads = threads, o.strict = strict;
  return o;
}

// The files in dir whose name starts with `prefix`.
std::vector<std::string> files_starting(const TempDir& dir, const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir.path()))
    if (e.path().filename().string().rfind(prefix, 0) == 0) out.push_back(e.path().string());
  return out;
}

}  // namespace

TEST_CASE("pack: every image equals load_sample's centred square; labels, index, attributes") {
  TempDir dir;
  const ImageList list = read_image_list(write_jpeg_set(dir, 60));
  for (int channels : {1, 3}) {
    INFO("channels " << channels);
    const std::string out = dir / ("c" + std::to_string(channels) + ".h5");
    const PackSummary s = write_pack(list, out, options(16, channels, 3));
    REQUIRE(s.listed == 60);
    REQUIRE(s.packed == 60);
    REQUIRE(s.bad.empty());
    REQUIRE(s.bytes_on_disk == int64_t(fs::file_size(out)));

    const PackData p = read_pack_raw(out);
    REQUIRE(p.dims == std::vector<hsize_t>{60, 16, 16, hsize_t(channels)});
    const size_t image_bytes = 16 * 16 * size_t(channels);
    // chunks of whole images, as many as fit in 64 KiB; no filters
    REQUIRE(p.chunk == std::vector<hsize_t>{(64 << 10) / image_bytes, 16, 16, hsize_t(channels)});
    REQUIRE(p.filters == 0);
    for (size_t i = 0; i < 60; i++) {
      INFO("image " << i);
      const std::vector<uint8_t> want = centre_sample(list.samples[i].path, 16, channels);
      REQUIRE(std::equal(want.begin(), want.end(), p.images.begin() + i * image_bytes));
      REQUIRE(p.labels[i] == list.samples[i].label);
      REQUIRE(p.source_index[i] == int64_t(i));
    }

    const PackInfo info = read_pack_info(out);
    REQUIRE(info.version == kPackVersion);
    REQUIRE(info.count == 60);
    REQUIRE(info.size == 16);
    REQUIRE(info.channels == channels);
    REQUIRE(info.class_names == std::vector<std::string>{"ant", "bee", "cat", "dog", "eel"});
    REQUIRE(info.source == dir / "list.txt");
    REQUIRE(info.source_hash == image_list_hash(list));
    REQUIRE(info.source_count == 60);
    REQUIRE(info.bad_files.empty());
  }
}

TEST_CASE("pack: the same bytes with 1, 4 and 16 decode threads; progress in order") {
  TempDir dir;
  const ImageList list = read_image_list(write_jpeg_set(dir, 50));
  write_pack(list, dir / "t1.h5", options(12, 3, 1));
  const PackData one = read_pack_raw(dir / "t1.h5");
  for (int threads : {4, 16}) {
    INFO(threads << " threads");
    std::vector<int64_t> done;
    const auto caller = std::this_thread::get_id();
    write_pack(list, dir / "tn.h5", options(12, 3, threads), [&](int64_t d, int64_t total) {
      REQUIRE(total == 50);
      REQUIRE(std::this_thread::get_id() == caller);
      done.push_back(d);
    });
    REQUIRE(done.size() == 50);
    for (size_t i = 0; i < done.size(); i++) REQUIRE(done[i] == int64_t(i) + 1);
    const PackData many = read_pack_raw(dir / "tn.h5");
    REQUIRE(many.images == one.images);
    REQUIRE(many.labels == one.labels);
  }
}

TEST_CASE("pack: bad files are skipped, counted and named; with strict, refused") {
  TempDir dir;
  write_jpeg_set(dir, 12);
  // a truncated JPEG: the first half of a good one
  std::vector<uint8_t> cut = read_bytes(dir / "img4.jpg");
  cut.resize(cut.size() / 2);
  write_bytes(dir / "cut.jpg", cut);
  write_text(dir / "empty.jpg", "");
  write_text(dir / "notes.jpg", "these are not pixels\n");
  write_text(dir / "bad.txt", "img0.jpg 0\nmissing.jpg 1\nimg1.jpg 1\nempty.jpg 2\nimg2.jpg 2\n"
                              "notes.jpg 3\ncut.jpg 4\nimg3.jpg 3\n");
  const ImageList list = read_image_list(dir / "bad.txt");

  const PackSummary s = write_pack(list, dir / "bad.h5", options(16, 3));
  REQUIRE(s.listed == 8);
  REQUIRE(s.packed == 4);
  const std::vector<std::pair<int64_t, ImageError>> want_bad = {
      {1, ImageError::missing}, {3, ImageError::empty},
      {5, ImageError::not_image}, {6, ImageError::truncated}};
  REQUIRE(s.bad.size() == want_bad.size());
  for (size_t b = 0; b < want_bad.size(); b++) {
    INFO(s.bad[b].name << ": " << s.bad[b].message);
    REQUIRE(s.bad[b].index == want_bad[b].first);
    REQUIRE(s.bad[b].name == list.samples[size_t(want_bad[b].first)].path);
    REQUIRE(s.bad[b].kind == want_bad[b].second);
  }

  const PackData p = read_pack_raw(dir / "bad.h5");
  REQUIRE(p.source_index == std::vector<int64_t>{0, 2, 4, 7});
  REQUIRE(p.labels == std::vector<int32_t>{0, 1, 2, 3});
  for (size_t i = 0; i < 4; i++) {
    const std::vector<uint8_t> want =
        centre_sample(list.samples[size_t(p.source_index[i])].path, 16, 3);
    REQUIRE(std::equal(want.begin(), want.end(), p.images.begin() + i * want.size()));
  }
  const PackInfo info = read_pack_info(dir / "bad.h5");
  REQUIRE(info.source_count == 8);
  REQUIRE(info.bad_files.size() == 4);
  REQUIRE(info.bad_reasons.size() == 4);
  for (size_t b = 0; b < 4; b++) {
    REQUIRE(info.bad_files[b] == s.bad[b].name);
    REQUIRE(info.bad_reasons[b] == s.bad[b].message);
  }
  REQUIRE(info.class_names.size() == 5);

  // strict: the first bad file stops it; nothing is left under the name, nor a temporary file
  REQUIRE_ERROR(write_pack(list, dir / "strict.h5", options(16, 3, 2, true)), "missing.jpg");
  REQUIRE(files_starting(dir, "strict.h5").empty());
}

TEST_CASE("pack: refused: bad options, an empty list, a list where nothing loads") {
  TempDir dir;
  const ImageList list = read_image_list(write_jpeg_set(dir, 3));
  const std::string out = dir / "x.h5";
  REQUIRE_ERROR(write_pack(list, out, options(0, 3)), "size must be at least 1");
  REQUIRE_ERROR(write_pack(list, out, options(8, 2)), "channels must be 1 or 3");
  REQUIRE_ERROR(write_pack(list, out, options(8, 3, -1)), "threads must be >= 0");
  REQUIRE_ERROR(write_pack(list, dir.path().string(), options(8, 3)), "is a folder");
  REQUIRE_ERROR(write_pack(list, dir / "list.txt", options(8, 3)), "overwrite its own image list");
  ImageList empty = list;
  empty.samples.clear();
  REQUIRE_ERROR(write_pack(empty, out, options(8, 3)), "has no samples");
  write_text(dir / "gone.txt", "nothing.jpg 0\nnothing2.jpg 1\n");
  REQUIRE_ERROR(write_pack(read_image_list(dir / "gone.txt"), out, options(8, 3)),
                "none of the 2 images");
  REQUIRE_ERROR(write_pack(list, dir / "no/such/folder/x.h5", options(8, 3)), "cannot create");
  REQUIRE(files_starting(dir, "x.h5").empty());
}

TEST_CASE("pack: a killed packer leaves no file under the final name, nor a torn old pack") {
  TempDir dir;
  const ImageList list = read_image_list(write_jpeg_set(dir, 200));
  const std::string out = dir / "out.h5";
  // Runs write_pack in a child process that SIGKILLs itself when half the images are done (the
  // temporary file is open and half written); returns the child's pid.
  auto kill_halfway = [&] {
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      try {
        write_pack(list, out, options(16, 3), [](int64_t done, int64_t total) {
          if (done == total / 2) raise(SIGKILL);
        });
      } catch (...) {
      }
      _exit(3);  // not killed: the checks below fail
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    REQUIRE(WIFSIGNALED(status));
    REQUIRE(WTERMSIG(status) == SIGKILL);
    return child;
  };

  SUBCASE("no pack before") {
    const pid_t child = kill_halfway();
    REQUIRE(!fs::exists(out));
    // what it leaves: its temporary file (kill -9 runs no clean-up); the next pack of the same
    // name removes it, since its process is gone
    const std::string tmp = out + ".tmp-" + std::to_string(child);
    REQUIRE(fs::exists(tmp));
    REQUIRE(write_pack(list, out, options(16, 3)).packed == 200);
    REQUIRE(!fs::exists(tmp));
    REQUIRE(read_pack_info(out).count == 200);
  }
  SUBCASE("an old pack stays whole") {
    ImageList first10 = list;
    first10.samples.resize(10);
    write_pack(first10, out, options(16, 3));
    const std::vector<uint8_t> before = read_pack_raw(out).images;
    kill_halfway();
    REQUIRE(read_pack_info(out).count == 10);
    REQUIRE(read_pack_raw(out).images == before);
  }
}

TEST_CASE("pack: a new pack replaces an old one atomically; the old one's reader is unaffected") {
  TempDir a, b;
  const ImageList old_list = read_image_list(write_jpeg_set(a, 10, 1));
  const ImageList new_list = read_image_list(write_jpeg_set(b, 20, 2));
  const std::string out = a / "p.h5";
  write_pack(old_list, out, options(16, 3));
  ImageSpec spec;
  spec.size = 16, spec.channels = 3;
  const PackSource old_reader(out, spec, 0);  // 0: keeps the file open, reads from it per load
  REQUIRE(!old_reader.in_memory());

  write_pack(new_list, out, options(16, 3));
  std::vector<uint8_t> got(16 * 16 * 3);
  StageTimes t;
  REQUIRE(old_reader.size() == 10);
  for (int64_t i = 0; i < 10; i++) {
    REQUIRE(old_reader.load_cut(i, 0, got.data(), t).ok());
    REQUIRE(got == centre_sample(old_list.samples[size_t(i)].path, 16, 3));
  }
  const PackSource new_reader(out, spec, 0);
  REQUIRE(new_reader.size() == 20);
  REQUIRE(new_reader.load_cut(7, 0, got.data(), t).ok());
  REQUIRE(got == centre_sample(new_list.samples[7].path, 16, 3));
  REQUIRE(got != centre_sample(old_list.samples[7].path, 16, 3));
}
