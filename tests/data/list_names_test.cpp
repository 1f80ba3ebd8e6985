// Labels as class names in image lists (data/image_list.h, "Labels"): names sorted like class
// folders, resolved through classes.txt or through the classes a caller gives (the training
// classes), integer lists exactly as before, mixing and ambiguity, every bad line at once.
// Every test writes real list files to a fresh temporary folder.
#include <filesystem>

#include "data/image_list.h"
#include "data/list_rows.h"
#include "tests/data/list_fixture.h"
#include "tests/data/temp_dir.h"
#include "tests/test_util.h"

using namespace cutrain;
using cutrain_test::labels_of;
using cutrain_test::TempDir;
using cutrain_test::write_text;
namespace fs = std::filesystem;

TEST_CASE("list names: collected and sorted by byte order, the same order as class folders") {
  TempDir t;
  write_text(t / "train.txt",
             "a.jpg shoe\n"
             "b.jpg\tankle boot\n"         // a name with a space: the tab form
             "c.jpg bag\n"
             "d.jpg Bag\n"                 // upper case sorts first in byte order
             "e.jpg\t\xC3\xA9t\xC3\xA9\n"  // "été": UTF-8 bytes sort after ASCII
             "f.jpg shoe\n"
             "my shoe.jpg\tshoe\n");
  const ImageList l = read_image_list(t / "train.txt");
  const std::vector<std::string> want = {"Bag", "ankle boot", "bag", "shoe", "\xC3\xA9t\xC3\xA9"};
  REQUIRE(l.class_names == want);
  REQUIRE(labels_of(l) == std::vector<int32_t>{3, 1, 2, 0, 4, 3, 3});
  REQUIRE(l.samples[6].path == t / "my shoe.jpg");

  // Folders of the same names are scanned into the same classes, in the same order.
  for (const std::string& name : want) write_text(t / ("folders/" + name + "/x.jpg"), "");
  REQUIRE(scan_class_folders(t / "folders").class_names == want);

  // The hash is over resolved labels: the same as the integer list of those labels.
  write_text(t / "ints.txt", "a.jpg 3\nb.jpg 1\nc.jpg 2\nd.jpg 0\ne.jpg 4\nf.jpg 3\n"
                             "my shoe.jpg\t3\n");
  REQUIRE(image_list_hash(l) == image_list_hash(read_image_list(t / "ints.txt")));
}

TEST_CASE("list names: a list of integers reads exactly as before, whatever classes.txt names") {
  TempDir t;
  // Numeric class names in another order: integer labels stay indices, never names.
  write_text(t / "classes.txt", "2\n0\n1\n");
  write_text(t / "ints.txt", "a.jpg 2\nb.jpg 0\nc.jpg 1\n");
  const ImageList l = read_image_list(t / "ints.txt");
  REQUIRE(labels_of(l) == std::vector<int32_t>{2, 0, 1});
  REQUIRE(l.class_names == std::vector<std::string>{"2", "0", "1"});
  write_text(t / "over.txt", "a.jpg 3\n");
  REQUIRE_USER_ERROR(read_image_list(t / "over.txt"), "over.txt:1: label 3 is outside [0, 3)");
}

TEST_CASE("list names: classes.txt beside the list maps names; unknown names listed with it") {
  TempDir t;
  write_text(t / "classes.txt", "shoe\nbag\nankle boot\n");  // not sorted: its order counts
  write_text(t / "val.txt", "a.jpg bag\nb.jpg\tankle boot\nc.jpg shoe\n");
  const ImageList l = read_image_list(t / "val.txt");
  REQUIRE(labels_of(l) == std::vector<int32_t>{1, 2, 0});
  REQUIRE(l.class_names == std::vector<std::string>{"shoe", "bag", "ankle boot"});

  write_text(t / "bad.txt", "a.jpg bag\nb.jpg hat\nc.jpg Shoe\nd.jpg hat\n");
  const std::string f = t / "bad.txt";
  REQUIRE_USER_ERROR(read_image_list(f), "3 malformed lines:");
  REQUIRE_USER_ERROR(read_image_list(f), f + ":2: unknown class 'hat'");
  REQUIRE_USER_ERROR(read_image_list(f), f + ":3: unknown class 'Shoe'");
  REQUIRE_USER_ERROR(read_image_list(f), f + ":4: unknown class 'hat'");
  REQUIRE_USER_ERROR(read_image_list(f), "2 class names are not among " + t / "classes.txt" +
                                             ": 'Shoe', 'hat'");
  REQUIRE_USER_ERROR(read_image_list(f), t / "classes.txt" + " (3): 'shoe', 'bag', 'ankle boot'");
}

