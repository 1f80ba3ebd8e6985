// defines: Sample, ImageList, ListOptions, read_image_list (a list file), read_csv_list (a CSV
// file with a header), scan_class_folders (a folder per class), read_images (whichever of
// them a path is), csv_columns_problem, write_image_list, read_class_names /
// write_class_names, image_list_hash, class_histogram.
//
// A list file has one sample per line, a path and a label (an integer or a class name):
//
//   # comments start with '#' (after optional leading whitespace); blank lines are skipped
//   images/cat/001.jpg 3                 spaces: exactly two fields
//   images/my cat/002.jpg<TAB>3           a tab: the path is the text before the LAST tab, so
//                                         paths with spaces work when tab-separated
//   /data/abs/003.jpg 0                  absolute paths are kept as they are
//   images/004.jpg<TAB>ankle boot         a class name (with spaces: the tab form)
//
// Policies (why: a mistake in a million-line list should be found in one pass, before any GPU
// memory is taken, not one line per run):
//  - Relative paths are resolved against the list file's folder. Every path in an ImageList is
//    absolute and lexically normal ("a/./b/../c" -> "a/c"), so the same list gives the same
//    paths (and hash) from any working directory. The image files are not opened here: a
//    missing or broken image is a bad file, skipped and counted by the loader.
//  - Fields are trimmed of surrounding whitespace; CRLF line ends and a UTF-8 byte-order mark
//    are tolerated. So a path cannot begin or end with whitespace, nor contain a tab.
//  - Malformed lines: no label; more than two fields when space-separated (ambiguous: a path
//    or a class name with spaces must be tab-separated); a tab inside the path part; an empty
//    path; a NUL byte in the path (the OS would open another file); a label that is wrong by
//    the rules below. ALL of them are collected and thrown as one cutrain::UserError, the
//    first 20 shown as "train.txt:17: label 12 is outside [0, 10)", then a count of the rest.
//  - A list with no samples, a missing list and an unreadable list are errors naming the file.
//  - classes.txt: when a file of that name sits beside the list, line i names class i (see
//    read_class_names). Its names fill class_names; with num_classes == 0 its size becomes the
//    class count for the range check; with num_classes > 0 the two counts must agree.
//
// Labels: integers or class names. A label is an integer when it is an optional '-' and
// decimal digits ("3.0" and "+3" are names).
//  - Every label an integer: each is a class index, exactly as lists always were (classes.txt
//    only names the classes and bounds the range; a class NAMED "3" plays no part). Negative
//    labels are errors, and labels >= the class count when it is known.
//  - Any label a name: the names are looked up in the known classes, which are
//    ListOptions::classes when given (a validation or test list resolved against the training
//    classes, by name), else the classes.txt beside the list.
//      * known classes: a label that is a known name is that class; an integer label that is
//        not a known name is an index, as above (so names and indices may mix); an integer
//        label that is the name of ANOTHER class ("3" naming class 5) is ambiguous and refused;
//        a name that is not known is refused, and the error ends with the names that were not
//        found and the known classes.
//      * no known classes: the distinct names, sorted by byte order (as scan_class_folders
//        sorts its folders), are the classes, class_names is set to them, and every label must
//        be a name: an index means nothing against classes sorted from the list itself, so a
//        list mixing the two is refused (the labels of the rarer kind are the lines reported).
//        The caller (`cutrain train`) keeps these names with the run, so eval and predict map
//        names the same way.
//    A class whose name looks like an integer ("1", "2", ...) therefore needs a classes.txt
//    (or the integer form of the list, indices with a classes.txt naming them). A name a list
//    introduces must be UTF-8 text without a line break or a NUL byte: the run keeps its class
//    names in JSON (config.json, checkpoints) and they must be writable to a classes.txt.
//
// CSV files (read_csv_list; read_images picks it for a name ending in .csv, any case, or when
// ListOptions::csv_columns is set), as data sets ship them:
//
//   filename,class
//   images/001.jpg,ankle boot
//   "images/with, comma.jpg","a ""quoted"" name"
//
//  - Parsed by libcsv in strict mode: fields separated by commas, quoted with '"' (a quote
//    inside doubled), quoted fields may hold commas and line breaks; CRLF and a UTF-8
//    byte-order mark are tolerated; blank lines are skipped; no comments. A syntax error (a
//    quote inside an unquoted field, text after a closing quote, a quote never closed) ends
//    the reading at its line, reported with the problems of the rows before it: what follows
//    cannot be split reliably.
//  - The first row is always the header. The path column is the one named image, filename,
//    file, path or image_path; the label column the one named label, class, category or
//    target (names compared without case or surrounding spaces). None or two candidates is
//    an error naming the header's columns. csv_columns "PATH,LABEL" chooses them instead, each
//    a header name or a 0-based column index (digits only). Other columns are ignored.
//  - Rows are checked like list lines ("data.csv:7: ...", the line where the row starts;
//    lines are counted by their LF): too few fields, an empty path or label, a NUL or a line
//    break in the path or the label, and the label rules above. Relative paths are relative
//    to the CSV's folder; classes.txt beside it counts as for a list.
#pragma once
#include <cstdint>
#include <optional>
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

// How a list is read (the defaults read it on its own, as `cutrain check-data` does).
struct ListOptions {
  int num_classes = 0;  // > 0: every label must be below it (and classes.txt must agree)
  // Given: the classes that class names in the list resolve against, instead of the
  // classes.txt beside it or the list's own sorted names; `classes_source` names them in
  // errors. An empty vector given means "the classes have no names": a name is then an error.
  std::optional<std::vector<std::string>> classes;
  std::string classes_source = "the given classes";
  std::string csv_columns;  // "PATH,LABEL" for CSV files (names or 0-based indices); "": the
                            // defaults. Set, read_images reads any list file as CSV
};

// Reads a list file (format above). num_classes > 0 checks every label against it.
ImageList read_image_list(const std::string& list_path, int num_classes = 0);
ImageList read_image_list(const std::string& list_path, const ListOptions& opt);

// Reads a CSV file with a header row (format above).
ImageList read_csv_list(const std::string& csv_path, const ListOptions& opt = {});

// "" when `spec` is a valid csv_columns ("" or "PATH,LABEL": two distinct non-empty entries,
// each a column name or a 0-based index), else what is wrong, for a message about the option.
std::string csv_columns_problem(const std::string& spec);

// Is `path` read as a CSV file: its name ends in .csv (any case), or csv_columns is set.
bool is_csv_list(const std::string& path, const ListOptions& opt);

// Folder-per-class mode: root/<class name>/<image>. Class folders are the sub-folders of root,
// sorted by name (byte order); class i is the i-th. Images are the files directly inside a
// class folder whose extension is jpg, jpeg, png, bmp, gif, tga, pgm, ppm or webp (any case),
// sorted by name; other files, files directly under root, nested folders and hidden entries
// (a name starting with '.') are ignored. Errors: root missing or not a folder; no class
// folders; any class folder without images (all of them named in one error: an empty class
// would silently shift every later label, so it is refused rather than skipped).
ImageList scan_class_folders(const std::string& root);

// What the commands accept as data: a folder is scanned a class per folder (its classes are
// its folders; of `opt` only num_classes applies), a CSV file (is_csv_list) read by
// read_csv_list, anything else read as a list file.
ImageList read_images(const std::string& list_or_folder, int num_classes = 0);
ImageList read_images(const std::string& list_or_folder, const ListOptions& opt);

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
