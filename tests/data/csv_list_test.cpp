// CSV lists (data/image_list.h, "CSV files"): the header's default and chosen columns, quoting,
// CRLF, a BOM, labels as integers or names, every bad row at once with the line it starts on,
// syntax errors, and read_images choosing the CSV reader. Real CSV files and real JPEGs, made
// in a fresh temporary folder by each test.
#include <filesystem>

#include "data/image.h"
#include "data/image_list.h"
#include "tests/data/list_fixture.h"
#include "tests/data/temp_dir.h"
#include "tests/data/test_images.h"
#include "tests/test_util.h"

using namespace cutrain;
using cutrain_test::labels_of;
using cutrain_test::TempDir;
using cutrain_test::write_bytes;
using cutrain_test::write_text;
namespace fs = std::filesystem;

namespace {

// A small real JPEG at `path` (folders made as needed).
void write_jpeg(const std::string& path, int seed) {
  const Image img = cutrain_test::pattern_image(12 + seed, 10 + 2 * seed, 3);
  fs::create_directories(fs::path(path).parent_path());
  write_bytes(path, encode_jpeg(img.pixels.data(), img.h, img.w, img.c));
}


}  // namespace

TEST_CASE("csv list: filename,class with names, quoted commas and quotes, CRLF, a BOM") {
  TempDir t;
  write_jpeg(t / "img/1.jpg", 0);
  write_jpeg(t / "img/with, comma.jpg", 1);
  write_jpeg(t / "img/say \"hi\".jpg", 2);
  write_jpeg(t / "other/4.jpg", 3);
  write_text(t / "data/train.csv",
             "\xEF\xBB\xBF" "id,FileName,width,Class\r\n"        // BOM; any case; extra columns
             "1,../img/1.jpg,12,shoe\r\n"
             "\r\n"                                               // blank lines are skipped
             "2,\"../img/with, comma.jpg\",13,\"ankle boot\"\r\n"
             "3,\"../img/say \"\"hi\"\".jpg\",14,\"a \"\"quoted\"\" name\"\r\n"
             "4," + t / "other/4.jpg" + ",15,shoe");              // absolute; no line end
  const ImageList l = read_csv_list(t / "data/train.csv");
  REQUIRE(l.source == t / "data/train.csv");
  REQUIRE(l.class_names == std::vector<std::string>{"a \"quoted\" name", "ankle boot", "shoe"});
  REQUIRE(labels_of(l) == std::vector<int32_t>{2, 1, 0, 2});
  const std::vector<std::string> paths = {t / "img/1.jpg", t / "img/with, comma.jpg",
                                          t / "img/say \"hi\".jpg", t / "other/4.jpg"};
  REQUIRE(l.samples.size() == paths.size());
  for (size_t i = 0; i < paths.size(); i++) {
    INFO("row " << i);
    REQUIRE(l.samples[i].path == paths[i]);
    Image img;  // the paths name the real files
    REQUIRE(load_image_file(l.samples[i].path, 3, 0, 1 << 20, img).ok());
    REQUIRE(img.w == 10 + 2 * int(i));
  }
}

TEST_CASE("csv list: image,label with integers, and the default column names") {
  TempDir t;
  write_jpeg(t / "a.jpg", 0);
  write_jpeg(t / "b.jpg", 1);
  write_text(t / "l.csv", "image,label\na.jpg,1\nb.jpg,0\n");
  const ImageList l = read_csv_list(t / "l.csv");
  REQUIRE(labels_of(l) == std::vector<int32_t>{1, 0});
  REQUIRE(l.class_names.empty());
  // classes.txt beside a CSV names the classes as beside a list.
  write_text(t / "classes.txt", "cat\ndog\n");
  REQUIRE(read_csv_list(t / "l.csv").class_names == std::vector<std::string>{"cat", "dog"});
  for (const char* header : {"filename,target", "file,category", " Path , CLASS ",
                             "image_path,label"}) {
    INFO(header);
    write_text(t / "h.csv", std::string(header) + "\na.jpg,1\n");
    REQUIRE(read_csv_list(t / "h.csv").samples.at(0).label == 1);
  }
}