TEST_CASE("list names: with known classes, integers are indices, and '3' naming class 5 is refused") {
  TempDir t;
  write_text(t / "classes.txt", "cat\n1\ndog\n7\n");
  write_text(t / "mixed.txt", "a.jpg cat\nb.jpg 2\nc.jpg 1\nd.jpg dog\n");
  // "1" is the name of class 1 and index 1: the same either way.
  REQUIRE(labels_of(read_image_list(t / "mixed.txt")) == std::vector<int32_t>{0, 2, 1, 2});
  write_text(t / "ambiguous.txt", "a.jpg cat\nb.jpg 7\nc.jpg 4\n");
  const std::string f = t / "ambiguous.txt";
  REQUIRE_USER_ERROR(read_image_list(f), f + ":2: label '7' is ambiguous: the name of class 3 in " +
                                             t / "classes.txt" + ", or class index 7");
  REQUIRE_USER_ERROR(read_image_list(f), f + ":3: label 4 is outside [0, 4) (the integer labels "
                                             "of a list with class names are indices into");
}

TEST_CASE("list names: without classes.txt a list mixing names and indices is refused") {
  TempDir t;
  // Mostly names: the integers are reported.
  write_text(t / "names.txt", "a.jpg cat\nb.jpg dog\nc.jpg 3\nd.jpg cat\n");
  const std::string n = t / "names.txt";
  REQUIRE_USER_ERROR(read_image_list(n), "1 malformed line:");
  REQUIRE_USER_ERROR(read_image_list(n), n + ":3: label '3' is an integer, but the list gives "
                                             "class names (line 1: 'cat')");
  // Mostly integers: the name is reported, and the integers are still range-checked.
  write_text(t / "ints.txt", "a.jpg 0\nb.jpg 1\nc.jpg cat\nd.jpg 2\ne.jpg 12\n");
  const std::string i = t / "ints.txt";
  REQUIRE_USER_ERROR(read_image_list(i, 10), "2 malformed lines:");
  REQUIRE_USER_ERROR(read_image_list(i, 10), i + ":3: label 'cat' is not an integer, but the "
                                                 "list gives class indices (line 1: '0')");
  REQUIRE_USER_ERROR(read_image_list(i, 10), i + ":5: label 12 is outside [0, 10)");
}

TEST_CASE("list names: given classes (the training ones) win over classes.txt and own sorting") {
  TempDir t;
  write_text(t / "classes.txt", "bag\nshoe\n");  // ignored for names when classes are given
  write_text(t / "val.txt", "a.jpg shoe\nb.jpg\tankle boot\nc.jpg shoe\n");
  ListOptions opt;
  opt.classes = std::vector<std::string>{"ankle boot", "bag", "coat", "shoe"};
  opt.classes_source = "the training classes";
  const ImageList l = read_image_list(t / "val.txt", opt);
  REQUIRE(labels_of(l) == std::vector<int32_t>{3, 0, 3});  // own sorting would say 1, 0, 1
  REQUIRE(l.class_names == *opt.classes);

  write_text(t / "more.txt", "a.jpg shoe\nb.jpg hat\nc.jpg sock\n");
  const std::string f = t / "more.txt";
  REQUIRE_USER_ERROR(read_image_list(f, opt), f + ":2: unknown class 'hat'");
  REQUIRE_USER_ERROR(read_image_list(f, opt), "2 class names are not among the training classes: "
                                              "'hat', 'sock'");
  REQUIRE_USER_ERROR(read_image_list(f, opt), "the training classes (4): 'ankle boot', 'bag', "
                                              "'coat', 'shoe'");
  // Training data with integer labels and no names: a list of names cannot be mapped.
  opt.classes = std::vector<std::string>{};
  REQUIRE_USER_ERROR(read_image_list(t / "val.txt", opt),
                     "the training classes have no names (integer labels and no classes.txt)");
  // An integer list is read as always, given classes or not.
  write_text(t / "ints.txt", "a.jpg 1\n");
  REQUIRE(labels_of(read_image_list(t / "ints.txt", opt)) == std::vector<int32_t>{1});
}

