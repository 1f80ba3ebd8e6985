// Image lists: the list-file format and its errors, classes.txt, the folder-per-class scan,
// write/read round trips, the hash and the class histogram. Every test writes real files to a
// fresh temporary folder.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/image_list.h"
#include "tests/data/temp_dir.h"
#include "tests/test_util.h"

using namespace cutrain;
using cutrain_test::TempDir;
using cutrain_test::write_text;
namespace fs = std::filesystem;

namespace {
std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}
void require_same_samples(const ImageList& a, const ImageList& b) {
  REQUIRE(a.samples.size() == b.samples.size());
  for (size_t i = 0; i < a.samples.size(); i++) {
    INFO("sample " << i);
    REQUIRE(a.samples[i].path == b.samples[i].path);
    REQUIRE(a.samples[i].label == b.samples[i].label);
  }
}
}  // namespace

TEST_CASE("image_list: tabs, spaces, a path with spaces, comments, blank lines, CRLF, a BOM") {
  TempDir t;
  const std::string root = t.path().string();
  write_text(t / "train.txt",
             "\xEF\xBB\xBF"                      // UTF-8 byte-order mark
             "# a comment\r\n"
             "a.jpg 0\r\n"                       // spaces, CRLF
             "\r\n"
             "   \t  \n"                         // whitespace only
             "  # an indented comment\n"
             "sub/b.jpg\t1\n"                    // tab
             "my cat.jpg\t2\n"                   // a path with a space, tab-separated
             "  c.png    3  \n"                  // a run of spaces, surrounding whitespace
             "d.jpg\t\t4\n"                      // two tabs
             "/abs/x/./e.jpg 5\n"                // absolute, not yet normal
             "sub/../f.jpg\t6");                 // no newline at the end
  const ImageList l = read_image_list(t / "train.txt");
  REQUIRE(l.source == t / "train.txt");
  REQUIRE(l.class_names.empty());
  const std::vector<std::pair<std::string, int>> want = {
      {root + "/a.jpg", 0},   {root + "/sub/b.jpg", 1}, {root + "/my cat.jpg", 2},
      {root + "/c.png", 3},   {root + "/d.jpg", 4},     {"/abs/x/e.jpg", 5},
      {root + "/f.jpg", 6}};
  REQUIRE(l.samples.size() == want.size());
  for (size_t i = 0; i < want.size(); i++) {
    INFO("sample " << i << ": " << l.samples[i].path);
    REQUIRE(l.samples[i].path == want[i].first);
    REQUIRE(l.samples[i].label == want[i].second);
  }
}

TEST_CASE("image_list: relative paths resolve against the list's folder, not the working one") {
  TempDir t;
  write_text(t / "lists/val.txt", "../images/a.jpg 1\nb.jpg 0\n");
  const std::string want_a = (t.path() / "images/a.jpg").string();
  const std::string want_b = (t.path() / "lists/b.jpg").string();
  // the list named by an absolute path, a relative path from here, and a path with ./ and ..
  for (const std::string& name :
       {t / "lists/val.txt", fs::relative(t / "lists/val.txt").string(),
        t / "lists/./../lists/val.txt"}) {
    INFO("list named " << name);
    const ImageList l = read_image_list(name);
    REQUIRE(l.samples.size() == 2);
    REQUIRE(l.samples[0].path == want_a);
    REQUIRE(l.samples[1].path == want_b);
  }
}

TEST_CASE("image_list: every malformed line is reported at once with file:line") {
  TempDir t;
  write_text(t / "train.txt",
             "ok.jpg 1\n"           // 1
             "nolabel.jpg\n"        // 2
             "b.jpg cat\n"          // 3
             "my cat.jpg 3\n"       // 4: a path with spaces needs a tab
             "e.jpg 12\n"           // 5
             "# fine\n"             // 6
             "f.jpg -1\n"           // 7
             "g.jpg 3.0\n"          // 8
             "x\ty\t3\n"            // 9
             "\t\t\n"               // 10: whitespace only, skipped
             "h.jpg\t99999999999\n" // 11
             "ok2.jpg\t9\n");       // 12
  REQUIRE_ERROR(read_image_list(t / "train.txt", 10), "8 malformed lines:");
  const std::string f = t / "train.txt";
  REQUIRE_ERROR(read_image_list(f, 10), f + ":2: no label");
  REQUIRE_ERROR(read_image_list(f, 10), f + ":3: label 'cat' is not an integer");
  REQUIRE_ERROR(read_image_list(f, 10), f + ":4: 3 space-separated fields");
  REQUIRE_ERROR(read_image_list(f, 10), "train.txt:5: label 12 is outside [0, 10)");
  REQUIRE_ERROR(read_image_list(f, 10), f + ":7: label -1 is outside [0, 10)");
  REQUIRE_ERROR(read_image_list(f, 10), f + ":8: label '3.0' is not an integer");
  REQUIRE_ERROR(read_image_list(f, 10), f + ":9: more than two tab-separated fields");
  REQUIRE_ERROR(read_image_list(f, 10), f + ":11: label 99999999999 is out of range");
}