TEST_CASE("csv list: --csv-columns by name or 0-based index; header problems name the columns") {
  TempDir t;
  write_text(t / "l.csv", "id,img,y,file\n7,a.jpg,dog,ignored.jpg\n8,b.jpg,cat,x.jpg\n");
  ListOptions opt;
  opt.csv_columns = "img,y";
  ImageList l = read_csv_list(t / "l.csv", opt);
  REQUIRE(l.samples[0].path == t / "a.jpg");
  REQUIRE(labels_of(l) == std::vector<int32_t>{1, 0});
  opt.csv_columns = "1, 2";
  l = read_csv_list(t / "l.csv", opt);
  REQUIRE(l.samples[1].path == t / "b.jpg");
  REQUIRE(l.class_names == std::vector<std::string>{"cat", "dog"});
  opt.csv_columns = "IMG,0";  // names without case; the id column as integer labels
  REQUIRE(labels_of(read_csv_list(t / "l.csv", opt)) == std::vector<int32_t>{7, 8});

  const std::string f = t / "l.csv";
  opt.csv_columns = "image,y";
  REQUIRE_USER_ERROR(read_csv_list(f, opt), f + ":1: no column named 'image' for the path in the "
                                                "header ('id', 'img', 'y', 'file')");
  opt.csv_columns = "1,4";
  REQUIRE_USER_ERROR(read_csv_list(f, opt), f + ":1: the label column index 4 is beyond the "
                                                "header's 4 columns");
  opt.csv_columns = "img,1";
  REQUIRE_USER_ERROR(read_csv_list(f, opt), "names column 1 ('img') for both the path and the label");
  for (const char* bad : {"img", "a,b,c", ",y", "img,IMG"}) {
    INFO(bad);
    opt.csv_columns = bad;
    REQUIRE(!csv_columns_problem(bad).empty());
    REQUIRE_USER_ERROR(read_csv_list(f, opt), "--csv-columns: expected PATH,LABEL");
  }
  REQUIRE(csv_columns_problem("").empty());
  REQUIRE(csv_columns_problem("filename,class").empty());

  // The defaults: no path column (only 'img'), no label column, two candidates.
  REQUIRE_USER_ERROR(read_csv_list(t / "l.csv"),
                     f + ":1: no label column in the header ('id', 'img', 'y', 'file'): expected "
                         "one named label, class, category or target (any case); choose with "
                         "--csv-columns PATH,LABEL");
  write_text(t / "none.csv", "\n\nid,y\n1,2\n");
  REQUIRE_USER_ERROR(read_csv_list(t / "none.csv"), "none.csv:3: no path column in the header "
                                                    "('id', 'y'): expected one named image, "
                                                    "filename, file, path or image_path");
  write_text(t / "two.csv", "file,path,label\na,b,1\n");
  REQUIRE_USER_ERROR(read_csv_list(t / "two.csv"),
                     "two.csv:1: 2 columns could be the path ('file', 'path')");
}

