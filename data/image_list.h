// defines: Sample, ImageList, read_image_list (a list file), scan_class_folders (a folder per
// class), write_image_list, read_class_names / write_class_names, image_list_hash,
// class_histogram.
//
// A list file has one sample per line, a path and an integer label:
//
//   # comments start with '#' (after optional leading whitespace); blank lines are skipped
//   images/cat/001.jpg 3                 spaces: exactly two fields
//   images/my cat/002.jpg<TAB>3           a tab: the path is the text before the LAST tab, so
//                                         paths with spaces work when tab-separated
//   /data/abs/003.jpg 0                  absolute paths are kept as they are
//
// Policies (why: a mistake in a million-line list should be found in one pass, before any GPU
// memory is taken, not one line per run):
//  - Relative paths are resolved against the list file's folder. Every path in an ImageList is
//    absolute and lexically normal ("a/./b/../c" -> "a/c"), so the same list gives the same
//    paths (and hash) from any working directory. The image files are not opened here: a
//    missing or broken image is a bad file, skipped and counted by the loader.
//  - Fields are trimmed of surrounding whitespace; CRLF line ends and a UTF-8 byte-order mark
//    are tolerated. So a path cannot begin or end with whitespace, nor contain a tab.
//  - Malformed lines: no label; a label that is not a decimal integer; more than two fields
//    when space-separated (ambiguous: a path with spaces must be tab-separated); a tab inside
//    the path part; an empty path; a NUL byte in the path (the OS would open another file). Negative labels are always an error, and labels >= the class
//    count when it is known. ALL of them are collected and thrown as one cutrain::Error, the
//    first 20 shown as "train.txt:17: label 12 is outside [0, 10)", then a count of the rest.
//  - A list with no samples, a missing list and an unreadable list are errors naming the file.
//  - classes.txt: when a file of that name sits beside the list, line i names class i (see
//    read_class_names). Its names fill class_names; with num_classes == 0 its size becomes the
//    class count for the range check; with num_classes > 0 the two counts must agree.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace cutrain {

struct Sample {
  std::string path;  // absolute, lexically normal
  int32_t label;     // 0 <= label < class count
};

struct ImageList {
  std::vector<Sample> samples;
  std::vector<std::string> class_names;  // may be empty (no classes.txt beside the list)
  std::string source;                    // the list file or the scanned root, as given
};

// The file name looked for beside a list, and written by the folder-per-class mode.
constexpr const char* kClassNamesFile = "classes.txt";

// Reads a list file (format above). num_classes > 0 checks every label against it.
ImageList read_image_list(const std::string& list_path, int num_classes = 0);

// Folder-per-class mode: root/<class name>/<image>. Class folders are the sub-folders of root,
// sorted by name (byte order); class i is the i-th. Images are the files directly inside a
// class folder whose extension is jpg, jpeg, png, bmp, gif, tga, pgm, ppm or webp (any case),
// sorted by name; other files, files directly under root, nested folders and hidden entries
// (a name starting with '.') are ignored. Errors: root missing or not a folder; no class
// folders; any class folder without images (all of them named in one error: an empty class
// would silently shift every later label, so it is refused rather than skipped).
ImageList scan_class_folders(const std::string& root);

// What the commands accept as data: a folder is scanned a class per folder, anything else is
// read as a list file.
ImageList read_images(const std::string& list_or_folder, int num_classes = 0);

// Writes `path<TAB>label` lines; a path under the list's folder is written relative to it
// (so the folder can be moved with its list), any other path absolute; a relative path that
// would read as a comment, or lose its leading whitespace or byte-order mark, gets "./" in
// front. Written to
// a temporary file beside `path`, flushed, fsynced and renamed, so a crash never leaves a torn
// list. Refused: paths with a tab, line break or NUL, or leading/trailing whitespace; negative
// labels.
void write_image_list(const ImageList& list, const std::string& path);

// classes.txt: line i (0-based) is the name of class i. Trailing blank lines are ignored; an
// empty name before the last one and duplicate names are errors, as is a file with no names.
std::vector<std::string> read_class_names(const std::string& path);
// Written the same crash-safe way as write_image_list. Names must be non-empty, without line
// breaks or surrounding whitespace, and distinct.
void write_class_names(const std::vector<std::string>& names, const std::string& path);

// A stable 64-bit hash (FNV-1a) of the (path, label) sequence: for each sample the path's
// bytes, a 0 byte, then the label as 4 little-endian bytes. Independent of the machine's byte
// order; changes with any path, label or the order of samples. class_names and source are not
// part of it. Paths are absolute, so moving the data folder changes the hash.
uint64_t image_list_hash(const ImageList& list);

// counts[k] = number of samples with label k. Every label must be in [0, num_classes).
std::vector<int64_t> class_histogram(const ImageList& list, int num_classes);

}  // namespace cutrain