TEST_CASE("image_list: without a class count only negative labels are refused") {
  TempDir t;
  write_text(t / "a.txt", "a.jpg 12\nb.jpg 1000\n");
  REQUIRE(read_image_list(t / "a.txt").samples[1].label == 1000);
  REQUIRE_ERROR(read_image_list(t / "a.txt", 12), "a.txt:1: label 12 is outside [0, 12)");
  write_text(t / "b.txt", "a.jpg 1\nb.jpg -3\n");
  REQUIRE_ERROR(read_image_list(t / "b.txt"), "b.txt:2: label -3 is negative");
  REQUIRE_ERROR(read_image_list(t / "b.txt", -1), "num_classes must be >= 0");
}

TEST_CASE("image_list: many malformed lines: the first 20 shown, the rest counted") {
  TempDir t;
  std::string text;
  for (int i = 0; i < 25; i++) text += "bad" + std::to_string(i) + ".jpg\n";
  write_text(t / "l.txt", text);
  REQUIRE_ERROR(read_image_list(t / "l.txt"), "25 malformed lines:");
  REQUIRE_ERROR(read_image_list(t / "l.txt"), "l.txt:20: no label");
  REQUIRE_ERROR(read_image_list(t / "l.txt"), "... and 5 more");
  std::string msg;
  try {
    read_image_list(t / "l.txt");
  } catch (const Error& e) {
    msg = e.what();
  }
  REQUIRE(msg.find("l.txt:21:") == std::string::npos);
}

TEST_CASE("image_list: empty, missing and folder lists are clear errors") {
  TempDir t;
  write_text(t / "empty.txt", "");
  REQUIRE_ERROR(read_image_list(t / "empty.txt"), "empty.txt' has no samples (0 lines");
  write_text(t / "comments.txt", "# only\n\n  # comments\r\n");
  REQUIRE_ERROR(read_image_list(t / "comments.txt"), "comments.txt' has no samples (3 lines");
  REQUIRE_ERROR(read_image_list(t / "nope.txt"), "image list '" + t / "nope.txt" +
                                                     "' does not exist");
  REQUIRE_ERROR(read_image_list(t.path().string()), "is a folder");
}

TEST_CASE("image_list: classes.txt beside the list names the classes and sets the count") {
  TempDir t;
  write_text(t / "classes.txt", "\xEF\xBB\xBF" "cat\r\ndog\r\nbird \r\n\r\n");
  write_text(t / "ok.txt", "a.jpg 2\nb.jpg 0\n");
  const ImageList l = read_image_list(t / "ok.txt");
  REQUIRE(l.class_names == std::vector<std::string>{"cat", "dog", "bird"});
  REQUIRE(read_image_list(t / "ok.txt", 3).samples.size() == 2);
  REQUIRE_ERROR(read_image_list(t / "ok.txt", 4), "names 3 classes, but 4 were asked for");
  write_text(t / "bad.txt", "a.jpg 3\n");  // 3 is outside the 3 classes
  REQUIRE_ERROR(read_image_list(t / "bad.txt"), "bad.txt:1: label 3 is outside [0, 3)");

  write_text(t / "classes.txt", "cat\n\ndog\n");
  REQUIRE_ERROR(read_image_list(t / "ok.txt"), "classes.txt:2: empty class name");
  write_text(t / "classes.txt", "cat\ndog\ncat\n");
  REQUIRE_ERROR(read_class_names(t / "classes.txt"), "classes.txt:3: duplicate class name 'cat'");
  write_text(t / "classes.txt", "\n\n");
  REQUIRE_ERROR(read_class_names(t / "classes.txt"), "no class names");
  REQUIRE_ERROR(read_class_names(t / "none.txt"), "cannot read class names");
}

