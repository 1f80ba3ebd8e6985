// Fuzz target: image lists and classes.txt (data/image_list.h), as `cutrain train --train
// LIST` reads them.
//
// The input is read twice (the outcome reported is the second's, when there is one):
//  1. whole, as a list file with no classes.txt beside it (any label range);
//  2. split at its first NUL byte, when it has one: the bytes before it as the list, the bytes
//     after it as the classes.txt beside the list (so read_class_names, the class count and the
//     label range check are reached too).
// What the parser accepted is checked against its header's promises (paths absolute and
// lexically normal, labels in range), then hashed, counted, and written with write_image_list
// and read back: the copy must give the same samples.
#include <algorithm>
#include <cstring>
#include <filesystem>

#include "data/image_list.h"
#include "fuzz/feed.h"

namespace cutrain_fuzz {

namespace {

void check_list(const cutrain::ImageList& l) {
  fuzz_require(!l.samples.empty(), "an accepted list has samples");
  const int classes = int(l.class_names.size());
  int32_t max_label = 0;
  for (const cutrain::Sample& s : l.samples) {
    const std::filesystem::path p(s.path);
    fuzz_require(p.is_absolute() && p.lexically_normal() == p,
                 "path '" + s.path + "' is absolute and lexically normal");
    fuzz_require(s.label >= 0 && (classes == 0 || s.label < classes),
                 "label " + std::to_string(s.label) + " is in range");
    max_label = std::max(max_label, s.label);
  }
  (void)cutrain::image_list_hash(l);
  // (the histogram has a counter per class: a label of 10^9 is the caller's to allow or not)
  if (max_label < (1 << 16)) (void)cutrain::class_histogram(l, max_label + 1);
}

// write_image_list, then read_image_list of the copy (beside the original, so relative paths
// mean the same): the same samples must come back. The writer may refuse a path it cannot
// write (a line break, a tab); that is a clean refusal.
void check_round_trip(const cutrain::ImageList& l) {
  const std::string copy = scratch_file("copy.txt", nullptr, 0);
  const Outcome o = refuse_errors([&] { cutrain::write_image_list(l, copy); });
  if (o == Outcome::refused) return;
  const cutrain::ImageList back = cutrain::read_image_list(copy);
  fuzz_require(back.samples.size() == l.samples.size(), "the copy has as many samples");
  for (size_t i = 0; i < l.samples.size(); i++)
    fuzz_require(back.samples[i].path == l.samples[i].path &&
                     back.samples[i].label == l.samples[i].label,
                 "sample " + std::to_string(i) + " '" + l.samples[i].path +
                     "' reads back from the copy as '" + back.samples[i].path + "'");
}

Outcome read_list(const std::string& path) {
  return refuse_errors([&] {
    const cutrain::ImageList l = cutrain::read_image_list(path);
    check_list(l);
    check_round_trip(l);
  });
}

}  // namespace

Outcome feed_image_list(const uint8_t* data, size_t size) {
  scratch_remove(cutrain::kClassNamesFile);
  const Outcome whole = read_list(scratch_file("list.txt", data, size));
  const void* nul = size ? std::memchr(data, 0, size) : nullptr;
  if (nul == nullptr) return whole;
  const size_t n = size_t(static_cast<const uint8_t*>(nul) - data);
  scratch_file(cutrain::kClassNamesFile, data + n + 1, size - n - 1);
  const Outcome split = read_list(scratch_file("list.txt", data, n));
  scratch_remove(cutrain::kClassNamesFile);
  return split;  // what an input with a NUL means
}

}  // namespace cutrain_fuzz

CUTRAIN_FUZZ_TARGET(cutrain_fuzz::feed_image_list)