TEST_CASE("csv list: every bad row at once, named by the line it starts on") {
  TempDir t;
  write_text(t / "train.csv",
             "filename,label\n"          // 1
             "a.jpg,cat\n"               // 2
             "\"multi\nline.jpg\",cat\n"  // 3-4: a line break in a quoted path
             "b.jpg\n"                   // 5: one field
             ",cat\n"                    // 6: empty path
             "c.jpg,\n"                  // 7: empty label
             "\"d.jpg\",\"two\nlines\"\n"  // 8-9: a name with a line break
             "e.jpg,dog\n"               // 10
             "f.jpg,7\n");               // 11: an integer among names
  const std::string f = t / "train.csv";
  REQUIRE_USER_ERROR(read_csv_list(f), f + ": 6 malformed lines:");
  REQUIRE_USER_ERROR(read_csv_list(f), f + ":3: a line break in the path");
  REQUIRE_USER_ERROR(read_csv_list(f), f + ":5: 1 field; the header has 2 columns, the label "
                                           "('label') is column 1 (from 0)");
  REQUIRE_USER_ERROR(read_csv_list(f), f + ":6: empty path (column 'filename')");
  REQUIRE_USER_ERROR(read_csv_list(f), f + ":7: no label (column 'label' is empty)");
  REQUIRE_USER_ERROR(read_csv_list(f), f + ":8: class name 'two\\x0alines' holds a line break");
  REQUIRE_USER_ERROR(read_csv_list(f), f + ":11: label '7' is an integer, but the list gives "
                                           "class names (line 2: 'cat')");
  // A NUL byte in a path is refused as in a list.
  write_bytes(t / "nul.csv", {'p', 'a', 't', 'h', ',', 'l', 'a', 'b', 'e', 'l', '\n',
                              'a', 0, 'b', ',', '1', '\n'});
  REQUIRE_USER_ERROR(read_csv_list(t / "nul.csv"), "nul.csv:2: a NUL byte in the path");
}

TEST_CASE("csv list: a syntax error stops at its line, reported with the rows before it") {
  TempDir t;
  write_text(t / "quote.csv", "path,label\na.jpg,\nb\"c.jpg,1\nd.jpg,x\n");
  const std::string f = t / "quote.csv";
  REQUIRE_USER_ERROR(read_csv_list(f), f + ": 2 malformed lines:");
  REQUIRE_USER_ERROR(read_csv_list(f), f + ":2: no label");
  REQUIRE_USER_ERROR(read_csv_list(f), f + ":3: CSV syntax error: a quote inside an unquoted "
                                           "field, or text after a closing quote");
  write_text(t / "after.csv", "path,label\n\"a.jpg\"x,1\n");
  REQUIRE_USER_ERROR(read_csv_list(t / "after.csv"), "after.csv:2: CSV syntax error");
  write_text(t / "open.csv", "path,label\na.jpg,1\n\"b.jpg,1\nc.jpg,2\n");
  REQUIRE_USER_ERROR(read_csv_list(t / "open.csv"), "open.csv:3: CSV syntax error: a quoted field "
                                                    "that starts here is never closed");
}

TEST_CASE("csv list: empty files, a header alone, a missing file") {
  TempDir t;
  write_text(t / "empty.csv", "");
  REQUIRE_USER_ERROR(read_csv_list(t / "empty.csv"), "has no samples (not even a header row)");
  write_text(t / "header.csv", "image,label\r\n\r\n");
  REQUIRE_USER_ERROR(read_csv_list(t / "header.csv"), "has no samples (a header and no rows)");
  REQUIRE_USER_ERROR(read_csv_list(t / "nope.csv"), "CSV list '" + t / "nope.csv" +
                                                       "' does not exist");
}

TEST_CASE("csv list: read_images reads .csv (any case), or any list with csv_columns, as CSV") {
  TempDir t;
  write_text(t / "a.CSV", "image,label\nx.jpg,b\ny.jpg,a\n");
  REQUIRE(labels_of(read_images(t / "a.CSV")) == std::vector<int32_t>{1, 0});
  write_text(t / "b.txt", "f;g,h\nx.jpg;1,x.jpg\n");  // a list file by name, CSV by option
  ListOptions opt;
  opt.csv_columns = "h,0";
  REQUIRE(is_csv_list(t / "b.txt", opt));
  REQUIRE(!is_csv_list(t / "b.txt", {}));
  const ImageList l = read_images(t / "b.txt", opt);
  REQUIRE(l.samples[0].path == t / "x.jpg");
  REQUIRE(l.class_names == std::vector<std::string>{"x.jpg;1"});
  // Given classes resolve a CSV's names as they do a list's.
  opt = {};
  opt.classes = std::vector<std::string>{"a", "b", "c"};
  REQUIRE(labels_of(read_images(t / "a.CSV", opt)) == std::vector<int32_t>{1, 0});
}