TEST_CASE("image_list: folder per class: sorted classes, sorted images, the mapping") {
  TempDir t;
  for (const char* f : {"dog/b.JPG", "dog/a.png", "dog/notes.txt", "cat/z.jpeg", "cat/y.bmp",
                        "cat/.hidden.jpg", "cat/deeper/x.jpg", "cat/x.WebP", "ant/1.gif",
                        "ant/2.TGA", "ant/3.pgm", "ant/4.ppm", ".git/x.jpg", "readme.jpg"})
    write_text(t / f, "not really an image: the scan does not open files");
  const ImageList l = scan_class_folders(t.path().string());
  REQUIRE(l.source == t.path().string());
  REQUIRE(l.class_names == std::vector<std::string>{"ant", "cat", "dog"});
  const std::vector<std::pair<std::string, int>> want = {
      {"ant/1.gif", 0}, {"ant/2.TGA", 0}, {"ant/3.pgm", 0}, {"ant/4.ppm", 0},
      {"cat/x.WebP", 1}, {"cat/y.bmp", 1}, {"cat/z.jpeg", 1}, {"dog/a.png", 2}, {"dog/b.JPG", 2}};
  REQUIRE(l.samples.size() == want.size());
  for (size_t i = 0; i < want.size(); i++) {
    INFO("sample " << i << ": " << l.samples[i].path);
    REQUIRE(l.samples[i].path == t / want[i].first);
    REQUIRE(l.samples[i].label == want[i].second);
  }
  REQUIRE(class_histogram(l, 3) == std::vector<int64_t>{4, 3, 2});
  // with a trailing slash on the root, and named relative to here: the same absolute paths
  require_same_samples(scan_class_folders(t / ""), l);
  require_same_samples(scan_class_folders(fs::relative(t.path()).string()), l);
  // read_images: a folder is scanned, a file is read as a list
  require_same_samples(read_images(t.path().string()), l);
  REQUIRE_ERROR(read_images(t.path().string(), 5), "has 3 class folders, but 5 classes");
  write_image_list(l, t / "all.txt");
  require_same_samples(read_images(t / "all.txt"), l);
}

TEST_CASE("image_list: folder per class errors") {
  TempDir t;
  REQUIRE_ERROR(scan_class_folders(t / "missing"), "image folder '" + t / "missing" +
                                                       "' does not exist");
  write_text(t / "file.jpg", "x");
  REQUIRE_ERROR(scan_class_folders(t / "file.jpg"), "is not a folder");
  REQUIRE_ERROR(scan_class_folders(t.path().string()), "has no class folders");
  write_text(t / "cat/a.jpg", "x");
  write_text(t / "dog/readme.txt", "x");
  fs::create_directory(t / "emu");
  REQUIRE_ERROR(scan_class_folders(t.path().string()), "2 class folders have no images");
  REQUIRE_ERROR(scan_class_folders(t.path().string()), "'dog', 'emu'");
}

TEST_CASE("image_list: write then read gives the same list; relative paths under its folder") {
  TempDir t;
  for (const char* f : {"cat/a.jpg", "cat/my photo.png", "dog/b.jpg"}) write_text(t / f, "x");
  ImageList scanned = scan_class_folders(t.path().string());
  scanned.samples.push_back({t / "#1.jpg", 1});        // would read as a comment
  scanned.samples.push_back({"/elsewhere/x.jpg", 1});  // not under the list's folder
  write_image_list(scanned, t / "train.txt");
  write_class_names(scanned.class_names, t / "classes.txt");
  REQUIRE(read_all(t / "train.txt") ==
          "cat/a.jpg\t0\ncat/my photo.png\t0\ndog/b.jpg\t1\n./#1.jpg\t1\n/elsewhere/x.jpg\t1\n");
  REQUIRE(read_all(t / "classes.txt") == "cat\ndog\n");
  const ImageList back = read_image_list(t / "train.txt");
  require_same_samples(back, scanned);
  REQUIRE(back.class_names == scanned.class_names);
  REQUIRE(image_list_hash(back) == image_list_hash(scanned));
  // nothing but what was written: the temporary files were renamed, none left behind
  int entries = 0;
  for (const auto& e : fs::directory_iterator(t.path())) entries += e.is_regular_file();
  REQUIRE(entries == 2);
  // overwriting replaces the file
  scanned.samples.resize(1);
  write_image_list(scanned, t / "train.txt");
  REQUIRE(read_all(t / "train.txt") == "cat/a.jpg\t0\n");
}