TEST_CASE("list names: every bad line at once, the first 20 in line order, then the rest counted") {
  TempDir t;
  write_text(t / "classes.txt", "cat\n");
  std::string text = "ok.jpg cat\n"
                     "a.jpg my cat\n";  // 2: three fields: a name with spaces needs the tab
  for (int i = 0; i < 24; i++) text += "x" + std::to_string(i) + ".jpg dog\n";  // 3..26
  text += "nolabel.jpg\n";                                                      // 27
  write_text(t / "l.txt", text);
  const std::string f = t / "l.txt";
  REQUIRE_USER_ERROR(read_image_list(f), "26 malformed lines:");
  REQUIRE_USER_ERROR(read_image_list(f), f + ":2: 3 space-separated fields; expected 'path label' "
                                             "(a path or a class name with spaces needs a tab");
  REQUIRE_USER_ERROR(read_image_list(f), f + ":21: unknown class 'dog'");
  REQUIRE_USER_ERROR(read_image_list(f), "... and 6 more");
  std::string msg;
  try {
    read_image_list(f);
  } catch (const Error& e) {
    msg = e.what();
  }
  // Lines 22..27 are counted, not shown, though line 27's problem was found first.
  REQUIRE(msg.find(f + ":27:") == std::string::npos);
  REQUIRE(msg.find(f + ":2:") < msg.find(f + ":3:"));
}

TEST_CASE("list names: a name the list introduces must be UTF-8 (the run keeps names in JSON)") {
  TempDir t;
  write_text(t / "latin1.txt", "a.jpg caf\xE9\nb.jpg\tcaf\xC3\xA9 au lait\nc.jpg tea\n");
  REQUIRE_USER_ERROR(read_image_list(t / "latin1.txt"), "1 malformed line:");
  // The name printed with the byte that is not UTF-8 escaped, and where that byte is.
  REQUIRE_USER_ERROR(read_image_list(t / "latin1.txt"),
                     "latin1.txt:1: class name 'caf\\xe9' is not UTF-8 text (byte 3 of "
                     "the name): save the list as UTF-8");
}

TEST_CASE("list names: a classes.txt or a class folder that is not UTF-8 is refused, naming where") {
  TempDir t;
  // classes.txt in Latin-1: line 2's name, its 0xE9 at byte 8 of the file ("cat\r\n" + "caf").
  write_text(t / "a/classes.txt", "cat\r\ncaf\xE9\ndog\n");
  write_text(t / "a/list.txt", "x.jpg 0\n");
  REQUIRE(first_non_utf8("caf\xC3\xA9") == -1);
  REQUIRE(first_non_utf8("caf\xE9") == 3);
  REQUIRE(first_non_utf8("\xC3") == 0);  // a sequence cut short
  REQUIRE_USER_ERROR(read_class_names(t / "a/classes.txt"),
                     "classes.txt:2: the class name 'caf\\xe9' is not UTF-8 text (byte 8 "
                     "of the file): save classes.txt as UTF-8");
  REQUIRE_USER_ERROR(read_image_list(t / "a/list.txt"), "is not UTF-8 text (byte 8 of the file)");
  // A class folder whose name is Latin-1 (Linux names are bytes): refused, naming it.
  write_text(t / "b/ok/1.jpg", "\xFF\xD8");
  write_text(t / "b/caf\xE9/1.jpg", "\xFF\xD8");
  REQUIRE_USER_ERROR(scan_class_folders(t / "b"),
                     "b/caf\\xe9': its name is not UTF-8 text (byte 3 of the name): "
                     "rename the folder");
}

TEST_CASE("list names: num_classes bounds the names a list may introduce") {
  TempDir t;
  write_text(t / "l.txt", "a.jpg cat\nb.jpg dog\nc.jpg emu\n");
  REQUIRE(read_image_list(t / "l.txt", 3).class_names.size() == 3);
  REQUIRE_USER_ERROR(read_image_list(t / "l.txt", 2), "names 3 classes, but 2 were asked for");
}