TEST_CASE("image_list: a path that starts with whitespace or a BOM is written to read back") {
  // (found by fuzz/: "./ a.jpg" in a list, or a BOM at the start of a later line, was written
  // as it was and read back without it)
  TempDir t;
  ImageList l;
  l.samples = {{t / "\xEF\xBB\xBF" "c.jpg", 2}, {t / " a.jpg", 0}, {t / "\fb.jpg", 1}};
  write_image_list(l, t / "l.txt");
  REQUIRE(read_all(t / "l.txt") == "./\xEF\xBB\xBF" "c.jpg\t2\n./ a.jpg\t0\n./\fb.jpg\t1\n");
  require_same_samples(read_image_list(t / "l.txt"), l);
}

TEST_CASE("image_list: a NUL byte in a path is a malformed line, and is not written") {
  TempDir t;
  write_text(t / "l.txt", std::string("a.jpg 0\nb.jpg", 13) + '\0' + "x.jpg 1\n");
  REQUIRE_ERROR(read_image_list(t / "l.txt"), "l.txt:2: a NUL byte in the path");
  ImageList l;
  l.samples = {{std::string("/a.jpg\0b", 8), 0}};
  REQUIRE_ERROR(write_image_list(l, t / "w.txt"), "cannot be written to a list");
}

TEST_CASE("image_list: what cannot be written is refused") {
  TempDir t;
  ImageList l;
  l.samples = {{"/a\tb.jpg", 0}};
  REQUIRE_ERROR(write_image_list(l, t / "l.txt"), "cannot be written to a list");
  l.samples = {{"/a.jpg ", 0}};
  REQUIRE_ERROR(write_image_list(l, t / "l.txt"), "cannot be written to a list");
  l.samples = {{"/a.jpg", -2}};
  REQUIRE_ERROR(write_image_list(l, t / "l.txt"), "negative label -2");
  l.samples = {{"/a.jpg", 0}};
  REQUIRE_ERROR(write_image_list(l, t / "no/such/folder/l.txt"), "cannot create");
  REQUIRE_ERROR(write_class_names({"a", "b\nc"}, t / "c.txt"), "class 1: name");
  REQUIRE_ERROR(write_class_names({"a", ""}, t / "c.txt"), "class 1: name '' is empty");
  REQUIRE_ERROR(write_class_names({"a", "a"}, t / "c.txt"), "class 1: duplicate name 'a'");
  REQUIRE_FALSE(fs::exists(t / "l.txt"));
  REQUIRE_FALSE(fs::exists(t / "c.txt"));
}

TEST_CASE("image_list: the hash is stable and changes with order, labels and paths") {
  ImageList a;
  a.samples = {{"/d/x.jpg", 0}, {"/d/y.jpg", 1}, {"/d/z.jpg", 2}};
  const uint64_t h = image_list_hash(a);
  // pinned: a pack records this value, so it must not change between versions or machines
  REQUIRE(h == 0x1f153a656e099ce2ull);  // computed apart, in Python
  ImageList b = a;
  b.class_names = {"p", "q", "r"};
  b.source = "other.txt";
  REQUIRE(image_list_hash(b) == h);  // only (path, label) pairs count
  std::swap(b.samples[0], b.samples[1]);
  REQUIRE(image_list_hash(b) != h);
  b = a;
  b.samples[2].label = 1;
  REQUIRE(image_list_hash(b) != h);
  b = a;
  b.samples[2].path = "/d/Z.jpg";
  REQUIRE(image_list_hash(b) != h);
  // The 0 byte after each path keeps the boundary unambiguous: without it, these two lists
  // hash the same bytes "/a" 01 02 03 04 "/b" 07 00 00 00.
  ImageList c, d;
  c.samples = {{"/a", 0x04030201}, {"/b", 7}};
  d.samples = {{"/a\x01\x02", 0x622f0403}, {"", 7}};
  REQUIRE(image_list_hash(c) != image_list_hash(d));
  REQUIRE(image_list_hash(ImageList{}) == 0xcbf29ce484222325ull);  // FNV-1a of nothing
}

TEST_CASE("image_list: class histogram") {
  ImageList l;
  l.samples = {{"/a", 2}, {"/b", 0}, {"/c", 2}, {"/d", 2}};
  REQUIRE(class_histogram(l, 4) == std::vector<int64_t>{1, 0, 3, 0});
  REQUIRE_ERROR(class_histogram(l, 2), "sample 0 (/a): label 2 is outside [0, 2)");
  REQUIRE_ERROR(class_histogram(l, 0), "num_classes must be positive");
}
